"""How a sweep starts on this machine: a sweeper for this process's GPU (:func:`local_sweeper`), one process per
GPU each with its own shard (:func:`launch_per_gpu`), and what a dry run reports (:func:`dry_run_line`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from algosel.measure.sweeper import SweepCase


@dataclass(frozen=True)
class SweeperSettings:
    """What a sweeper of this GPU is built from: candidate spaces (measured in this order), device time per
    candidate for repeats, the largest workspace a candidate may take, and the operand seed."""

    spaces: tuple[str, ...]
    budget_ms: float = 10.0
    workspace_limit_bytes: int = 8 << 30
    seed: int = 0


def local_sweeper(settings: SweeperSettings, cuda_available: Callable[[], bool] | None = None):
    """A :class:`~algosel.measure.sweeper.Sweeper` of this process's GPU. ``cuda_available``: whether a CUDA GPU is
    visible (default: ``torch.cuda.is_available``).

    Raises
    ------
    ValueError
        No CUDA GPU is visible, or a candidate space cannot run here (naming why).
    """
    import torch  # noqa: PLC0415

    from algosel.measure.sweeper import Sweeper  # noqa: PLC0415
    from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415
    from algosel.records.environment import collect_environment  # noqa: PLC0415
    from algosel.spaces import make_space  # noqa: PLC0415

    if not (cuda_available or torch.cuda.is_available)():
        raise ValueError("sweep needs a CUDA GPU (none is visible); `algosel summarize` works on shipped records")
    spaces = [make_space(n) for n in settings.spaces]
    for space in spaces:
        why = space.available()
        if why:
            raise ValueError(f"candidate space {space.name!r} cannot run here: {why}")
    return Sweeper(
        spaces,
        CudaEventTimer(budget_ms=settings.budget_ms),
        collect_environment(),
        workspace_limit_bytes=settings.workspace_limit_bytes,
        seed=settings.seed,
    )


def dry_run_line(cases: Sequence[SweepCase], out: str | Path, resume_from: Sequence[str], layers: bool) -> str:
    """What ``algosel sweep --dry-run`` prints: the cases by origin and, where ``out`` or ``resume_from`` hold
    records, how many are already recorded (``out``'s journals too: a killed run's finished cases, which the sweep
    compacts instead of measuring)."""
    from_layers = sum(1 for c in cases if c.source.startswith("layers:"))
    from_layers_text = f", {from_layers} from layers files" if layers else ""
    from_grid = sum(1 for c in cases if c.source.startswith("grid"))
    line = f"{len(cases)} cases ({from_grid} from the grid{from_layers_text})"
    if resume_from or Path(out).is_dir():
        from algosel.measure.sweep import done_case_keys, journal_case_keys  # noqa: PLC0415

        done = done_case_keys(out, *resume_from) | journal_case_keys(out)
        recorded = sum(1 for c in cases if c.key in done)
        line += f"; {recorded} already recorded, {len(cases) - recorded} to measure"
    return line


def gpu_count(asked: str) -> int:
    """The GPUs of ``--gpus`` (``all`` or a count), which this machine must have; else ValueError."""
    import torch  # noqa: PLC0415

    visible = torch.cuda.device_count()
    count = visible if asked == "all" else int(asked)
    if count < 1 or count > visible:
        raise ValueError(f"--gpus {asked}: {visible} GPU(s) visible")
    return count


def without_option(argv: Sequence[str], option: str) -> list[str]:
    """``argv`` without ``option`` and its value (given as ``option VALUE`` or ``option=VALUE``)."""
    kept: list[str] = []
    skip = False
    for a in argv:
        if skip or a.startswith(option + "="):
            skip = False
            continue
        if a == option:
            skip = True
            continue
        kept.append(a)
    return kept


def launch_per_gpu(argv: Sequence[str], count: int) -> int:
    """Run ``python -m algosel ARGV --shard g/count`` once per GPU ``g`` (its own CUDA_VISIBLE_DEVICES) and wait for
    all; SIGINT and SIGTERM are forwarded to every shard, each of which stops cleanly (see ``run_sweep``).

    Returns the shell's status: 128 + the signal that stopped this process, else the worst shard's status (a shard
    killed by a signal counted as 128 + that signal)."""
    procs: list[subprocess.Popen] = []
    stopped: list[int] = []

    def forward(signum, _frame):
        stopped.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for g in range(count):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(g))
            cmd = [sys.executable, "-m", "algosel", *argv, "--shard", f"{g}/{count}"]
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait() for p in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        return 128 + stopped[0]
    return max(128 - c if c < 0 else c for c in codes)
