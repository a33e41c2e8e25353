"""Decisions: what one problem runs, PyTorch's own path or a candidate whose gain is known to pay.

A problem the records measured runs their fastest where its gain pays (measurements of this GPU). A problem they
lack is decided by the rule (:mod:`algosel.runtime.rule`): pass through, switch to the model's pick untimed, or time
the model's top candidates and PyTorch's default and keep the fastest, whichever is expected to save the most;
``verify=k`` times the top ``k`` of every such problem instead. What leaving PyTorch's path costs is the least gain
(``min_gain_us``, where the step is not known to be GPU-bound), the path's own host cost, and the host time per call
the candidate takes over PyTorch's default where the records or the measurement timed it
(:func:`~algosel.runtime.policy.host_extra_us`). Decisions go into the persistent cache (:mod:`algosel.runtime.cache`),
so a later process decides nothing again; a cached decision is judged again under the reading executor's policy.
Processes that share the cache (the ranks of a job) claim a problem before timing it (:mod:`algosel.runtime.claims`):
one of them times it, the others wait for its decision and run the same.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.candidates import LIVE_MODES, CandidateSource
from algosel.runtime.claims import ProblemClaims, wait_for
from algosel.runtime.decision import Decision, Reason, keep
from algosel.runtime.device import DeviceProbe
from algosel.runtime.policy import (
    SwitchPolicy,
    fastest,
    finite,
    host_extra_us,
    judge,
)
from algosel.runtime.recurrence import Recurrence
from algosel.runtime.routes import one_matrix_product
from algosel.runtime.rule import PASS, SWITCH, UNTIMED_WIN_SHARE, Action, Costs
from algosel.runtime.rule import decide as rule_decide
from algosel.runtime.verify import Verifier

#: :meth:`Decider.before_timing`'s verdicts on a direction: look at the device first, or switch at once.
LOOK, EXEMPT = "look", "exempt"


class Decider:
    """Decides problems for one executor (see the module docstring)."""

    def __init__(self, policy: SwitchPolicy, selector: Any, candidates: CandidateSource, verifier: Verifier,
                 device: DeviceProbe, cache: Callable[[], RuntimeCache | None], native: Callable[[], Any],
                 max_workspace_bytes: int | None = None,
                 device_bound: Callable[[], bool] = lambda: False, calibration: Any = None,
                 rule_times: bool = True, tuning_budget_s: float | None = None):  # fmt: skip
        self.policy, self.selector, self.candidates, self.verifier = policy, selector, candidates, verifier
        #: Whether the executor's looks found the step GPU-bound (``policy.looks.device_bound_fraction``): measured
        #: and recorded gains then need no least gain beyond the noise bound and their host costs.
        self.device_bound = device_bound
        self.device = device
        self._cache, self._native = cache, native
        self.max_workspace_bytes = max_workspace_bytes
        self.dtypes = set(selector.manifest.get("dtypes", ("float32", "float16")))
        #: Decisions :meth:`before_timing` made for recorded or cached directions, for :meth:`take` (deciding
        #: them again would repeat the records' lookup, or the cache's rejudging).
        self._known: dict[ConvProblem, Decision] = {}
        self._claims: dict[int, ProblemClaims | None] = {}  # by id of the cache they are beside
        #: The rule (:mod:`algosel.runtime.rule`) decides unrecorded problems, with the time model's held-out errors
        #: (``calibration``); ``rule_times``: it may time candidates (the user's ``verify=False`` forbids it).
        self.rule_times, self.calibration = bool(rule_times), calibration
        self.tuning_budget_s = tuning_budget_s
        self.recurrence = Recurrence(policy.expected_run_steps)
        #: One problem is decided at a time: by the step's thread, or beside it (:mod:`algosel.runtime.aside`).
        self._deciding = threading.RLock()
        self._beside = threading.local()  # .on: deciding beside the step (no timing)

    @property
    def verify(self) -> int:
        return self.verifier.k

    @property
    def may_time(self) -> bool:
        """Whether this executor times candidates at all: verify mode, or the rule unless ``verify=False``."""
        return bool(self.rule_times or self.verify)

    def take(self, problem: ConvProblem, device: torch.device) -> Decision:
        """``problem``'s decision: the one :meth:`before_timing` or :meth:`prepare` made, else :meth:`decide`'s (also
        where the one prepared beside the step leaves timing to this thread)."""
        # no lock for a decision kept (one dict operation): the deciding thread holds the lock for a whole problem
        # at a time, and a step that waited for it at every new signature lost more than deciding costs
        known = self._known.pop(problem, None)
        if known is None or known.reason == Reason.TIME_ON_STEP:
            return self.decide(problem, device)
        return known

    def prepare(self, problem: ConvProblem, device: torch.device) -> None:
        """Decide ``problem`` beside the step (:mod:`algosel.runtime.aside`): everything but timing, kept for
        :meth:`take`; where the rule would time candidates, the decision kept says so (:data:`Reason.TIME_ON_STEP`)."""
        with self._deciding:
            if problem in self._known:
                return
            self._beside.on = True
            try:
                self._known[problem] = self.decide(problem, device)
            finally:
                self._beside.on = False

    def prepared(self, problem: ConvProblem) -> bool:
        """Whether a decision is kept for ``problem`` (:meth:`prepare`, :meth:`before_timing`)."""
        return problem in self._known

    def kept(self, problem: ConvProblem) -> Decision | None:
        """The decision kept for ``problem`` until :meth:`take` (None: none)."""
        return self._known.get(problem)

    def decide(self, problem: ConvProblem, device: torch.device) -> Decision:
        """What ``problem`` runs; from the persistent cache where it has a decision made the same way."""
        with self._deciding:
            return self._decide(problem, device)

    def _decide(self, problem: ConvProblem, device: torch.device) -> Decision:
        if problem.dtype not in self.dtypes:
            return Decision(problem.key, DEFAULT_ID, "model", Reason.DTYPE_NOT_COVERED)
        cache = self.cache_for(device)
        if cache is None:
            return self.decide_uncached(problem, device)
        hit = self._usable(cache.get(problem.key))
        if hit is not None:
            return self.rejudge(problem, hit)
        claims = self._claims_beside(cache) if self._would_measure(problem, device) else None
        if claims is None:
            return self._decided(cache, problem, device)
        if claims.claim(problem.key):
            try:  # another process may have decided it between the look above and the claim
                hit = self._usable(cache.get(problem.key))
                return self.rejudge(problem, hit) if hit is not None else self._decided(cache, problem, device)
            finally:
                claims.release(problem.key)
        # another process is timing it: its decision, so that the job runs one (this process times it past the wait)
        hit = wait_for(lambda: self._usable(cache.get(problem.key)), self.policy.sharing.wait_s)
        return self.rejudge(problem, hit) if hit is not None else self._decided(cache, problem, device)

    def cache_for(self, device: torch.device) -> RuntimeCache | None:
        """The persistent cache of decisions on ``device``'s problems: those of devices that measure (a GPU)."""
        return self._cache() if device.type == "cuda" or self.device.can_time(device) else None

    def _usable(self, hit: Decision | None) -> Decision | None:
        """A cached decision this executor takes: measurements and records (a decision made untimed is made again:
        what this process has met may weigh it otherwise)."""
        return hit if hit is not None and hit.source in ("records", "measured") else None

    def _decided(self, cache: RuntimeCache, problem: ConvProblem, device: torch.device) -> Decision:
        decision = self.decide_uncached(problem, device)
        keep(cache, decision)
        return decision

    def _would_measure(self, problem: ConvProblem, device: torch.device) -> bool:
        return self.may_time and self._can_time(device) and not self.selector.is_recorded(problem)

    def _can_time(self, device: torch.device) -> bool:
        """Whether candidates can be timed on ``device``; beside the step, a GPU is taken to allow it without asking
        (no CUDA call on that thread: it would open a context on the thread's current device, GPU 0 in every rank
        of a job) and the step's thread times it, asking then (:meth:`take`)."""
        if device.type == "cuda" and getattr(self._beside, "on", False):
            return True
        return self.device.can_time(device)

    def _claims_beside(self, cache: RuntimeCache) -> ProblemClaims | None:
        """The claims of processes sharing ``cache`` (None for a cache without a folder of its own)."""
        if id(cache) not in self._claims:
            folder = getattr(cache, "folder", None)
            stale_s = self.policy.sharing.claim_stale_s
            self._claims[id(cache)] = None if folder is None else ProblemClaims(folder, stale_s)
        return self._claims[id(cache)]

    def decide_uncached(self, problem: ConvProblem, device: torch.device) -> Decision:
        """:meth:`decide` without the persistent cache."""
        if self.selector.is_recorded(problem):
            return self._recorded(problem)
        return self.by_rule(problem, device)

    def by_rule(self, problem: ConvProblem, device: torch.device) -> Decision:
        """An unrecorded problem's decision by the rule: pass through, switch untimed, or time the model's top ``k``
        and PyTorch's default, whichever is expected to save the most (:func:`algosel.runtime.rule.decide`); verify
        mode times its top ``verify`` instead. A layer's measured verdict at a near size passes a "default fastest"
        through untimed and limits timing to its switch (:mod:`algosel.runtime.recurrence`)."""
        recurrence = self.recurrence
        recurrence.met(problem)
        budget = self.tuning_budget_s
        can_time = self.may_time and self._can_time(device)
        can_time = can_time and (budget is None or self.verifier.planning_s < budget)
        verdict = recurrence.near_verdict(problem) if can_time else None
        if verdict is not None and verdict.candidate_id == DEFAULT_ID:
            return Decision(problem.key, DEFAULT_ID, "model", Reason.NEAR_SIZE_DEFAULT)
        if self.verify and can_time:
            return self._verified(problem, device, verdict)
        if self.calibration is None or not self.verifier.has_times():
            return Decision(problem.key, DEFAULT_ID, "model", Reason.NO_CALIBRATION)
        ids = self.top(problem, self.policy.rule_max_timed)
        if verdict is not None and verdict.candidate_id in ids:
            ids = [verdict.candidate_id]
        if not ids:
            return Decision(problem.key, DEFAULT_ID, "model", Reason.PREDICTED_BEST)
        times = self.verifier.predicted(problem, [*ids, DEFAULT_ID])
        action, host_us = self._weigh(problem, ids, times, can_time)
        switch_to = action.candidates[0] if action.kind == SWITCH else ""
        if switch_to.startswith("cudnn:") and device.type == "cuda" and self.candidates.live_available():
            # an untimed switch to a cuDNN config is one cuDNN lists for the problem (the nearest recorded problem's
            # may not build for it); its live list is queried on the step's thread (a CUDA call)
            if getattr(self._beside, "on", False):
                return Decision(problem.key, DEFAULT_ID, "model", Reason.TIME_ON_STEP, times)
            live = self.candidates.ranked(problem, True, self.policy.rule_max_timed + 1, LIVE_MODES)
            ids = [c.candidate_id for c in live.choices if c.candidate_id != DEFAULT_ID]
            times = self.verifier.predicted(problem, [*ids, DEFAULT_ID], live)
            action, host_us = self._weigh(problem, ids, times, can_time=False)
        if action.kind == PASS:
            return Decision(problem.key, DEFAULT_ID, "model", action.reason, times, host_us)
        if action.kind == SWITCH:
            return Decision(problem.key, action.candidates[0], "predicted", action.reason, times, host_us)
        return self._timed(problem, device, list(action.candidates), verdict, times)

    def _weigh(self, problem: ConvProblem, ids: list[str], times: dict[str, float],
               can_time: bool) -> tuple[Action, dict[str, float]]:  # fmt: skip
        """The rule's action over the ranked ``ids`` and their predicted ``times``, with the records' host times of
        the first of them and PyTorch's default: its route's host cost and the host time the records say it takes
        over the default are what a switch to it costs a call."""
        host_us = self.recorded_host_us(problem, [*ids[:1], DEFAULT_ID])
        policy = self.policy
        route_host_us = self.overhead_us(problem, ids[0]) + host_extra_us(host_us, ids[0]) if ids else 0.0
        costs = Costs(policy.plan_build_ms, policy.timing_overhead_ms, policy.timer.max_repeats + 1, route_host_us)
        action = rule_decide(times, ids, self.errors(problem), self.recurrence.expected_calls(problem), costs,
                             policy.rule_max_timed, can_time, min_win_share=UNTIMED_WIN_SHARE)  # fmt: skip
        return action, host_us

    def _verified(self, problem: ConvProblem, device: torch.device, verdict: Decision | None) -> Decision:
        """Verify mode's decision: its top ``verify`` timed (the layer's switch alone where a near size found one),
        nothing where the default is predicted too short for any candidate to save the least gain."""
        if self.too_short_to_pay(problem):
            return Decision(problem.key, DEFAULT_ID, "model", Reason.TOO_SHORT_TO_PAY)
        ids = self.top(problem, self.verify)
        if verdict is not None and verdict.candidate_id in ids:
            ids = [verdict.candidate_id]
        if not ids:
            return Decision(problem.key, DEFAULT_ID, "model", Reason.PREDICTED_BEST)
        return self._timed(problem, device, ids, verdict)

    def _timed(self, problem: ConvProblem, device: torch.device, timed: list[str], verdict: Decision | None,
               predicted: dict[str, float] | None = None) -> Decision:  # fmt: skip
        """Time ``timed`` and PyTorch's default, keep the fastest where it pays (on the step's thread: timing needs
        its stream; beside the step, a decision that says so)."""
        if getattr(self._beside, "on", False):
            return Decision(problem.key, DEFAULT_ID, "model", Reason.TIME_ON_STEP, predicted or {})
        t0 = self.verifier.clock()
        if verdict is None and device.type == "cuda" and self.candidates.live_available():
            # what is timed comes from cuDNN's own list of the problem where it can be queried (a few ms): the
            # nearest recorded problem's configs may not build for it
            live = self.candidates.ranked(problem, True, len(timed) + 1, LIVE_MODES)
            timed = [c.candidate_id for c in live.choices if c.candidate_id != DEFAULT_ID][: len(timed)]
        measured, host_us = self.verifier.time_candidates(problem, timed, device)
        self.verifier.measured_problems += 1
        self.verifier.planning_s += self.verifier.clock() - t0
        # the rule's measurement is judged as in a GPU-bound step (probation and the step trial still check that the
        # step gains); verify mode's by the looks so far, as a recorded problem's
        decision = self._judge(problem, fastest(measured, host_us), measured, measured.get(DEFAULT_ID), "measured",
                               self.policy.min_measured_ratio, host_us, device_bound=not self.verify)  # fmt: skip
        self.recurrence.remember(problem, decision.candidate_id)
        return decision

    def top(self, problem: ConvProblem, k: int) -> list[str]:
        """The model's top ``k`` candidates of ``problem`` other than PyTorch's default (of the nearest recorded
        problem's list)."""
        ranked = self.candidates.ranked(problem, False, k + 1)
        return [c.candidate_id for c in ranked.choices if c.candidate_id != DEFAULT_ID][:k]

    def errors(self, problem: ConvProblem) -> Any:
        """The calibration's error rows for ``problem``'s family and distance from the records."""
        return self.calibration.for_problem(problem, self.selector.records_distance(problem))

    def too_short_to_pay(self, problem: ConvProblem) -> bool:
        """Whether the model predicts PyTorch's default too short for any candidate to save the least gain even at
        the calibration's largest held-out error of the default's time (never, without a calibrated time model)."""
        if not self.verifier.has_times() or self.calibration is None:
            return False
        default_ms = self.verifier.predicted(problem, [DEFAULT_ID]).get(DEFAULT_ID)
        if not finite(default_ms):
            return False
        largest = float(2.0 ** max(self.errors(problem).default, default=0.0))
        return 1e3 * default_ms * largest < self.policy.min_gain_us

    def _recorded(self, problem: ConvProblem) -> Decision:
        """A recorded problem: its records' fastest (verify mode: they are measurements of this GPU) or the model's
        pick, judged by the recorded times."""
        sel = self.selector
        rows = sel.catalogue.rows(problem.key) or []
        default_ms = sel.catalogue.time_ms(problem.key, DEFAULT_ID)
        if self.verify:
            times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows
                     if r.get("status") == "ok" and finite(r.get("time_ms_median"))
                     and self._allowed(problem, r)}  # fmt: skip
            host_us = self.recorded_host_us(problem, list(times))
            cid = fastest(times, host_us)
            host_us = {c: host_us[c] for c in (cid, DEFAULT_ID) if c in host_us}
        else:
            cid = sel.choose(problem, self.max_workspace_bytes, top_k=1, live=False)[0].candidate_id
            times = {}
            for c in (cid, DEFAULT_ID):
                t = sel.catalogue.time_ms(problem.key, c)
                if t is not None:
                    times[c] = t
            host_us = self.recorded_host_us(problem, [cid, DEFAULT_ID])
        return self._judge(problem, cid, times, default_ms, "records", self.policy.min_measured_ratio, host_us)

    def rejudge(self, problem: ConvProblem, hit: Decision) -> Decision:
        """A cached decision under this executor's policy: a switch is kept only if it still pays; a pass-through for
        a gain below the threshold is judged again with its fastest candidate."""
        times = hit.times_ms
        default_ms = times.get(DEFAULT_ID)
        if default_ms is None:
            return hit
        if not hit.passes_through:
            cid = hit.candidate_id
        elif hit.reason == Reason.BELOW_THRESHOLD:
            others = {c: t for c, t in times.items() if c != DEFAULT_ID and finite(t)}
            if not others:
                return hit
            cid = min(others, key=others.get)
        else:
            return hit
        ratio = self.policy.min_measured_ratio
        host_us = hit.host_us if hit.source == "measured" else self.recorded_host_us(problem, [cid, DEFAULT_ID])
        # a switch kept for a GPU-bound step is judged by that rule again (the process that kept it looked at the
        # device; this one has not yet, and its probation and step trial still check that it pays here)
        return self._judge(problem, cid, times, default_ms, hit.source, ratio, host_us,
                           device_bound=hit.reason == Reason.DEVICE_BOUND)  # fmt: skip

    def _judge(self, problem: ConvProblem, cid: str, times: dict[str, float], default_ms: float | None, source: str,
               min_ratio: float, host_us: dict[str, float] | None, device_bound: bool = False) -> Decision:  # fmt: skip
        overhead_us = 0.0 if cid == DEFAULT_ID else self.overhead_us(problem, cid)
        # predicted gains are never judged by the GPU-bound rule: their error is larger than what it lets through
        bound = source in ("records", "measured") and (device_bound or self.device_bound())
        return judge(self.policy, problem.key, cid, times, default_ms, source, min_ratio, overhead_us, host_us, bound)

    def overhead_us(self, problem: ConvProblem, candidate_id: str) -> float:
        """Host time per call that leaving PyTorch's path for ``candidate_id`` costs: nothing measurable for a GEMM
        lowering that is one matrix product or a cuDNN plan on the compiled path, the Python Function's otherwise."""
        if candidate_id.startswith("gemm:"):
            one = one_matrix_product(problem.directions()[0])
            return 0.0 if one else self.policy.python_path_overhead_us
        return 0.0 if self._native() is not None else self.policy.python_path_overhead_us

    def recorded_host_us(self, problem: ConvProblem, candidate_ids: list[str]) -> dict[str, float]:
        """The records' host time per call of ``candidate_ids`` on ``problem`` (or its nearest recorded problem);
        empty where nothing but PyTorch's default is asked."""
        if all(c == DEFAULT_ID for c in candidate_ids):
            return {}
        return self.selector.host_us(problem, candidate_ids)

    def _allowed(self, problem: ConvProblem, row: dict[str, Any]) -> bool:
        from algosel.learn.rules import allowed  # noqa: PLC0415

        return allowed(row, problem.direction, problem.dtype, self.selector.blocked, self.max_workspace_bytes)

    # ----------------------------------------------------------------------------------- looking first
    def before_timing(self, problem: ConvProblem, device: torch.device, planned: bool) -> str:
        """What looking first does for one direction of a new signature (``planned``: it has a plan already):
        :data:`LOOK` where deciding it would time its shortlist; :data:`EXEMPT` where its known or predicted gain
        is one probation exempts (``probation_exempt_gain_us``: switched at once, no looks); ``""`` otherwise."""
        if not self.device.can_time(device) or planned or problem.dtype not in self.dtypes:
            return ""
        exempt_us = self.policy.looks.exempt_gain_us
        cache = self.cache_for(device)
        hit = cache.get(problem.key) if cache is not None else None
        if self.selector.is_recorded(problem) or (hit is not None and hit.source in ("records", "measured")):
            known = self._known.get(problem)
            if known is None:  # from the records or the cache: nothing is timed
                known = self._known[problem] = self.decide(problem, device)
            return EXEMPT if known.gain_us() >= exempt_us else ""
        # the nearest recorded list: a query of cuDNN's live list is not paid by a signature whose looks find the
        # device idle
        verifier = self.verifier
        if self.too_short_to_pay(problem):
            return ""
        if verifier.has_times():
            default_ms = verifier.predicted(problem, [DEFAULT_ID]).get(DEFAULT_ID, math.nan)
            if 1e3 * default_ms < exempt_us:
                # no candidate can save the exempting gain off a default predicted shorter than it: look without
                # ranking the shortlist (about 0.6 ms of host time a direction, paid at every new input size of a
                # layer: verify mode's first pass of the multi-scale detection head ran 1.4 s over the default's,
                # docs/results/2026-12-06-gpu-bound-zoo-h100.md); a signature whose looks find the device busy ranks
                # it when it is timed
                return LOOK
        ids = self.top(problem, self.verify or self.policy.rule_max_timed)
        if ids and self.verifier.has_times():
            times = self.verifier.predicted(problem, [*ids, DEFAULT_ID])
            default_ms = times.get(DEFAULT_ID, math.nan)
            if 1e3 * (default_ms - min(times.get(c, math.inf) for c in ids)) >= exempt_us:
                return EXEMPT
        return LOOK if ids else ""
