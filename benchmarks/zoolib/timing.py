"""The zoo's clocks: wall time of a few steps, host time (CPU time of the process), GPU kernel time
(torch.profiler), CPU time by thread, and the ABBA rotation of the modes' slots that pairs them up.

A step is ``step(i)``; a context ``ctx()`` is entered around each step (:mod:`zoolib.modes`); ``sync()`` waits
for the device (``torch.cuda.synchronize``, or nothing on the CPU).
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import statistics
import time
from pathlib import Path


def run_steps(step, ctx, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        with ctx():
            step(i)


def wall_s(step, ctx, count: int, sync, first: int = 0) -> float:
    sync()
    t0 = time.perf_counter()
    run_steps(step, ctx, count, first)
    sync()
    return time.perf_counter() - t0


def rotate(step, ctx: dict, rounds: int, steps: int, sync, host: dict | None = None,
           slots: dict | None = None, threads: dict | None = None) -> dict[str, list[float]]:  # fmt: skip
    """ms per step of each mode's slots of ``steps`` steps, the modes in ABBA rotation for ``rounds`` rounds (see
    :func:`round_order`): the slots of one round pair up for their ratios. ``host``, if given,
    receives each slot's host ms per step (CPU time of the process, every thread, to the last step's return: the
    synchronisation after it not included), measured in the same rotation, so that drift between blocks of this
    machine does not read as a difference between modes. ``slots``, if given, holds per mode a context entered
    around each of its slots (``ctx``'s is entered around each step). ``threads``, if given, receives each slot's
    CPU ms per step of every thread by name (:func:`thread_cpu_ns`), read outside the timed region: the main
    thread's includes the synchronisation at the slot's end."""
    times: dict[str, list[float]] = {m: [] for m in ctx}
    if host is not None:
        host.update({m: [] for m in ctx})
    if threads is not None:
        threads.update({m: [] for m in ctx})
    with frozen_heap():
        for r in range(rounds):
            for m in round_order(list(ctx), r):
                # Python's cyclic collector runs when allocations cross its thresholds: collected before each slot,
                # a mode's garbage is not collected in the next mode's slot (its own collections still count in its
                # own)
                gc.collect()
                sync()
                before = thread_cpu_ns() if threads is not None else None
                with slots[m]() if slots else contextlib.nullcontext():
                    t0, c0 = time.perf_counter(), time.process_time()
                    run_steps(step, ctx[m], steps)
                    cpu_s = time.process_time() - c0
                    sync()
                    times[m].append(1e3 * (time.perf_counter() - t0) / steps)
                if host is not None:
                    host[m].append(1e3 * cpu_s / steps)
                if before is not None:
                    after = thread_cpu_ns()
                    threads[m].append({k: (after[k] - before.get(k, 0)) / 1e6 / steps for k in after})
    return times


def thread_cpu_ns() -> dict[str, int]:
    """CPU time (ns) of each thread of this process now, summed by thread name (``main``: the main thread).

    Read through each thread's CPU clock (Linux's clock id of a thread id), so that a difference in host time
    between modes can be placed: the main thread enqueueing work, autograd's threads running the backward, or
    threads of a library. Empty where the clocks cannot be read."""
    pid, out = os.getpid(), {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    for tid in tids:
        try:
            ns = time.clock_gettime_ns(((~tid) << 3) | 6)  # the kernel's per-thread CPUCLOCK_SCHED clock id
            name = "main" if tid == pid else Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended between the listing and the read
            continue
        out[name] = out.get(name, 0) + ns
    return out


def thread_deltas_ms(threads: dict[str, list[dict[str, float]]], mode: str, base: str = "default"
                     ) -> dict[str, float]:  # fmt: skip
    """Per thread name, the median over rounds of ``mode``'s slot CPU ms per step minus ``base``'s slot of the
    same round: where ``mode``'s extra host time is spent."""
    a, b = threads.get(mode) or [], threads.get(base) or []
    names = sorted({k for slot in (*a, *b) for k in slot})
    return {k: round(statistics.median(x.get(k, 0.0) - y.get(k, 0.0) for x, y in zip(a, b)), 4)
            for k in names} if a and len(a) == len(b) else {}  # fmt: skip


def round_order(modes: list[str], r: int) -> list[str]:
    """The order of the modes' slots in round ``r``: pairs of rounds in ABBA order (a drift that is linear over a
    pair of rounds adds the same to every mode), each pair in an order of its own drawn at random (seeded by the
    pair's number; the first pair in ``modes``'s order). Over many rounds a mode then takes every place in the
    round and follows every other mode, so that what a place costs or gains (right after the default's slot, first
    after a reversal, two slots of one mode in a row) is not read as a difference between modes."""
    pair = r // 2
    order = list(modes) if pair == 0 else random.Random(pair).sample(modes, len(modes))  # noqa: S311
    return order if r % 2 == 0 else order[::-1]


@contextlib.contextmanager
def frozen_heap():
    """The objects alive now moved out of the cyclic collector's reach for the block (``gc.freeze``).

    With torch, torchvision and the selector loaded a process holds ~400,000 tracked objects, and a full collection
    walks them all: 0.2-0.3 s on these machines. Collected before every slot, that was most of a rotation's time,
    and it left the caches cold for the slot after it. Frozen, the collection before a slot looks only at what the
    steps allocated since, which is what it is there to clear; collections inside a slot behave as in any process
    (every mode's the same way)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def host_ms(step, ctx, count: int, sync) -> float:
    """Host time per step: CPU time of the process (every thread: autograd runs the backward of CUDA tensors on
    threads of its own) from the first step's start to the last step's return, the synchronisation after them not
    included."""
    sync()
    t0 = time.process_time()
    run_steps(step, ctx, count)
    host = time.process_time() - t0
    sync()
    return 1e3 * host / count


def kernel_ms(step, ctx, n_inputs: int) -> float:
    """GPU kernel time per step (torch.profiler): the summed duration of every kernel of the steps."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_steps(step, ctx, n_inputs)
        torch.cuda.synchronize()
    total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return total_us / 1e3 / n_inputs


def device_sync(device: str):
    """What waits for ``device`` (``torch.cuda.synchronize`` on ``cuda``, nothing elsewhere)."""
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.synchronize
