"""`algosel evaluate --layers FILE --compare-model DIR` (a model on a user's own layers against another model and
the baselines), its metric functions, and `algosel train` on two datasets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, SLICE

from algosel.candidates import DEFAULT_ID
from algosel.cli import main
from algosel.learn.evaluate import Prepared, with_pytorch_fallback
from algosel.learn.evaluate_networks import layers_totals, models_table, time_totals
from algosel.learn.selector import Selector
from algosel.measure.layer_table import LAYER_FIELDS, SUITE_COLUMNS
from algosel.measure.layers import load_layers, write_layers
from algosel.problem import ConvProblem
from algosel.records import load_records, write_part
from algosel.study.evaluation_layers import LAYERS_SELECTORS, run_layers_evaluation

SHIPPED = REPO / "models" / "joint-h100-h200-cudnn91900"


def _one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"algosel {command}: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def toy_layers(tmp_path_factory) -> Path:
    """A network of four layers whose shapes the slice recorded (the third twice: ``calls`` 2)."""
    frame, _ = load_records(SLICE)
    shapes = frame[frame["source"] == "suite:densenet121"].drop_duplicates("case_key")
    shapes = shapes.drop_duplicates(subset=list(LAYER_FIELDS)).head(4)
    assert len(shapes) == 4
    rows = shapes[list(LAYER_FIELDS)].assign(network="toy", layer=[f"l{i}" for i in range(4)], size="56x56")
    rows["calls"] = [1, 1, 2, 1]
    return write_layers(rows, tmp_path_factory.mktemp("layers") / "toy.csv")


def test_models_table_scores_each_model_on_the_same_problems(slice_model, toy_layers: Path) -> None:
    frame, envs = load_records(SLICE)
    shapes = {
        ConvProblem(**{f: int(r[f]) for f in LAYER_FIELDS}).shape_key
        for r in load_layers(toy_layers).to_dict("records")
    }
    keys = [k for k in frame["problem_key"].unique() if ConvProblem.from_key(k).shape_key in shapes]
    subset = frame[frame["problem_key"].isin(keys)]
    prep = Prepared.build(subset, envs)
    models = {"model": Selector.load(slice_model[0], force=True), "compare_model": Selector.load(SHIPPED, force=True)}
    table = models_table(subset, prep, models)
    assert sorted(table.index) == sorted(keys)
    ok = subset[subset["status"] == "ok"].set_index(["problem_key", "candidate_id"])["time_ms_median"]
    for name in models:
        for key, row in table.iterrows():
            # a model's time is the measured time of the candidate it picked, never better than the best
            assert row[name] == pytest.approx(ok[(key, row[f"{name}_candidate"])])
            assert row[name] >= row["best"] - 1e-12
    assert {"heuristic_a", "heuristic_b", "pytorch_default"} <= set(table.columns)


def _table() -> pd.DataFrame:
    p = ConvProblem(n=1, c=4, k=4, h=4, w=4, r=1, s=1)
    q = p.replace(k=8)
    keys = [x.key for y in (p, q) for x in y.directions()]
    best = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    return pd.DataFrame(
        {
            "direction": ["fwd", "bwd_data", "bwd_filter"] * 2,
            "dtype": "float32",
            "layout": "nchw",
            "best": best,
            "model": [b * 1.5 for b in best],
            "pytorch_default": [2.0 * b for b in best[:5]] + [np.nan],
        },
        index=keys,
    )


def test_time_totals_sum_the_problems_every_selector_has() -> None:
    totals = time_totals(_table(), ["model", "pytorch_default"]).set_index(["group", "value", "selector"])
    # the last problem has no PyTorch time: both totals leave it out
    assert totals.at[("all", "all", "model"), "problems"] == 5
    assert totals.at[("all", "all", "model"), "best_ms"] == pytest.approx(15.0)
    assert totals.at[("all", "all", "model"), "total_ms"] == pytest.approx(22.5)
    assert totals.at[("all", "all", "pytorch_default"), "total_vs_best"] == pytest.approx(2.0)
    assert totals.at[("direction", "fwd", "model"), "total_ms"] == pytest.approx(1.5 * (1 + 4))


def test_layers_totals_weigh_calls_and_skip_the_input_gradient_of_the_first_layer() -> None:
    table = with_pytorch_fallback(_table(), ["model"])
    base = {f: v for f, v in ConvProblem(n=1, c=4, k=4, h=4, w=4, r=1, s=1).to_dict().items() if f in LAYER_FIELDS}
    layers = pd.DataFrame([{**base, "network": "net", "layer": "a", "size": "4x4", "calls": 1},
                           {**base, "k": 8, "network": "net", "layer": "b", "size": "4x4", "calls": 3}])  # fmt: skip
    got = layers_totals(table, {"f.csv": layers}, ["model", "pytorch_default"]).iloc[0]
    # layer a: fwd 1 + bwd_filter 3 (its bwd_data is left out); layer b, 3 calls: (4 + 5) (its bwd_filter has no
    # PyTorch time: missing, left out of every sum)
    assert (got["calls"], got["missing_calls"]) == (2 + 2 * 3, 3)
    assert got["best_ms"] == pytest.approx(1 + 3 + 3 * (4 + 5))
    assert got["model_vs_best"] == pytest.approx(1.5)
    assert got["pytorch_default_ms"] == pytest.approx(2 * got["best_ms"])
    # the recorder's file is shapes, not a network in order: every direction counts
    unseen = layers_totals(table, {"u.csv": layers.assign(network="unseen")}, ["model"]).iloc[0]
    assert unseen["best_ms"] == pytest.approx(1 + 2 + 3 + 3 * (4 + 5 + 6))


def test_run_layers_evaluation_writes_the_tables(slice_model, toy_layers: Path, tmp_path: Path) -> None:
    text = run_layers_evaluation(str(slice_model[0]), [str(SLICE)], [str(toy_layers)], str(SHIPPED), str(tmp_path))
    assert "Your layers" in text and "4 shapes, 4 of them in the records" in text
    assert "Whole networks of the layers files" in text and "Total time over these problems" in text
    report = json.loads((tmp_path / "layers_report.json").read_text())
    assert report["shapes"] == report["recorded_shapes"] == 4
    comp = pd.read_csv(tmp_path / "layers_report.csv")
    assert set(comp["selector"]) == set(LAYERS_SELECTORS)
    networks = pd.read_csv(tmp_path / "layers_totals.csv")
    assert set(networks["network"]) == {"toy"} and set(networks["dtype"]) == {"float32", "float16"}
    problems = pd.read_csv(tmp_path / "layers_problems.csv")  # per problem: every selector's time and pick
    assert len(problems) == report["problems"] and problems["problem_key"].is_unique
    for name in ("model", "compare_model", "pytorch_default"):
        assert (problems[name] >= problems["best"] - 1e-12).all() and problems[f"{name}_candidate"].notna().all()
    assert "Where the two models' picks differ most" in text
    # every layer in every direction (minus the first's bwd_data), layer l2 twice
    row = networks[(networks["dtype"] == "float32") & (networks["layout"] == "nchw")].iloc[0]
    assert row["calls"] + row["missing_calls"] == 1 * 2 + 1 * 3 + 2 * 3 + 1 * 3
    for name in LAYERS_SELECTORS:
        assert row[f"{name}_vs_best"] >= 1.0 - 1e-9


def test_cli_evaluate_on_layers_with_a_compare_model(slice_model, toy_layers: Path, tmp_path: Path, capsys) -> None:
    argv = ["evaluate", "--model", str(slice_model[0]), "--data", str(SLICE), "--no-lono", "--no-progress"]
    argv += ["--layers", str(toy_layers), "--compare-model", str(SHIPPED), "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Held-out shapes" in out and "Your layers" in out and "compare_model" in out
    assert (tmp_path / "report.csv").is_file() and (tmp_path / "layers_totals.csv").is_file()


def test_cli_evaluate_layers_errors(slice_model, tmp_path: Path, capsys) -> None:
    base = ["evaluate", "--model", str(slice_model[0]), "--data", str(SLICE), "--no-lono", "--no-progress"]
    assert main([*base, "--compare-model", str(SHIPPED), "--out", str(tmp_path / "a")]) == 2
    assert "give --layers" in _one_line_error(capsys.readouterr().err, "evaluate")
    bad = tmp_path / "bad.csv"
    bad.write_text(",".join(SUITE_COLUMNS) + "\nnet,a,1,2,3,4,4,3,3,1,1,1,1,1,1,x,4x4\n")
    assert main([*base, "--layers", str(bad), "--out", str(tmp_path / "b")]) == 2
    line = _one_line_error(capsys.readouterr().err, "evaluate")
    assert f"{bad}, line 2, column 'groups'" in line
    assert not (tmp_path / "b").exists(), "validated before the evaluation ran"
    unknown = write_layers(
        pd.DataFrame([{"network": "n", "layer": "a", **dict.fromkeys(LAYER_FIELDS, 1), "size": "1x1", "k": 3}]),
        tmp_path / "unknown.csv",
    )
    assert main([*base, "--layers", str(unknown), "--out", str(tmp_path / "c")]) == 2
    assert "hold none of the 1 shapes" in _one_line_error(capsys.readouterr().err, "evaluate")
    legacy = str(REPO / "models" / "h200-cudnn91900-legacy")
    assert main([*base, "--layers", str(unknown), "--compare-model", legacy, "--out", str(tmp_path / "d")]) == 2
    assert "compare models of one space" in _one_line_error(capsys.readouterr().err, "evaluate")


# ------------------------------------------------------------------------------------- train on two datasets
def test_train_on_two_datasets_uses_both(slice_model, tmp_path: Path, capsys) -> None:
    frame, envs = load_records(SLICE)
    shapes = sorted(frame["case_key"].unique())
    half = set(shapes[: len(shapes) // 2])
    first = frame[frame["case_key"].isin(half)]
    second = frame[~frame["case_key"].isin(half)]
    write_part(tmp_path / "a" / "part-a.parquet", first.to_dict("records"), envs.values())
    write_part(tmp_path / "b" / "part-b.parquet", second.to_dict("records"), envs.values())
    argv = ["train", str(tmp_path / "a"), str(tmp_path / "b"), "--models", str(tmp_path / "m"), "--name", "union"]
    assert main([*argv, "--params-from", str(slice_model[0]), "--folds", "2", "--no-progress"]) == 0
    assert "wrote" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "m" / "union" / "manifest.json").read_text())
    assert manifest["problems"] == frame["problem_key"].nunique()
    assert manifest["data"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    source = json.loads((slice_model[0] / "manifest.json").read_text())["params"]
    assert manifest["params"] == source, "the hyperparameters of --params-from, threads included (default 2)"
    assert len(manifest["tuning"]) == 1, "no grid searched"
    assert not math.isnan(manifest["test_scores"]["model"]["geomean"])


def test_params_from_takes_the_shipped_models_hyperparameters(tmp_path: Path, capsys) -> None:
    argv = ["train", str(tmp_path / "none"), "--params-from", str(tmp_path / "not-a-model"), "--no-progress"]
    assert main(argv) == 2
    assert "not a model directory" in _one_line_error(capsys.readouterr().err, "train")


def test_the_models_differences_list_the_problems_furthest_apart_first() -> None:
    from algosel.study.evaluation_text import format_model_differences

    table = pd.DataFrame(
        {"best": [1.0, 1.0, 1.0], "model": [1.0, 4.0, 1.02], "compare_model": [2.0, 1.0, 1.0],
         "pytorch_default": [3.0, 4.0, 1.5], "model_candidate": ["a", "b", "c"],
         "compare_model_candidate": ["x", "y", "z"], "pytorch_default_candidate": [DEFAULT_ID] * 3},
        index=pd.Index(["p1", "p2", "p3"], name="problem_key"),
    )  # fmt: skip
    lines = format_model_differences(table).splitlines()
    assert len(lines) == 3  # the header, p2 (4x apart), p1 (2x); p3 is within 5%
    assert lines[1].split()[:4] == ["p2", "1.0", "b", "4.00x"] and lines[2].split()[:4] == ["p1", "1.0", "a", "1.00x"]
    same = table.assign(compare_model=table["model"])
    assert format_model_differences(same) == "(none: every pick within 5% of the other's time)"
