"""Deciding beside the step: new problems are decided on a thread of their own while their calls pass through.

Deciding one problem the records lack costs the model's ranking and predicted times, about 1-2 ms of host time. A
fixed-shape network pays it once per layer; a network whose input size changes pays it at every new size of every
layer: on an H100 the detection head over 30 input sizes met 600 new problems in its first pass, and deciding them on
the step's path made the rule's whole run 1.45-1.69x the default's (docs/results/2026-12-06-the-rule.md). Here a new
call signature whose problems are not yet decided runs PyTorch's own convolution (``pytorch:deciding``, not memoised:
its next call asks again) while a worker thread decides them; a GPU-bound step leaves the host idle most of the time
(waiting on the device, PyTorch's bindings release the GIL), and the worker uses it.

What the worker decides is everything but timing: where the rule would time candidates, the decision says so
(:attr:`Reason.TIME_ON_STEP`), and the step's own thread times them on the next call (timing needs the step's stream
and an otherwise idle device). The worker lives while it has work: it ends once its queue has stayed empty for
``idle_s``, or when the main thread has ended, so it never holds a process open.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import torch

from algosel.problem import ConvProblem


class DecidingAside:
    """A queue of problems and the thread that decides them (see the module docstring).

    Parameters
    ----------
    prepare : callable
        ``prepare(problem, device)`` decides one problem and keeps its decision for the step's thread
        (:meth:`algosel.runtime.decisions.Decider.prepare`).
    prepared : callable
        ``prepared(problem)``: whether a decision is kept for ``problem``.
    idle_s : float
        Seconds the worker waits for more work before it ends.
    rest_per_work : float
        After each problem the worker sleeps this many times as long as deciding it took (at most ``max_rest_s``):
        deciding holds the GIL most of the time (the model's trees are evaluated in NumPy), and a step's thread that
        wants it back waits; resting as long as it worked leaves the step's thread at least half of it.
    """

    def __init__(self, prepare: Callable[[ConvProblem, torch.device], None],
                 prepared: Callable[[ConvProblem], bool], idle_s: float = 0.5, rest_per_work: float = 1.0,
                 max_rest_s: float = 0.01):  # fmt: skip
        self._prepare, self._prepared, self.idle_s = prepare, prepared, float(idle_s)
        self.rest_per_work, self.max_rest_s = float(rest_per_work), float(max_rest_s)
        self._queue: deque[tuple[ConvProblem, torch.device]] = deque()
        self._queued: set[ConvProblem] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        #: Problems the worker has decided, and the errors it met (a problem whose deciding failed is decided again on
        #: the step's thread, where the error reaches the caller as the executor's own would).
        self.decided = 0
        self.failed: set[ConvProblem] = set()

    def ready(self, problems: Iterable[ConvProblem], device: torch.device) -> bool:
        """Whether every one of ``problems`` is decided (or failed here); those not yet are queued, once."""
        waiting = [p for p in problems if not self._prepared(p) and p not in self.failed]
        if not waiting:
            return True
        with self._wake:
            for p in waiting:
                if p not in self._queued:
                    self._queued.add(p)
                    self._queue.append((p, device))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="algosel-deciding", daemon=False)
                self._thread.start()
            self._wake.notify()
        return False

    def pending(self) -> int:
        """Problems queued and not yet decided."""
        with self._wake:
            return len(self._queued)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until the queue is empty and the worker has ended (tests, benchmarks); False on timeout."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return self._thread is None

    def _work(self) -> None:
        while True:
            with self._wake:
                if not self._queue:
                    self._wake.wait(self.idle_s)
                if not self._queue or not threading.main_thread().is_alive():
                    self._thread = None
                    self._queued.clear()
                    self._queue.clear()
                    return
                problem, device = self._queue.popleft()
            t0 = time.perf_counter()
            try:
                self._prepare(problem, device)
                self.decided += 1
            except Exception:  # noqa: BLE001 - decided again on the step's thread, whose caller sees the error
                self.failed.add(problem)
            finally:
                with self._wake:
                    self._queued.discard(problem)
            time.sleep(min(self.max_rest_s, self.rest_per_work * (time.perf_counter() - t0)))
