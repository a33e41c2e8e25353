"""A non-editable install (the wheel, as ``pip install .`` makes it) finds the shipped model and suites."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package as a wheel install puts it: the built wheel unpacked into a folder of its own."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO), "-w", str(out)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (wheel,) = out.glob("algosel-*.whl")
    site = out / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


def _run(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run(
        [sys.executable, *args], check=False, capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_the_wheel_carries_the_shipped_model_and_suites(installed):
    shipped = installed / "algosel" / "shipped"
    for name in ("model.txt", "time_model.txt", "manifest.json", "catalogue.parquet"):
        assert (shipped / "models" / "joint-h100-h200-cudnn91900" / name).is_file()
    assert (shipped / "suites" / "resnet50.csv").is_file()
    # the compiled path's sources, for `algosel build-ext` from an installed package
    assert (installed / "algosel" / "runtime" / "_ext" / "conv_ext.cpp").is_file()


def test_an_installed_algosel_predicts_and_loads_the_shipped_suites_from_anywhere(installed, tmp_path):
    """One process (an interpreter and its imports are most of each run's time): the wheel's copy is the one
    imported, the shipped suites load, and ``python -m algosel predict`` answers from the shipped model."""
    script = (
        "import runpy, sys\n"
        "import algosel\n"
        "from algosel.measure.suites import load_suite\n"
        "print(algosel.__file__)\n"
        "print(len(load_suite('resnet50')))\n"
        "sys.argv = ['algosel', 'predict', '--n', '32', '--c', '64', '--k', '64', '--h', '56', '--w', '56', '--r', '3',"
        " '--s', '3', '--pad', '1', '--offline']\n"
        "runpy.run_module('algosel', run_name='__main__')\n"
    )
    got = _run(installed, "-c", script, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    where, suite_layers, *lines = got.stdout.splitlines()
    assert Path(where).is_relative_to(installed), "the wheel's copy is the one imported"
    assert int(suite_layers) > 50
    assert lines[0] == "n32_c64_k64_h56_w56_r3_s3_p1x1_u1x1_d1x1_g1_float32_nchw_fwd"
    assert len(lines) == 4 and all(":" in line for line in lines[1:])
