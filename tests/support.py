"""Helpers that several test files share (and benchmarks/gpu_transfer.py's ``--smoke``):

- a command line row and how it runs (:class:`Row`, :func:`run_in_subprocess`, :func:`run_in_process`), with the
  fingerprint of the files it must not write (:func:`hashes`): tests/test_reliability.py, test_bad_inputs_cli.py,
  test_bad_inputs_third.py (tests/cli_rows.py checks what a row shows); a command line alone (:func:`run_algosel`):
  tests/test_layers.py, test_layers_files.py;
- a made-up second GPU, an H100 (:data:`H100`, :func:`h100_env`): tests/test_joint.py, test_targeted_gain.py;
- a function run inside autograd's backward (:func:`run_in_a_backward`): tests/test_autograd_thread.py, test_gpu.py;
- model directories to damage (:data:`SHIPPED`, :data:`LEGACY`, :func:`copy_model`, :func:`truncate`,
  :func:`edit_line`): tests/test_reliability.py, test_model_and_record_files.py, test_bad_inputs_models.py,
  test_model_text.py;
- the CPU sweeps' environment and fake times (:data:`SWEEP_ENV`, :data:`SWEEP_TIMES`): tests/test_sweep_*.py;
- the hook on CPU, routing as on a GPU (:func:`hook_executor`, the stand-in selectors :func:`Predicting`,
  :class:`UnrecordedPredicting` and :func:`SMALL_GAIN`, probation's looks :func:`looking`): tests/test_hook_*.py;
- the runtime on a GPU (:data:`AT_ONCE`, :func:`prefer`, :func:`compiled_path`, :func:`cudnn_model`):
  tests/test_gpu_runtime.py, test_gpu_compiled_path.py, test_gpu_networks.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.operands import relative_error
from algosel.records.environment import env_id
from algosel.runtime import hook
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy
from algosel.runtime.standins import CpuAsCuda, CudaWithoutTrials, FakeDevice, Preferring
from algosel.testing import exact_calibration

#: The marks of a GPU test module (``pytestmark = GPU_ONLY``): ``gpu``, which the README's command deselects, and
#: a skip where no CUDA GPU is visible.
GPU_ONLY = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

if TYPE_CHECKING:
    from algosel.learn.selector import Selector

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
    #: Environment variables the command runs with besides this process's (rows run by ``cli_rows.run_rows``).
    env: dict[str, str] = field(default_factory=dict)
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


def run_algosel(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m algosel ARGV`` in a fresh interpreter in ``cwd``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "algosel", *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


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


# ------------------------------------------------------------------------------------------- model directories
#: The shipped joint model, and the legacy H200 model (its model text is the one the damage tests edit).
SHIPPED = REPO / "models" / "joint-h100-h200-cudnn91900"
LEGACY = REPO / "models" / "h200-cudnn91900-legacy"


def truncate(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_line(text: str, prefix: str, index: int, value: str, occurrence: int = 0) -> str:
    """``text`` with token ``index`` of the ``occurrence``-th line starting with ``prefix`` replaced by ``value``."""
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith(prefix)][occurrence]
    key, values = lines[at].split("=", 1)
    tokens = values.split(" ")
    tokens[index] = value
    lines[at] = key + "=" + " ".join(tokens)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- CPU sweeps
SWEEP_ENV = {"env_id": "cpu-test", "gpu_name": "none"}
#: The fake timer's times (ms) of the candidates the CPU sweeps measure.
SWEEP_TIMES = {"gemm:fc": 0.5, "gemm:pointwise": 0.4, DEFAULT_ID: 1.0, "fake:good": 2.0}


# ------------------------------------------------------------------------------------------------ the hook on CPU
#: One seam for every executor, so that ``enabled()`` blocks of one configuration share their executor.
CPU_AS_CUDA = CpuAsCuda()
EXACT = exact_calibration()
REF = hook.original_conv2d  # PyTorch's own conv2d, whatever the switches say


def hook_executor(**config) -> hook.Executor:
    """An executor that routes the CPU's calls as a GPU's (``CpuAsCuda``, unless a test gives its own device seam):
    the hook routes CUDA tensors alone, so its routing is tested on the CPU through this stand-in. Its calibration
    says the stand-in selectors' predicted times are exact (unless a test gives its own), so that the rule acts on
    them as they are."""
    return hook.Executor(**{"device_probe": CPU_AS_CUDA, "calibration": EXACT, **config})


def Predicting(sel: Selector, gemm_ratio: float = 0.2, default_ms: float = 1.0) -> Preferring:  # noqa: N802
    """A selector with a time predictor that says GEMM lowering takes ``gemm_ratio`` of PyTorch's default time, and
    that ranks GEMM lowering first where it applies (the hook's decision is what is tested here, not the model's
    predictions or ranks)."""
    return Preferring(sel, "gemm", gemm_ratio, default_ms)


class UnrecordedPredicting(Preferring):
    """... with every problem unrecorded, so that each is decided by its predicted times."""

    def __init__(self, sel: Selector, gemm_ratio: float = 0.2, default_ms: float = 1.0):
        super().__init__(sel, "gemm", gemm_ratio, default_ms, recorded=False)


def gemm_paying_executor(shipped: Selector) -> hook.Executor:
    """The hook tests' ``executor`` fixture: the shipped H200 model, offline (no GPU here), with a time predictor
    that makes GEMM lowering pay (the hook's counts reset)."""
    hook.reset_stats()
    return hook_executor(selector=Predicting(shipped), live=False)


def SMALL_GAIN(executor):  # noqa: N802 - reads as the selector it makes
    """The executor fixture's selector, predicting PyTorch's default at 100 us and GEMM at 20: a gain of 80 us a
    call, which probation judges (under ``probation_exempt_gain_us``)."""
    return Predicting(executor.selector.model, default_ms=0.1)


def looking(busy, clock=None, settle_s: float = 0.0, **kw) -> dict:
    """Executor arguments: probation's looks answered by ``busy`` (see FakeDevice), counted ``settle_s`` after
    planning (default: even right after it); step trials timed by ``clock``."""
    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=settle_s))
    return dict(device_probe=FakeDevice(busy, clock=clock), policy=policy, **kw)


