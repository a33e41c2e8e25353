"""benchmarks/targeted_gain.py (what a GPU's targeted records buy a joint model) on the committed H200 slice and its
made-up H100 twin, whose problems are split between a "uniform" and a "targeted" dataset: the held-out problems of
each group, the fits' training rows and the errors. It tests the script's bookkeeping, never a model's quality."""

from __future__ import annotations

import importlib.util
import json
import zlib

import numpy as np
import pytest
from conftest import REPO, SLICE
from support import h100_env

from algosel.learn.evaluate import is_test_shape
from algosel.measure.steps import no_input_grad_shapes, runs_in_training
from algosel.measure.suites import load_suites
from algosel.problem import ConvProblem
from algosel.records import load_records
from algosel.records.store import write_part

JOINT = REPO / "models" / "joint-h100-h200-cudnn91900"
SMALL = ["--leaves", "7", "--trees", "8", "--threads", "1", "--params-from", str(JOINT)]


def _script():
    spec = importlib.util.spec_from_file_location("targeted_gain", REPO / "benchmarks" / "targeted_gain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def h100_parts(tmp_path_factory):
    """The slice as an H100 measured it, its shapes split by a hash: a uniform and a targeted dataset."""
    root = tmp_path_factory.mktemp("targeted-gain")
    frame, _ = load_records(SLICE)
    env = h100_env()
    h100 = frame.assign(env_id=env["env_id"], time_ms_median=frame["time_ms_median"] * 1.1)
    shape = h100["problem_key"].map(lambda k: ConvProblem.from_key(k).shape_key)
    targeted = shape.map(lambda s: zlib.crc32(f"t:{s}".encode()) % 3 == 0)
    for name, part in (("uniform", h100[~targeted]), ("targeted", h100[targeted])):
        rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                for r in part.to_dict("records")]  # fmt: skip
        write_part(root / name / f"part-{name}.parquet", rows, [env])
    return root


def _held_out_that_run(directory) -> int:
    frame, _ = load_records(directory)
    keys = frame.loc[frame["status"] == "ok", "problem_key"].unique()
    test = is_test_shape([ConvProblem.from_key(k).shape_key for k in keys])
    runs = runs_in_training(keys, no_input_grad_shapes([load_suites()]))
    return int((test & runs).sum())


def test_both_fits_are_scored_on_each_group_s_held_out_problems(h100_parts, tmp_path, capsys):
    out = tmp_path / "gain.json"
    args = ["--seeds", "0,1", "--h200", str(SLICE), "--h100", str(h100_parts / "uniform"), "--extra",
            str(h100_parts / "targeted"), "--out", str(out), *SMALL]  # fmt: skip
    _script().main(args)
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == ["base", "targeted"] and all(len(runs) == 2 for runs in results.values())
    expected = {"h200": _held_out_that_run(SLICE), "h100": _held_out_that_run(h100_parts / "uniform"),
                "h100-targeted": _held_out_that_run(h100_parts / "targeted")}  # fmt: skip
    assert min(expected.values()) > 0
    for runs in results.values():
        for run in runs:
            assert {g: s["problems"] for g, s in run["scores"].items()} == expected
            assert all(s["geomean"] >= 1.0 and 0.0 <= s["within_5pct"] <= 1.0 for s in run["scores"].values())
            # the per-family table covers the H100's held-out problems of both datasets
            assert sum(f["problems"] for f in run["h100_families"]) == expected["h100"] + expected["h100-targeted"]
    # The fits differ by the targeted records alone: the H200's and the uniform H100's scores may move, the
    # targeted group's training rows are the targeted fit's only.
    assert results["base"][0]["scores"] != results["targeted"][0]["scores"]
    assert "mean over seeds 0,1 (7 leaves):" in printed and printed.count("base      s") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fits", "base,everything"], "unknown fit 'everything': base or targeted"),
        (["--extra", "/nowhere/at/all"], "targeted_gain.py: "),
        (["--params-from", "/nowhere/model"], "targeted_gain.py: "),
    ],
)
def test_targeted_gain_says_in_one_line_what_it_cannot_use(h100_parts, args, message):
    base = ["--h200", str(SLICE), "--h100", str(h100_parts / "uniform"), "--extra", str(h100_parts / "targeted"),
            *SMALL]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        _script().main([*base, *args])
    text = str(exc.value)
    assert message in text and "\n" not in text
