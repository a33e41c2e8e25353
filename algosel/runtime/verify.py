"""Verify mode's measurements: which candidates of a new problem are worth timing, and their times.

On the first call of a problem the records lack, verify mode times PyTorch's default and the model's top ``verify``
candidates once with the sweeper's timer (a small budget; ``policy.timer``), and keeps the fastest where it pays
(:mod:`algosel.runtime.decisions`). What it times:

- nothing where the model predicts the default too short for any candidate to save the least gain;
- the shortlist: the model's top ``verify`` of cuDNN's live list (heuristic modes ``policy.verify_live_modes``) or,
  where it cannot be queried, of the nearest recorded problem's list, pruned to those predicted within
  ``verify_max_predicted_ratio`` of the default (``_far`` where the model extrapolates), the first always;
- on a long call (default >= ``verify_whole_list_ms``), the rest of all three modes' lists up to
  ``verify_list_max`` candidates, none that compiles at build time, none started after ``verify_rest_budget_s``.

The model's predicted times miss what problems the records lack gain, so a shortlist is timed whatever gain is
predicted (``gain_filter=True`` brings back the filter; docs/hook.md has the measurements behind each choice).
Gradients are timed on autograd's thread for the device: PyTorch keeps its cuDNN plans per thread, and the default's
plans built for the timing are then the ones the network's backward uses.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime.autograd_thread import on_autograd_thread
from algosel.runtime.candidates import CandidateSource, Ranked
from algosel.runtime.policy import (
    PREDICTED_GAIN_TOO_SMALL,
    TOO_SHORT_TO_PAY,
    SwitchPolicy,
    finite,
    pruned_shortlist,
    too_short_to_pay,
    worth_a_closer_look,
)
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
                   slow_build_s=policy.verify_slow_build_s)  # fmt: skip


@dataclass
class Measured:
    """What verify mode measured on one problem: device times (ms) and host times (us) by candidate, or why nothing
    was timed."""

    times_ms: dict[str, float] = field(default_factory=dict)
    host_us: dict[str, float] = field(default_factory=dict)
    why_not: str = ""


class Verifier:
    """Verify mode's choice of what to time, and the timing (see the module docstring)."""

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

    def far_from_records(self, problem: ConvProblem) -> bool:
        """Whether ``problem`` lies farther than ``near_records_distance`` from every recorded problem of its kind:
        the model's predicted times are extrapolations there."""
        return self.selector.records_distance(problem) > self.policy.near_records_distance

    def too_short_to_pay(self, problem: ConvProblem) -> bool:
        """Whether the model predicts PyTorch's default too short for any candidate to save the least gain."""
        if not self.has_times():
            return False
        return too_short_to_pay(self.policy, self.predicted(problem, [DEFAULT_ID]).get(DEFAULT_ID))

    # ------------------------------------------------------------------------------------ what to time
    def shortlist_to_time(self, problem: ConvProblem, gain_filter: bool = False, prune: bool = True,
                          live: bool | None = None) -> tuple[list[str], str]:  # fmt: skip
        """The candidates verify mode times on a new ``problem`` besides PyTorch's default, or none and why not
        (``live``: force either list; ``prune=False``: the whole top ``k``; ``gain_filter``: nothing where the
        predicted gain is not worth timing)."""
        if self.too_short_to_pay(problem):
            return [], TOO_SHORT_TO_PAY
        use_live = (True if live is None else live) and self.candidates.live_available()
        ranked = self.candidates.ranked(problem, use_live, self.k + 1, self.policy.verify_live_modes)
        ids = [c.candidate_id for c in ranked.choices if c.candidate_id != DEFAULT_ID][: self.k]
        if not ids:
            return [], "predicted best"
        if self.has_times() and (gain_filter or prune):
            times = self.predicted(problem, [*ids, DEFAULT_ID], ranked)
            if gain_filter and not worth_a_closer_look(self.policy, times):
                return [], PREDICTED_GAIN_TOO_SMALL
            if prune:
                ids = pruned_shortlist(ids, times, self.policy.max_predicted(self.far_from_records(problem)))
        return ids, ""

    def rest_of_list_to_time(self, problem: ConvProblem, timed: list[str], default_ms: float | None) -> list[str]:
        """What verify mode times after its shortlist ``timed`` where PyTorch's default measured ``default_ms``:
        nothing under ``verify_whole_list_ms``; else the model's ranking of all three modes' lists without what was
        timed, pruned as the shortlist is, up to ``verify_list_max`` in all, none compiled at build time."""
        policy = self.policy
        if default_ms is None or default_ms < policy.verify_whole_list_ms:
            return []
        ranked = self.candidates.ranked(problem, self.candidates.live_available(), policy.verify_list_max + 1,
                                        policy.verify_whole_list_modes)  # fmt: skip
        ids = [c.candidate_id for c in ranked.choices if c.candidate_id != DEFAULT_ID
               and policy.runtime_compiled_note not in c.notes.split(",")][: policy.verify_list_max]  # fmt: skip
        rest = [c for c in ids if c not in timed]
        if rest and self.has_times():
            times = self.predicted(problem, [*rest, DEFAULT_ID], ranked)
            limit_ms = policy.max_predicted(self.far_from_records(problem)) * times.get(DEFAULT_ID, math.inf)
            rest = [c for c in rest if not finite(times.get(c)) or times[c] <= limit_ms]
        return rest[: max(policy.verify_list_max - len(timed), 0)]

    # ------------------------------------------------------------------------------------------- timing
    def measure(self, problem: ConvProblem, device: torch.device) -> Measured:
        """Time the shortlist and PyTorch's default once (and the rest of the list after a long default)."""
        t0 = self.clock()
        ids, why = self.shortlist_to_time(problem)
        if why:
            return Measured(why_not=why)
        times, host_us = self.time_candidates(problem, ids, device)
        rest = self.rest_of_list_to_time(problem, ids, times.get(DEFAULT_ID))
        if rest:  # a long call: the rest of the list, PyTorch's default first again as the reference
            deadline_s = time.perf_counter() + self.policy.verify_rest_budget_s
            more_times, more_host_us = self.time_candidates(problem, rest, device, deadline_s)
            times.update({c: t for c, t in more_times.items() if c != DEFAULT_ID})
            host_us.update({c: h for c, h in more_host_us.items() if c != DEFAULT_ID})
        self.measured_problems += 1
        self.planning_s += self.clock() - t0
        return Measured(times, host_us)

    def time_candidates(self, problem: ConvProblem, ids: list[str], device: torch.device,
                        deadline_s: float | None = None) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
        """Median device time (ms) and host time per call (us) of PyTorch's default and ``ids`` on ``problem``
        (candidates that failed, or not started by ``deadline_s``, are left out)."""
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
                return measurer.measure_candidates(problem, pairs, source="runtime", deadline_s=deadline_s)

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
