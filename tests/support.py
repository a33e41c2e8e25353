"""Helpers that several test files share (and benchmarks/gpu_transfer.py's ``--smoke``):

- a command line row and how it runs (:class:`Row`, :func:`run_in_subprocess`, :func:`run_in_process`), with the
  fingerprint of the files it must not write (:func:`hashes`): tests/test_reliability.py, test_bad_inputs_cli.py,
  test_bad_inputs_third.py (tests/cli_rows.py checks what a row shows);
- a made-up second GPU, an H100 (:data:`H100`, :func:`h100_env`): tests/test_joint.py, test_targeted_gain.py;
- a function run inside autograd's backward (:func:`run_in_a_backward`): tests/test_autograd_thread.py, test_gpu.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from algosel.records.environment import env_id

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parent.parent
#: A problem the shipped model's records and the slice hold.
RECORDED = "n32_c64_k64_h56_w56_r3_s3_p1x1_u1x1_d1x1_g1_float16_nchw_fwd"

#: The environment of an H100 (the slice's records under it make a second GPU).
H100 = {
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "sm_count": 132,
    "compute_capability": 9.0,
    "l2_bytes": 52428800,
    "memory_bytes": 85017624576,
    "memory_bandwidth_gbps": 3352.3,
    "sm_clock_mhz": 1980,
    "driver": "580.159.04",
    "cuda": "13.0",
    "cudnn": 91900,
    "torch": "2.11.0+cu130",
}


def h100_env() -> dict:
    """:data:`H100` with its ``env_id``."""
    env = dict(H100)
    env["env_id"] = env_id(env)
    return env


def hashes(*roots: Path) -> dict[str, str]:
    """SHA-256 of every file under ``roots`` (files or directories; missing ones hash as absent)."""
    out = {}
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        if not root.exists():
            out[str(root)] = "absent"
    return out


@dataclass
class Row:
    """One command line of the table: what it runs, and what it must and must not do."""

    argv: list[str]
    status: int = 2
    #: Fragments the one-line error (status 2) or stdout (status 0) must hold.
    says: tuple[str, ...] = ()
    #: Files and directories the command must leave as they were.
    unchanged: tuple[Path, ...] = ()
    #: For status 0: a warning line stderr must hold (else stderr must be empty of lines but warnings).
    warns: str = ""
    cwd: Path = REPO
    # filled in when run
    before: dict[str, str] = field(default_factory=dict)
    result: subprocess.CompletedProcess | None = None
    seconds: float = 0.0


def run_in_subprocess(row: Row) -> Row:
    """``python -m algosel ARGV`` in a fresh interpreter in the row's folder, its files hashed before."""
    row.before = hashes(*row.unchanged)
    t0 = time.perf_counter()
    row.result = subprocess.run(
        [sys.executable, "-m", "algosel", *row.argv],
        cwd=row.cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    row.seconds = time.perf_counter() - t0
    return row


def run_in_process(row: Row) -> Row:
    """:func:`run_in_subprocess` through ``algosel.cli.main`` in the row's folder (from the main thread: the command
    line sets signal handlers)."""
    from algosel.cli import main

    row.before = hashes(*row.unchanged)
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    t0 = time.perf_counter()
    try:
        os.chdir(row.cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(row.argv)
            except SystemExit as exc:  # argparse's errors exit, as they end the process of a command line
                status = exc.code
    finally:
        os.chdir(here)
    row.seconds = time.perf_counter() - t0
    row.result = subprocess.CompletedProcess(row.argv, status, out.getvalue(), err.getvalue())
    return row


def run_in_a_backward(fn, device: torch.device):
    """``fn()`` run inside the backward of a plain graph on ``device``, as a network's backward runs."""
    import torch

    out = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            out.append(fn())
            return grad

    x = torch.ones(2, device=device, requires_grad=True)
    Probe.apply(x).sum().backward()
    return out[0]
