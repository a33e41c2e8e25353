"""Device timing that measures the GPU, not the host.

Many convolutions run for 20 to 50 us on an H200 while one call from Python costs 13 to 77 us of host time, so
timing single calls between CUDA events measures the host. :class:`CudaEventTimer` therefore

1. estimates the cost with one warm call and turns a time budget into a repeat count (as Triton's ``do_bench``);
2. blocks the stream with a spin kernel (``torch.cuda._sleep``) long enough for the host to queue every repeat,
   and records a *gate* event after it: if the GPU passed the gate before the host finished queueing, the run
   is repeated with a longer block (and flagged ``starved`` if it still happens);
3. before every repeat, overwrites a buffer twice the L2 size (no cache-warm timing) and rotates through several
   operand sets filled with fresh random values;
4. records one pair of CUDA events around every repeat and keeps all the times (median and spread derived);
5. measures the host time of every call while the stream is blocked: that is the host overhead the runtime
   hook would pay per call, measured apart from the device time.

The timer is an object passed to the sweeper, so the sweep logic is tested with :class:`FakeTimer` and no GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Stream block before the one-call estimate: longer than the host time of any candidate's call.
_ESTIMATE_BLOCK_MS = 2.0
#: Cycles of the spin kernel per millisecond of block; the H200's SM clock is at most 1.98 GHz, so this never
#: blocks for less than asked.
_SPIN_CYCLES_PER_MS = 2_000_000


@dataclass(frozen=True)
class Measurement:
    """Device times of one candidate on one problem (raw repeats kept; statistics derived)."""

    times_ms: tuple[float, ...]
    host_overhead_us: float
    starved: bool = False

    @property
    def repeats(self) -> int:
        return len(self.times_ms)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms))

    @property
    def min_ms(self) -> float:
        return float(min(self.times_ms))

    @property
    def p25_ms(self) -> float:
        return float(np.percentile(self.times_ms, 25))

    @property
    def p75_ms(self) -> float:
        return float(np.percentile(self.times_ms, 75))


class Timer(Protocol):
    """What the sweeper needs of a timer."""

    def measure(self, run: Callable[[int], object], label: str, best_ms: float | None = None) -> Measurement:
        """Time ``run(i)`` (``i`` selects the operand set). ``best_ms``, the best time so far on this
        problem, lets the timer spend few repeats on a candidate far slower than it."""
        ...


def planned_repeats(estimate_ms: float, best_ms: float | None, budget_ms: float, min_repeats: int, max_repeats: int,
                    slow_factor: float, single_factor: float) -> int:  # fmt: skip
    """Timed repeats of a candidate after its warm-up estimate ``estimate_ms`` (see :class:`CudaEventTimer`): 0
    (the estimate is its only time) beyond ``single_factor`` times the best so far ``best_ms``, 3 beyond
    ``slow_factor`` times it, else ``budget_ms`` worth, clamped to ``[min_repeats, max_repeats]``. A pure function,
    so that what a timing costs can be estimated from recorded times without a GPU."""
    if best_ms is not None and estimate_ms > single_factor * best_ms:
        return 0
    if best_ms is not None and estimate_ms > slow_factor * best_ms:
        return 3
    return int(min(max(budget_ms / estimate_ms, min_repeats), max_repeats))


class CudaEventTimer:
    """CUDA-event timing of queued launches (see the module docstring).

    Parameters
    ----------
    budget_ms : float
        Device time to aim for per candidate; the repeat count is ``budget_ms / estimate`` clamped to
        ``[min_repeats, max_repeats]``.
    slow_factor, single_factor : float
        A candidate whose warm-up time is more than ``slow_factor`` times the best so far gets 3 repeats only,
        and one more than ``single_factor`` times the best keeps its warm-up time as its only repeat: its rank
        is already clear, and such candidates can take seconds each.
    flush_l2 : bool
        Overwrite a buffer of twice the L2 size before every repeat.
    """

    def __init__(
        self,
        budget_ms: float = 10.0,
        min_repeats: int = 5,
        max_repeats: int = 15,
        slow_factor: float = 4.0,
        single_factor: float = 20.0,
        flush_l2: bool = True,
    ):
        import torch  # noqa: PLC0415 - keep module import light for CPU-only users

        self._torch = torch
        self.budget_ms = budget_ms
        self.min_repeats = min_repeats
        self.max_repeats = max_repeats
        self.slow_factor = slow_factor
        self.single_factor = single_factor
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2_bytes = int(getattr(props, "L2_cache_size", 64 << 20) or (64 << 20))
        self._flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda") if flush_l2 else None

    def _estimate(self, run: Callable[[int], object]) -> tuple[float, float]:
        """(device ms, host seconds) of one warm call."""
        torch = self._torch
        run(0)  # first call: lazy initialisation, plan caches
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # Blocked stream, as for the repeats: without it a 20 us kernel behind a 60 us host call measures the host,
        # and the repeat rule below took fast candidates for slow ones.
        torch.cuda._sleep(int(_ESTIMATE_BLOCK_MS * _SPIN_CYCLES_PER_MS))
        start.record()
        t0 = time.perf_counter()
        run(1)
        host_s = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return max(start.elapsed_time(end), 1e-3), host_s

    def repeats(self, estimate_ms: float, best_ms: float | None = None) -> int:
        """Timed repeats after the warm-up estimate ``estimate_ms``, ``best_ms`` the best time so far
        (:func:`planned_repeats` with this timer's settings)."""
        return planned_repeats(estimate_ms, best_ms, self.budget_ms, self.min_repeats, self.max_repeats,
                               self.slow_factor, self.single_factor)  # fmt: skip

    def measure(self, run: Callable[[int], object], label: str = "", best_ms: float | None = None) -> Measurement:
        torch = self._torch
        estimate, host_s = self._estimate(run)
        repeats = self.repeats(estimate, best_ms)
        if not repeats:
            return Measurement(times_ms=(estimate,), host_overhead_us=1e6 * host_s)
        # Block long enough for the host to queue every repeat (its call, the flush, two events), with margin.
        block_ms = 0.3 + 2.0 * repeats * (1e3 * host_s + 0.03)
        for _attempt in range(3):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            gate = torch.cuda.Event()
            host_s = []
            torch.cuda._sleep(int(block_ms * _SPIN_CYCLES_PER_MS))
            gate.record()
            for i in range(repeats):
                if self._flush is not None:
                    self._flush.fill_(i & 0xFF)
                starts[i].record()
                t0 = time.perf_counter()
                run(i)
                host_s.append(time.perf_counter() - t0)
                ends[i].record()
            starved = gate.query()  # True: the GPU ran ahead of the host, gaps may be inside the intervals
            ends[-1].synchronize()
            if not starved:
                break
            block_ms *= 4  # the host was slower than estimated: block longer and measure again
        times = tuple(s.elapsed_time(e) for s, e in zip(starts, ends))
        return Measurement(times_ms=times, host_overhead_us=1e6 * statistics.median(host_s), starved=starved)


class FakeTimer:
    """A timer for tests: calls ``run`` once (so the code path is exercised) and returns fixed times.

    Parameters
    ----------
    times_ms : callable
        ``label -> time in ms`` (raise to simulate a timing failure).
    """

    def __init__(self, times_ms: Callable[[str], float], host_overhead_us: float = 10.0):
        self.times_ms = times_ms
        self.host_overhead_us = host_overhead_us
        self.calls: list[str] = []

    def measure(self, run: Callable[[int], object], label: str = "", best_ms: float | None = None) -> Measurement:
        run(0)
        self.calls.append(label)
        t = float(self.times_ms(label))
        return Measurement(times_ms=(t * 0.99, t, t * 1.02), host_overhead_us=self.host_overhead_us)
