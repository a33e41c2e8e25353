"""Timing a new problem's candidates: PyTorch's default and a shortlist, once each, with the sweeper's timer.

The decider (:mod:`algosel.runtime.decisions`) says what to time: the rule's top ``k`` where timing is expected to
pay, or verify mode's top ``verify`` on every new problem the records lack. This module times them (a small budget;
``policy.timer``) and gives the model's predicted times the decider weighs. Gradients are timed on autograd's thread
for the device: PyTorch keeps its cuDNN plans per thread, and the default's plans built for the timing are then the
ones the network's backward uses.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime.autograd_thread import on_autograd_thread
from algosel.runtime.candidates import CandidateSource, Ranked
from algosel.runtime.policy import SwitchPolicy, finite
from algosel.runtime.state import planning
from algosel.spaces import get_space, split_candidate_id


class Measurer(Protocol):
    """What times candidates (the sweeper: :meth:`algosel.measure.sweep.Sweeper.measure_candidates`)."""

    def measure_candidates(self, problem: ConvProblem, pairs: list, source: str = "",
                           deadline_s: float | None = None) -> list[dict[str, Any]]:  # fmt: skip
        """One row per candidate (``candidate_id``, ``status``, ``time_ms_median``, ``host_overhead_us``)."""


def runtime_measurer(policy: SwitchPolicy, math: str = "caller") -> Measurer:
    """The sweeper as verify mode times with it: ``policy.timer``'s small budget, one operand set, candidates checked
    against PyTorch's default (listed first) under the caller's TF32 switches (an exact reference, or switches set
    otherwise, made PyTorch build a plan of its own per problem: a third of EfficientNet-B0's cold pass).
    ``math="problem"``: the switches set for the problem's dtype instead (``algosel.predict``, whose caller may not
    be PyTorch at all)."""
    from algosel.measure.sweep import Sweeper  # noqa: PLC0415
    from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415

    timer = CudaEventTimer(**policy.timer.as_kwargs())
    return Sweeper([], timer, {"env_id": "runtime"}, operand_sets=1, reference="first", math=math,
                   slow_build_s=policy.timer.slow_build_s)  # fmt: skip


class Verifier:
    """Times candidates and predicts their times for the decider (see the module docstring); ``k``: verify mode's
    candidates a problem (0: the rule's)."""

    def __init__(self, policy: SwitchPolicy, selector: Any, candidates: CandidateSource, k: int,
                 measurer: Measurer | None = None, clock: Callable[[], float] = time.perf_counter):  # fmt: skip
        self.policy, self.selector, self.candidates, self.k = policy, selector, candidates, k
        self._measurer = measurer  # None: the sweeper, made on first use
        self.clock = clock
        self.planning_s = 0.0  # seconds spent measuring, for benchmarks of the first pass
        self.measured_problems = 0
        #: Where the rows of every measurement also go (``Executor(record_measured=...)``): a MeasuredRecords
        self.records: Any = None

    def measurer(self) -> Measurer:
        if self._measurer is None:
            self._measurer = runtime_measurer(self.policy)
        return self._measurer

    # -------------------------------------------------------------------------------------- predictions
    def has_times(self) -> bool:
        """Whether the model predicts device times (a model trained without a time model has no gain estimate)."""
        return getattr(self.selector, "time_model", None) is not None

    def predicted(self, problem: ConvProblem, ids: list[str], ranked: Ranked | None = None) -> dict[str, float]:
        """Predicted times (ms) of ``ids`` among the list ``ranked`` came from (the model's own list by default)."""
        if ranked is not None and ranked.rows is not None:
            return self.selector.predicted_time_ms(problem, ids, rows=ranked.rows)
        return self.selector.predicted_time_ms(problem, ids)

    # ------------------------------------------------------------------------------------------- timing
    def time_candidates(self, problem: ConvProblem, ids: list[str],
                        device: torch.device) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
        """Median device time (ms) and host time per call (us) of PyTorch's default and ``ids`` on ``problem``
        (candidates that failed are left out)."""
        pairs = []
        for cid in [DEFAULT_ID, *ids]:
            space_name, name = split_candidate_id(cid)
            space = get_space(space_name)
            pairs.append((space, space.candidate(name, problem.direction)))
        measurer = self.measurer()
        on_gpu = device.type == "cuda"

        def measure():
            no_autocast = torch.autocast("cuda", enabled=False) if on_gpu else contextlib.nullcontext()
            with planning(), torch.no_grad(), no_autocast:
                return measurer.measure_candidates(problem, pairs, source="runtime")

        if problem.direction == "fwd" or not on_gpu:
            rows = measure()
        else:  # where the network's backward runs (the verifier's device: the current one), and builds its plans
            rows = on_autograd_thread(measure, torch.device("cuda", torch.cuda.current_device()))
        if self.records is not None:
            self.records.add(problem, rows)
        times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows if r["status"] == "ok"}
        host_us = {r["candidate_id"]: float(r["host_overhead_us"]) for r in rows
                   if r["status"] == "ok" and finite(r.get("host_overhead_us"))}  # fmt: skip
        return times, host_us