# ------------------------------------------------------------------------------------------- the runtime on a GPU
#: These tests exercise the routes themselves: their switches are made on the first call, not after probation looked
#: at the device, and kept without a step trial (the tests of those two give their own arguments); the rule switches
#: untimed on the stand-in selectors' predictions, taken as exact (verify mode still times).
AT_ONCE = {"probe_calls": 0, "device_probe": CudaWithoutTrials(), "calibration": exact_calibration(),
           "rule_times": False}  # fmt: skip


def prefer(sel, space: str, default_ms: float = 1.0) -> Preferring:
    """The shipped selector making one space's candidates ten times faster than PyTorch's default and ranking them
    first, every problem unrecorded and no host costs: the runtime's routing is what these tests exercise, not the
    model's predictions or ranks."""
    return Preferring(sel, space, 0.1, default_ms, recorded=False, host_costs=False)


def compiled_path():
    """The compiled path's module (the GPU tests' ``ext`` fixture): skips the test where it is not built, or fails
    it where ``ALGOSEL_REQUIRE_NATIVE=1`` says it should be."""
    from algosel.runtime import native

    module = native.load()
    if module is None:
        if os.environ.get("ALGOSEL_REQUIRE_NATIVE") == "1":
            pytest.fail(f"the compiled path should be built here: {native.status()}")
        pytest.skip(native.status())
    return module


def directions(ex, route):
    """The problems of a route's directions that have a plan (its forward, and the gradients it computed)."""
    return [p for p in ex.directions_of(route.problem).values() if p in ex.plans]


def close(a, b, tol=5e-3):
    return relative_error(a, b.double()) <= tol


def cudnn_model(dtype=torch.float16, channels_last=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
    ).cuda().to(dtype)  # fmt: skip
    x = torch.randn(8, 32, 28, 28, device="cuda", dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x.requires_grad_()
