"""docs/tutorial.md: every command that runs without a GPU is run here, as written, in a temporary directory
(``algosel`` command lines through the command line's ``main`` in this process, any other line in bash).

Each ```bash block of the tutorial starts with a marker line:

- ``# cpu``: run as it is; where the tutorial quotes the output (the plain block right after it), the quoted lines
  must appear in what the commands print;
- ``# cpu: needs the sweep's records``: run as it is on stand-in records: ``data/sweeps/h200`` is a third of the
  committed slice of the H200 records (so that training takes seconds) and ``my-sweeps/h200-mynet`` the records
  of MyNet's layers that the tutorial's sweep wrote on the H200 (``data/sweeps/h200-mynet``);
  every ``# cpu`` block runs in the same directory, with those stand-ins for the shipped records;
- ``# gpu``: needs a GPU, not run in CI (benchmarks/loop_h200.sh runs them on the H200);
- ``# setup``: the install, which CI's own setup (.ci/run) does.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, slice_third

TUTORIAL = REPO / "docs" / "tutorial.md"
CPU, AFTER_SWEEP, GPU, SETUP = "# cpu", "# cpu: needs the sweep's records", "# gpu", "# setup"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def _blocks() -> list[tuple[str, str, str | None]]:
    """(marker, commands, quoted output or None) of every bash block, in order."""
    fences = [(m.group(1), m.group(2), m.end()) for m in _FENCE.finditer(TUTORIAL.read_text())]
    out = []
    for i, (lang, body, _) in enumerate(fences):
        if lang != "bash":
            continue
        marker, _, commands = body.partition("\n")
        following = fences[i + 1] if i + 1 < len(fences) else None
        quoted = following[1] if following is not None and following[0] == "" else None
        out.append((marker.strip(), commands, quoted))
    return out


def test_every_bash_block_says_where_it_runs() -> None:
    blocks = _blocks()
    assert blocks, "the tutorial has command blocks"
    assert {marker for marker, _, _ in blocks} <= {CPU, AFTER_SWEEP, GPU, SETUP}, [m for m, _, _ in blocks]
    markers = [m for m, _, _ in blocks]
    assert markers.count(CPU) >= 4 and markers.count(AFTER_SWEEP) >= 3


def test_gpu_blocks_are_the_ones_that_need_a_gpu() -> None:
    for marker, commands, _ in _blocks():
        runs_on_gpu = (
            ("algosel sweep" in commands and "--dry-run" not in commands)
            or "mynet_step.py --mode" in commands
            or "benchmarks/zoo.py" in commands
            or "algosel build-ext" in commands
        )
        assert runs_on_gpu == (marker == GPU), commands


def _mynet_sweep(workdir: Path) -> None:
    """The records of MyNet's layers where the tutorial's sweep writes them: the shard that sweep wrote on the H200
    (data/sweeps/h200-mynet, the tutorial's own commands), checked to be the cases of the layers file made here."""
    import shutil

    from algosel.measure.cases import build_cases
    from algosel.records import load_records

    cases = build_cases(None, [], ["float32", "float16"], layers=[workdir / "mynet.csv"])
    frame, _ = load_records(REPO / "data" / "sweeps" / "h200-mynet")
    assert len(cases) == 42 and {c.problem.case_key for c in cases} == set(frame["case_key"])
    target = workdir / "my-sweeps" / "h200-mynet"
    target.mkdir(parents=True)
    for part in (REPO / "data" / "sweeps" / "h200-mynet").glob("*.parquet"):
        shutil.copy(part, target / part.name)


def _run_block(commands: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A block's commands as written, in order, stopping at the first that fails: its ``algosel`` command lines
    through the command line's ``main`` in this process (each new process would import torch, pandas and LightGBM
    again, seconds of CPU; the ``algosel`` entry point itself is tests/test_install.py's), the lines between them
    in bash, each run of them in one ``bash -euo pipefail``."""
    from algosel.cli import main

    lines = [line for line in commands.splitlines() if line.strip()]
    runs = [[lines[0]]]
    for line in lines[1:]:
        if line.startswith("algosel ") or runs[-1][-1].startswith("algosel "):
            runs.append([line])
        else:
            runs[-1].append(line)
    out, err, status = io.StringIO(), io.StringIO(), 0
    for run in runs:
        if not run[0].startswith("algosel "):
            got = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(run)], cwd=cwd, env=env,
                                 capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
            out.write(got.stdout)
            err.write(got.stderr)
            status = got.returncode
        else:
            here = os.getcwd()
            os.chdir(cwd)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    status = main(shlex.split(run[0])[1:])
            finally:
                os.chdir(here)
        if status:
            break
    return subprocess.CompletedProcess(commands, status, out.getvalue(), err.getvalue())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the quoted outputs are those of a machine without a GPU")
def test_the_tutorials_cpu_commands_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slice_third(tmp_path / "data" / "sweeps" / "h200")  # so that training takes seconds
    for name in ("examples", "models"):
        (tmp_path / name).symlink_to(REPO / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("ALGOSEL_RECORD_UNSEEN", None)
    monkeypatch.delenv("ALGOSEL_RECORD_UNSEEN", raising=False)  # for the command lines run in this process
    ran = swept = 0
    for marker, commands, quoted in _blocks():
        if marker not in (CPU, AFTER_SWEEP):
            continue
        if marker == AFTER_SWEEP and not swept:
            _mynet_sweep(tmp_path)
            swept = 1
        got = _run_block(commands, tmp_path, env)
        assert got.returncode == 0, f"{commands}\n{got.stdout}\n{got.stderr}"
        if quoted is not None:
            for line in quoted.strip().splitlines():
                assert line in got.stdout.splitlines(), f"quoted {line!r} is not in the output of {commands}"
        ran += 1
    assert ran >= 7
    assert (tmp_path / "my-models" / "h200-mynet" / "model.txt").is_file()
    assert (tmp_path / "reports" / "h200-mynet" / "layers_totals.csv").is_file()
    assert (tmp_path / "reports" / "html-mynet" / "index.html").is_file()
