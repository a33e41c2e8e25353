"""`algosel train`, `algosel evaluate` and `algosel predict` end to end on the committed slice."""

from __future__ import annotations

import json

from conftest import SLICE

from algosel.cli import main
from algosel.learn.artifact import verify_directory


def test_train_evaluate_predict(tmp_path, capsys):
    model = _train(tmp_path, capsys)
    _evaluate(model, tmp_path, capsys)
    _evaluate_into_the_model(model, capsys)
    _predict(model, capsys)


def _train(tmp_path, capsys):
    """``algosel train`` on the slice: the model, and the command that made it in its manifest and README."""
    assert (
        main(
            [
                "train",
                str(SLICE),
                "--models",
                str(tmp_path),
                "--name",
                "m",
                "--quick",
                "--n-estimators",
                "30",
                "--folds",
                "2",
                "--trees",
                "compiled",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "wrote" in out and "held-out model" in out
    model = tmp_path / "m"
    assert (model / "model.txt").is_file() and (model / "tuning.csv").is_file()
    manifest = json.loads((model / "manifest.json").read_text())
    command = (f"algosel train {SLICE} --models {tmp_path} --name m --quick --n-estimators 30 --folds 2 "
               "--trees compiled --no-progress")  # fmt: skip
    assert manifest["command"] == command and manifest["first_prediction_trees"] == "compiled"
    assert f"\n{command}\n" in (model / "README.md").read_text()
    return model


def _evaluate(model, tmp_path, capsys):
    """``algosel evaluate`` into a folder of its own: the report's sections, and the model left as it was."""
    reports = tmp_path / "reports"
    assert main(["evaluate", "--model", str(model), "--data", str(SLICE), "--out", str(reports), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Held-out shapes" in out and "Leave one network out" in out and "Whole networks" in out
    report = json.loads((reports / "report.json").read_text())
    assert {"test", "lono", "network_totals", "test_never_run", "test_all"} <= set(report)
    # the headline is on the problems a training step runs: the never-run ones are reported beside, not in it
    assert report["test_problems"] + report["test_problems_never_run"] == sum(
        r["problems"] for r in report["test_all"] if r["group"] == "all" and r["selector"] == "model"
    )
    assert (reports / "network_totals.csv").is_file() and (reports / "report.csv").is_file()
    assert "files" not in report and verify_directory(model) == []


def _evaluate_into_the_model(model, capsys):
    """``algosel evaluate`` into the model's own directory (how a shipped model's report is made): the manifest
    records what it wrote. Its manifest is the model's, not evaluate's: rewriting it takes --overwrite, refused
    before any work without."""
    into_model = ["evaluate", "--model", str(model), "--data", str(SLICE), "--out", str(model), "--no-lono",
                  "--no-progress"]  # fmt: skip
    assert main(into_model) == 2
    assert "manifest.json" in capsys.readouterr().err and not (model / "report.csv").exists()
    assert main([*into_model, "--overwrite"]) == 0
    capsys.readouterr()
    files = json.loads((model / "manifest.json").read_text())["files"]
    assert {"report.csv", "cells.csv", "top_k.csv", "top_k.png", "report.json"} <= set(files)
    assert sorted(files) == sorted(p.name for p in model.iterdir() if p.name != "manifest.json")
    assert verify_directory(model) == []


def _predict(model, capsys):
    """``algosel predict`` of a problem given by its fields, and of one given by its key (as JSON)."""
    assert (
        main(
            [
                "predict",
                "--model",
                str(model),
                "--n",
                "32",
                "--c",
                "64",
                "--k",
                "64",
                "--h",
                "56",
                "--w",
                "56",
                "--r",
                "3",
                "--s",
                "3",
                "--pad",
                "1",
                "--dtype",
                "float16",
                "--direction",
                "bwd_data",
                "--offline",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("n32_c64_k64_h56_w56_r3_s3_p1x1") and "1. " in out

    key = "n1600_c256_k4096_h6_w6_r6_s6_p0x0_u1x1_d1x1_g1_float16_nchw_fwd"
    assert main(["predict", "--model", str(model), "--key", key, "--json", "--offline", "--top-k", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["problem"] == key and len(got["choices"]) == 1


def test_predict_errors(tmp_path, capsys):
    assert main(["predict", "--model", str(tmp_path), "--n", "1"]) == 2
    assert "missing: --c" in capsys.readouterr().err
    assert main(["predict", "--model", str(tmp_path), "--key", "nonsense"]) == 2
    assert "not a problem key" in capsys.readouterr().err
    key = "n1_c1_k1_h1_w1_r1_s1_p0x0_u1x1_d1x1_g1_float16_nchw_fwd"
    assert main(["predict", "--model", str(tmp_path), "--key", key]) == 2
    assert "not a model directory" in capsys.readouterr().err
