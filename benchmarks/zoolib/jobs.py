"""The zoo's jobs, each run in a process of its own by the driver (:mod:`zoolib.drive`), each returning one row per
(network, dtype): ``paired`` (the modes side by side in one process, in ABBA rotation), ``cold`` (the paired job's
first passes alone), ``benchmark`` (benchmark mode's tuning and steady steps) and ``warm`` (verify mode's first pass
with the cache the paired job filled).

A job is ``job(cfg, name, dtype, device, *, build=build_network, ...)``: ``cfg`` the run's
:class:`~zoolib.config.ZooConfig`; ``build`` and ``contexts`` (the hook's modes, :func:`zoolib.modes.mode_context`)
are there to be replaced by a caller that checks the job's arithmetic without a network.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from types import MappingProxyType
from typing import TYPE_CHECKING

from compare import paired_ratios

from zoolib.modes import AGAIN, MODES, TUNED, executor, mode_context, undecided_count
from zoolib.nets import build_network
from zoolib.timing import device_sync, host_ms, kernel_ms, rotate, run_steps, thread_deltas_ms, wall_s

if TYPE_CHECKING:
    from zoolib.config import ZooConfig

#: Verify mode's passes after its first, and prediction mode's before the rotation, until every signature is
#: decided: at most this many.
SETTLE_PASSES = 40


def new_row(cfg: ZooConfig, name: str, dtype: str, job: str, n_inputs: int, model: bool = True) -> dict:
    """A job's row before its measurements: what it ran and, where ``model`` (the jobs that time the hook's modes
    against each other), the ``--model`` it ran with."""
    out: dict = {"net": name, "dtype": dtype, "job": job, "batch": cfg.nets[name][0], "inputs": n_inputs}
    if model and cfg.model:
        out["model"] = cfg.model
    return out


def first_passes(cfg: ZooConfig, step, ctx: dict, n: int, sync, out: dict) -> None:
    """The first pass of each mode, in this order: PyTorch's default (its plans are warm after it), verify mode with
    an empty persistent cache (cold: it measures the new problems worth it), prediction mode, and benchmark mode's
    tuning where it runs in this process."""
    out["default_first_pass_s"] = wall_s(step, ctx["default"], n, sync)
    ex = executor(ctx, "verify")  # the executor of the verify mode's configuration (its own cache folder)
    before = ex.planning_s, ex.measured_problems  # counted per executor: a process's earlier dtype's too
    t0 = time.perf_counter()
    out["verify_cold_first_pass_s"] = wall_s(step, ctx["verify"], n, sync)
    out["verify_look_first"] = cfg.look_first
    if cfg.look_first:  # the timing comes after the looks: count every pass until no signature is undecided
        settle_verify(step, ctx, n, sync, out)
    out["verify_planning_s"] = ex.planning_s - before[0]
    out["verify_measured_problems"] = ex.measured_problems - before[1]
    out["verify_cold_total_s"] = time.perf_counter() - t0
    out["predict_first_pass_s"] = wall_s(step, ctx["predict"], n, sync)
    if TUNED in ctx:  # its tuning: every shape is new to its plan keys
        out["tuned_first_pass_s"] = wall_s(step, ctx[TUNED], n, sync)


def settle_verify(step, ctx: dict, n: int, sync, out: dict, *, undecided=undecided_count, timer=wall_s,
                  max_passes: int = SETTLE_PASSES) -> None:  # fmt: skip
    """Verify mode's passes after its first until every signature is decided (``undecided(ctx)`` is 0; at most
    ``max_passes``), and the cold cost as one first pass: their time and the first pass's, less the default's steady
    pass for each pass after the first (``timer``: :func:`~zoolib.timing.wall_s`). Compared with benchmark mode's
    tuning as the first pass alone is without looking."""
    passes, total = 1, out["verify_cold_first_pass_s"]
    while passes < max_passes and undecided(ctx):
        total += timer(step, ctx["verify"], n, sync)
        passes += 1
    steady = timer(step, ctx["default"], n, sync)
    out["verify_cold_passes"], out["verify_cold_raw_s"], out["default_steady_pass_s"] = passes, total, steady
    out["verify_cold_first_pass_s"] = total - (passes - 1) * steady


def job_cold(cfg: ZooConfig, name: str, dtype: str, device: str = "cuda", *, build=build_network,
             contexts=mode_context) -> dict:  # fmt: skip
    """The first passes alone (as the paired job measures them, without its steady-state rotation)."""
    from algosel.runtime import hook

    step, n = build(cfg, name, dtype, device)
    modes = ("default", "verify", "predict", *((TUNED,) if dtype == "amp" else ()))
    ctx = {m: contexts(cfg, m, hook) for m in modes}
    out = new_row(cfg, name, dtype, "cold", n)
    first_passes(cfg, step, ctx, n, device_sync(device), out)
    return out


def job_paired(cfg: ZooConfig, name: str, dtype: str, device: str = "cuda", rounds: int = 30, slot_steps: int = 3,
               *, build=build_network, contexts=mode_context) -> dict:  # fmt: skip
    """The modes side by side in one process: their first passes, then slots of a few steps in ABBA rotation
    (wall, host and thread time of every slot; kernel time per mode on a GPU), then a pass of each hook mode's
    calls by route."""
    from algosel.runtime import hook

    step, n = build(cfg, name, dtype, device)
    sync = device_sync(device)
    modes = (*MODES, TUNED) if dtype == "amp" else MODES
    modes = (*modes, AGAIN) if cfg.aa else modes
    ctx = {m: contexts(cfg, m, hook) for m in modes}
    out = new_row(cfg, name, dtype, "paired", n)
    first_passes(cfg, step, ctx, n, sync, out)
    for m in modes:
        run_steps(step, ctx[m], 2)
    settle_predict(step, ctx, n, out)
    # Slots of a few steps (a pass over the inputs for the FPN) in rotation (D P V N, N V P D, then pairs of rounds
    # in orders drawn at random), each timed to its end: host-bound steps of this machine vary by 30% from block to
    # block, far more than between neighbours, and single steps by 10-15% (a slot of 3 averages that down).
    steps = n if n > 1 else max(1, slot_steps)
    out["slot_steps"] = steps
    host: dict[str, list[float]] = {}
    threads: dict[str, list[dict[str, float]]] = {}
    times = rotate(step, ctx, 2 if cfg.smoke else rounds, steps, sync, host, threads=threads)
    step_fields(times, modes, out)
    for m in modes:
        host_fields(host, threads, m, out)
        if device == "cuda":
            out[f"{m}_kernel_ms"] = kernel_ms(step, ctx[m], n)
            # the share of the step the GPU runs kernels: >= 0.9 is a GPU-bound step
            out[f"{m}_busy_fraction"] = out[f"{m}_kernel_ms"] / out[f"{m}_step_ms"]
    for m in ("verify", "predict"):
        route_fields(hook, step, ctx, n, m, out)
    cache = executor(ctx, "verify").runtime_cache()
    if cache is not None:  # what verify mode's timing found, per problem: each candidate's ms
        out["verify_measured"] = {d.problem: {c: round(t, 4) for c, t in d.times_ms.items()}
                                  for d in cache.decisions() if d.source == "measured"}  # fmt: skip
    return out


def settle_predict(step, ctx: dict, n: int, out: dict, *, undecided=undecided_count,
                   max_passes: int = SETTLE_PASSES) -> None:  # fmt: skip
    """Prediction mode's probation and step trial run their course before the timed rotation, as verify mode's did
    in its settle passes (a steady state, not the blocks that decide it); the row says after how many steps."""
    passes = 0
    for _ in range(max_passes):
        if not undecided(ctx, "predict"):
            break
        run_steps(step, ctx["predict"], n)
        passes += 1
    # steps until the hook's default mode had decided everything (its model loads beside the steps, its decisions
    # are made beside them): the first pass, the two warm-up steps, the settle passes
    out["predict_settled_after_steps"] = n + 2 + passes * n
    out["predict_model_load_s"] = round(executor(ctx, "predict").model.seconds, 3)


def step_fields(times: dict[str, list[float]], modes: tuple[str, ...], out: dict) -> None:
    """Each mode's slot times and their median, and each mode's ratios to the default: the median of the ratios of
    neighbouring slots, and the ratio of the medians."""
    for m in modes:
        out[f"{m}_step_ms"] = statistics.median(times[m])
        out[f"{m}_steps_ms"] = [round(t, 3) for t in times[m]]
    for m in modes[1:]:
        out[f"{m}_vs_default"] = float(statistics.median(paired_ratios(times[m], times["default"])))
        out[f"{m}_vs_default_of_medians"] = out[f"{m}_step_ms"] / out["default_step_ms"]


def host_fields(host: dict, threads: dict, m: str, out: dict) -> None:
    """Mode ``m``'s host ms per step (the median over its slots, and every slot's) and its CPU ms per step by
    thread (against the default's too)."""
    out[f"{m}_host_ms"] = statistics.median(host[m])
    out[f"{m}_hosts_ms"] = [round(t, 3) for t in host[m]]
    out[f"{m}_threads_ms"] = {k: round(statistics.median(s.get(k, 0.0) for s in threads[m]), 4)
                              for k in sorted({k for s in threads[m] for k in s})}  # fmt: skip
    if m != "default":
        out[f"{m}_threads_vs_default_ms"] = thread_deltas_ms(threads, m)


def route_fields(hook, step, ctx: dict, n: int, m: str, out: dict) -> None:
    """The hook's calls of one more pass of mode ``m`` by route (empty where the executor steps aside), its routes by
    reason, its looks at the device and its step trial's verdict."""
    hook.reset_stats()
    run_steps(step, ctx[m], n)
    out[f"{m}_stats"] = hook.stats()
    ex = executor(ctx, m)
    out[f"{m}_routes"], out[f"{m}_blocks_aside"] = ex.route_reasons(), ex.blocks_aside
    # probation's pooled looks at the device: forward calls, busy ones, backward calls, busy ones
    looks = ex.looks
    out[f"{m}_looks"] = [looks.calls, looks.busy, looks.back_calls, looks.back_busy]
    # the step trial's verdict and its median ratio of block spans, switched / PyTorch's
    out[f"{m}_trial"] = [ex.trial_verdict, None if math.isnan(ex.trial_ratio) else round(ex.trial_ratio, 4)]


def job_benchmark(cfg: ZooConfig, name: str, dtype: str, device: str = "cuda", blocks: int = 4, per_block: int = 5,
                  *, build=build_network) -> dict:  # fmt: skip
    """``cudnn.benchmark = True`` in a process of its own: its first pass (tuning) and its steady step time."""
    import torch

    torch.backends.cudnn.benchmark = True
    step, n = build(cfg, name, dtype, device)
    sync = device_sync(device)
    ctx = contextlib.nullcontext
    out = new_row(cfg, name, dtype, "benchmark", n, model=False)
    out["benchmark_first_pass_s"] = wall_s(step, ctx, n, sync)
    run_steps(step, ctx, 2)
    per_block = max(per_block, n)
    out["benchmark_step_ms"] = statistics.median(
        1e3 * wall_s(step, ctx, per_block, sync) / per_block for _ in range(blocks)
    )
    # Host and kernel time as the paired job measures them: the step time of this separate process is compared
    # with the paired job's across processes (host-bound steps differ by up to 15% between processes), its kernel
    # time much less so.
    out["benchmark_host_ms"] = host_ms(step, ctx, per_block, sync)
    if device == "cuda":
        out["benchmark_kernel_ms"] = kernel_ms(step, ctx, n)
        out["benchmark_busy_fraction"] = out["benchmark_kernel_ms"] / out["benchmark_step_ms"]
    return out


def job_warm(cfg: ZooConfig, name: str, dtype: str, device: str = "cuda", *, build=build_network,
             contexts=mode_context) -> dict:  # fmt: skip
    """Verify mode's first pass in a new process with the persistent cache the paired job filled, after PyTorch's
    default's first pass there."""
    from algosel.runtime import hook

    step, n = build(cfg, name, dtype, device)
    sync = device_sync(device)
    out = new_row(cfg, name, dtype, "warm", n, model=False)
    out["default_first_pass_s"] = wall_s(step, contexts(cfg, "default", hook), n, sync)
    verify = contexts(cfg, "verify", hook)
    with verify() as ex:
        before = ex.measured_problems  # the executor is the process's: an earlier dtype's count is in it
    out["verify_warm_first_pass_s"] = wall_s(step, verify, n, sync)
    with verify() as ex:
        # more than 0: the cache was not warm for these problems (the paired job that fills it ran elsewhere)
        out["verify_warm_measured_problems"] = ex.measured_problems - before
    return out


JOBS = MappingProxyType({"paired": job_paired, "cold": job_cold, "benchmark": job_benchmark, "warm": job_warm})
