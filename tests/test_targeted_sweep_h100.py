"""benchmarks/targeted_layers.py (the layers files of the H100's targeted family sweep) and
benchmarks/targeted_sweep_h100.sh in its dry run (no GPU): the files are what the generator writes, and each phase
lists the cases of its files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import REPO

from algosel.measure.cases import build_cases
from algosel.measure.layers import load_layers

COMMITTED = REPO / "data" / "layers" / "targeted"


def _generator():
    spec = importlib.util.spec_from_file_location("targeted_layers", REPO / "benchmarks" / "targeted_layers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_layers_files_are_what_the_generator_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # it reads the committed suites and layers files by their repository paths
    gen = _generator()
    gen.main(["--out", str(tmp_path)])
    for name in gen.FILES:
        assert (tmp_path / name).read_bytes() == (COMMITTED / name).read_bytes(), name
    grouped, pointwise = load_layers(tmp_path / "grouped-f32.csv"), load_layers(tmp_path / "pointwise-f16.csv")
    assert (grouped["groups"] > 1).all() and set(grouped["n"]) == {128}
    assert ((pointwise["r"] == 1) & (pointwise["s"] == 1)).all() and set(pointwise["n"]) == {8, 16}
    assert set(load_layers(tmp_path / "aspp.csv")["dilation_h"]) == {1, 12, 24, 36}
    with pytest.raises(SystemExit, match="grouped-f32.csv exists; pass --overwrite"):
        gen.main(["--out", str(tmp_path)])


def _cases(names: list[str], dtypes: list[str]) -> int:
    """The cases ``algosel sweep --layers`` makes of these files in these dtypes, NCHW."""
    return len(build_cases(None, [], dtypes, ["nchw"], layers=[COMMITTED / n for n in names]))


def test_the_dry_run_lists_every_phase_s_cases_and_measures_nothing(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "DRY_RUN": "1", "PYTHON": sys.executable, "KEEP": str(tmp_path / "keep")}
    res = subprocess.run(["bash", str(REPO / "benchmarks" / "targeted_sweep_h100.sh")], env=env, capture_output=True,
                         text=True, timeout=600, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    lines = (out / "before.txt").read_text().splitlines()
    expected = {
        "grouped": _cases(["grouped-f32.csv"], ["float32"]),
        "pointwise": _cases(["pointwise-f16.csv"], ["float16"]),
        "detectors": _cases(["csp.csv", "aspp.csv"], ["float32", "float16"]),
    }
    assert [line.split(":")[0] for line in lines] == list(expected)
    for line, (phase, cases) in zip(lines, expected.items()):
        assert line.startswith(f"{phase}: {cases} cases (0 from the grid, {cases} from layers files)"), line
    assert not (tmp_path / "keep").exists() and not (out / "after.txt").exists()
