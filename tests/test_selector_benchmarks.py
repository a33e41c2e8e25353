"""benchmarks/ranker_settings.py (the ranker's settings over seeds) on a third of the committed slice of the H200
records, and benchmarks/pick_stability.py on made-up records.

The script runs as a user runs it (a subprocess) for the errors it finds before importing any library; its scores
and the errors of ``--setting`` and ``--seeds`` (found after LightGBM's import, seconds of a process each) are
checked on its ``main`` in this process, from the repository's root as its default paths expect."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import REPO, SLICE, slice_third

from algosel.candidates import DEFAULT_ID


def _refit_script_error(script: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _ranker_settings():
    """benchmarks/ranker_settings.py as a module."""
    spec = importlib.util.spec_from_file_location("ranker_settings", REPO / "benchmarks" / "ranker_settings.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_ranker_settings_fits_a_ranker_per_direction_on_the_same_problems(tmp_path, monkeypatch, capsys):
    from algosel.learn.evaluate import is_test_shape
    from algosel.problem import ConvProblem
    from algosel.records import load_records

    out = tmp_path / "settings.json"
    monkeypatch.chdir(REPO)
    argv = ["--data", str(SLICE), "--folds", "2", "--seeds", "0", "--threads", "1", "--split", "direction", "--out",
            str(out)]  # fmt: skip
    assert _ranker_settings().main(argv) == 0, capsys.readouterr().err[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert json.loads(out.read_text())["split"] == "direction"
    keys = load_records(SLICE)[0]["problem_key"].unique()
    held = [k for k, test in zip(keys, is_test_shape([ConvProblem.from_key(k).shape_key for k in keys])) if test]
    # the three rankers' picks together cover every held-out problem once; those a training step runs are fewer
    assert row["held_out_problems"] == len(held)
    assert 0 < row["held_out_run_problems"] <= row["held_out_problems"] and row["held_out_run_geomean"] >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "1"], "--folds must be at least 2, got 1"),
        (["--data", "no/such/dir"], "--data no/such/dir does not exist"),
        (["--params-from", "data"], "--params-from data holds no model (no manifest.json)"),
    ],
)
def test_ranker_settings_says_in_one_line_which_records_folds_or_model_it_cannot_use(args, message):
    res = _refit_script_error("ranker_settings.py", args)
    assert res.returncode == 2 and res.stderr.strip() == f"ranker_settings.py: {message}", res.stderr


def test_ranker_settings_scores_each_setting_and_seed_both_ways_on_the_same_problems(tmp_path, monkeypatch, capsys):
    from algosel.learn.artifact import read_manifest

    out = tmp_path / "settings.json"
    data = slice_third(tmp_path / "data")  # 6 fits of the shipped model's settings: 7 s here, 14 s on all the slice
    joint = REPO / "models" / "joint-h100-h200-cudnn91900"
    leaves = read_manifest(joint)["params"]["num_leaves"]  # what --params-from sets
    argv = ["--data", str(data), "--folds", "2", "--seeds", "0,1", "--threads", "1", "--setting",
            'small={"n_estimators": 3, "num_leaves": 3}', "--setting", f'same={{"num_leaves": {leaves}}}', "--out",
            str(out)]  # fmt: skip
    monkeypatch.chdir(REPO)
    status = _ranker_settings().main(argv)
    printed = capsys.readouterr()
    assert status == 0, printed.err[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["setting"], r["seed"]) for r in rows] == [
        (s, seed) for s in ("base", "small", "same") for seed in (0, 1)
    ]
    assert rows[2]["params"] == {"n_estimators": 3, "num_leaves": 3}
    assert len({r["cv_problems"] for r in rows}) == 1 and len({r["held_out_problems"] for r in rows}) == 1
    for r in rows:
        assert r["cv_geomean"] >= 1 and r["held_out_geomean"] >= 1 and r["held_out_total_time_ratio"] >= 1
        assert 0 <= r["cv_within_5pct"] <= 1
    scores = [{k: v for k, v in r.items() if k.startswith(("cv_", "held_out_"))} for r in rows]
    # a setting is applied on top of --params-from's: one that sets what it already has scores the same, seed for
    # seed (training is deterministic), and one that changes the trees scores otherwise
    assert scores[4:6] == scores[0:2] and scores[2:4] != scores[0:2]
    means = [line for line in printed.out.splitlines() if " mean |" in line]
    assert [m.split()[0] for m in means] == ["base", "small", "same"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--setting", "lr0.1"], "ranker_settings.py: --setting 'lr0.1' is not NAME=JSON"),
        (
            ["--setting", "x={lr}"],
            "ranker_settings.py: --setting x: '{lr}' is not JSON (Expecting property name enclosed in double quotes)",
        ),
        (["--setting", 'x={"lr": 1}'], "ranker_settings.py: --setting x: 'lr' is not a RankerParams field to set"),
        (["--seeds", "0,a"], "ranker_settings.py: --seeds '0,a' is not comma-separated integers"),
    ],
)
def test_ranker_settings_says_in_one_line_what_it_cannot_use(args, message, capsys):
    assert _ranker_settings().main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.strip().startswith(message), captured.err


def test_pick_stability_carries_a_layers_pick_to_its_other_sizes():
    """benchmarks/pick_stability.py on one layer at three sizes: A's pick is timed on B against B's best and default;
    near pairs are the same batch with h and w within the ratio."""
    import pandas as pd

    from algosel.problem import ConvProblem

    spec = importlib.util.spec_from_file_location("pick_stability", REPO / "benchmarks" / "pick_stability.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # size -> (default, x, y) ms: at 32x32 x is fastest, at 36x36 x again, at 96x96 the default
    sizes = {32: (1.0, 0.5, 0.9), 36: (1.2, 0.6, 1.1), 96: (2.0, 3.0, 2.5)}
    rows = []
    for h, times in sizes.items():
        p = ConvProblem(n=8, c=16, k=16, h=h, w=h, r=3, s=3, pad_h=1, pad_w=1)
        for cid, t in zip((DEFAULT_ID, "cudnn:x", "cudnn:y"), times):
            rows.append({**p.to_dict(), "problem_key": p.key, "candidate_id": cid, "status": "ok", "time_ms_median": t})
    frame = pd.DataFrame(rows)
    every, near = script.pairs(frame, None), script.pairs(frame, 1.35)
    assert len(every) == 6 and len(near) == 2  # 32 <-> 36 only
    assert near["over_best"].tolist() == [1.0, 1.0] and near["a_gain"].tolist() == [2.0, 2.0]
    from96 = every[every["a_pick_is_default"]]  # 96's pick (the default) on 32 and 36: 2x and 2x their best
    assert sorted(from96["over_best"].round(3)) == [2.0, 2.0]
    lines = script.describe(near, "near")
    assert "2 pairs" in lines[0] and "within 3% of B's best 1.000" in lines[0]
    assert "slower than B's default 0.000" in lines[2] and "geomean over the default 0.500" in lines[2]
