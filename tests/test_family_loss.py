"""benchmarks/family_loss.py: its per-family table (on a made-up table of picks) and its before/after plot, which
reads two of its own JSON outputs and runs no model."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks" / "family_loss.py"


def _module():
    spec = importlib.util.spec_from_file_location("family_loss", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_family_losses_sum_each_group_s_log_loss_and_shares():
    table = pd.DataFrame({"family": ["stem", "stem", "pointwise", "pointwise"], "model": [2.0, 1.0, 1.04, 1.1],
                          "best": [1.0, 1.0, 1.0, 1.0]})  # fmt: skip
    out = _module().family_losses(table, ["family"])
    assert list(out.index) == ["stem", "pointwise"]  # largest summed loss first
    assert out.loc["stem", "loss_sum"] == pytest.approx(math.log(2.0))
    assert out.loc["pointwise", "loss_mean"] == pytest.approx((math.log(1.04) + math.log(1.1)) / 2)
    assert out["loss_share"].sum() == pytest.approx(1.0) and out["excess_share"].sum() == pytest.approx(1.0)
    assert out.loc["stem", "within_5pct"] == 0.5 and out.loc["pointwise", "within_5pct"] == 0.5
    assert out.loc["stem", "excess_ms"] == pytest.approx(1.0)


def test_miss_bands_place_each_problem_by_its_pick_over_best():
    table = pd.DataFrame({"model": [1.0, 1.04, 1.3, 3.0], "best": [1.0, 1.0, 1.0, 1.0],
                          "heuristic_a": [2.0, 1.0, 1.1, 4.0], "heuristic_b": [1.0, 2.0, 2.0, 2.0],
                          "pytorch_default": [1.5, 1.5, 1.5, 1.5]})  # fmt: skip
    out = _module().miss_bands(table)
    assert list(out.index) == ["<= 1.02", "<= 1.05", "<= 1.1", "<= 1.2", "<= 1.5", "<= 2", "> 2"]
    assert out["problems"].tolist() == [1, 1, 0, 0, 1, 0, 1]
    assert out["loss_share"].sum() == pytest.approx(1.0)
    assert out.loc["> 2", "loss_share"] == pytest.approx(math.log(3.0) / (math.log(1.04) + math.log(1.3) + math.log(3)))
    assert out.loc["<= 1.05", "heuristic_a_faster"] == 1.0 and out.loc["<= 1.5", "heuristic_a_faster"] == 1.0
    assert out.loc["> 2", "heuristic_b_faster"] == 1.0 and out.loc["<= 1.02", "heuristic_b_faster"] == 0.0
    assert out.loc["> 2", "pytorch_default_faster"] == 1.0 and out.loc["<= 1.5", "pytorch_default_faster"] == 0.0


def _payload(model: str, losses: dict[str, float]) -> dict:
    rows = [{"family": f, "problems": 10, "loss_mean": v, "within_5pct": 0.5} for f, v in losses.items()]
    return {"model": model, "data": ["data/sweeps/h200"], "family": rows}


def test_the_plot_draws_each_before_after_pair_without_a_model(tmp_path):
    files = []
    for name, losses in (("before", {"stem": 0.2, "pointwise": 0.04}), ("after", {"stem": 0.05, "pointwise": 0.05})):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(_payload(name, losses)))
    png = tmp_path / "plot.png"
    cmd = [sys.executable, str(SCRIPT), "--plot", str(png), "--compare", *map(str, files), "--compare",
           *map(str, files)]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "x.png"], "--plot and --compare go together"),
        (["--compare", "a.json", "b.json"], "--plot and --compare go together"),
        (["--plot", "x.png", "--compare", "absent.json", "absent.json"], "cannot read a --compare file"),
    ],
)
def test_the_plot_s_errors_are_one_line(tmp_path, args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.png").exists()
