"""How the runtime's benchmarks time the host alone (GPU): calls queued behind a stream that a spin kernel keeps
busy, so that the host never waits for the GPU and the GPU never waits for the host (:func:`host_us_per_call`), and
the difference of two callables from ABBA pairs of such blocks (:func:`paired_extra_us`).

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations

import gc
import statistics
import time

import numpy as np
import torch
from compare import median_interval

CALLS = 300


def host_us_per_call(fn, calls: int = CALLS, repeats: int = 5, spin_cycles: int = 200_000_000) -> float:
    """Median over ``repeats`` of the host time of ``calls`` calls queued behind a blocked stream (``spin_cycles``
    of GPU spin: ~100 ms by default, longer than the calls take to queue)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        torch.cuda._sleep(spin_cycles)  # the host queues everything before the GPU runs
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def paired_extra_us(default_fn, hook_fn, pairs: int, calls: int) -> dict:
    """The hook's host us per call over PyTorch's, from ``pairs`` ABBA pairs of blocks of ``calls`` calls, each
    block queued behind a short spin (the host's time alone): medians, and a 95% interval of the median
    difference that resamples the pairs (the noise is correlated in time, so only neighbouring blocks pair)."""
    default_us, hook_us = [], []
    gc.disable()  # a collection inside one block of a pair would be the largest difference measured
    try:
        for p in range(pairs):
            order = (0, 1) if p % 2 == 0 else (1, 0)
            t = {}
            for i in order:
                fn = default_fn if i == 0 else hook_fn
                t[i] = host_us_per_call(fn, calls=calls, repeats=1, spin_cycles=50_000_000)
            default_us.append(t[0])
            hook_us.append(t[1])
    finally:
        gc.enable()
    extra, lo, hi = median_interval(np.subtract(hook_us, default_us))
    return {
        "F.conv2d_us": round(statistics.median(default_us), 2),
        "hook_us": round(statistics.median(hook_us), 2),
        "extra_us": round(extra, 2),
        "extra_us_95": [round(lo, 2), round(hi, 2)],
    }
