"""Plans: what runs for one problem (a direction of a call), built once per executor from its decision.

A plan is a prepared candidate (a cuDNN execution plan, a GEMM lowering), or PyTorch's own path with the reason.
cuDNN plans are serialized into the persistent cache and loaded into the compiled path where it is built, so a later
process builds nothing; a plan that fails to build or load falls back to PyTorch's path, counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from algosel.operands import OUTPUT_ROLE, empty_like_layout
from algosel.problem import ConvProblem
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.decision import Decision
from algosel.runtime.stats import CallStats
from algosel.spaces import CandidateError, PreparedCandidate, get_space, split_candidate_id

log = logging.getLogger(__name__)


@dataclass
class Plan:
    """What runs for one problem: a runner (``None``: PyTorch's path, with the reason as ``path``)."""

    runner: PreparedCandidate | None
    path: str  # "gemm", "cudnn" or "pytorch:<reason>"
    native_id: int = -1  # the plan's id in the compiled path, where it was loaded there
    gain_us: float = 0.0  # device time per call the decision expects it to save over PyTorch's default


def compiled_plans(plans: list[Plan]) -> list[Plan]:
    """A convolution's plans with its GEMM directions passed through where GEMM is mixed with other paths.

    Such a mix runs only as the Python autograd Function (about 60 us of host time a call, more than the one
    direction's GEMM gain usually saves in a host-bound step), while without the GEMM directions the compiled path
    runs the rest at PyTorch's own host cost. A convolution whose every direction is GEMM keeps it.
    """
    if not any(p.path == "gemm" for p in plans) or all(p.path == "gemm" for p in plans):
        return plans
    return [Plan(None, "pytorch:gemm mixed with other paths") if p.path == "gemm" else p for p in plans]


class PlanBook:
    """An executor's plans by problem, each made once (under a lock: planning may run on several threads)."""

    def __init__(self, stats: CallStats, cache: Callable[[], RuntimeCache | None], native: Callable[[], Any],
                 lock: threading.RLock | None = None):  # fmt: skip
        self._stats = stats
        self._cache = cache  # the persistent cache (None: none), asked where a plan is built on a GPU
        self._native = native  # the compiled path's module (None: not built, or not wanted)
        self._plans: dict[ConvProblem, Plan] = {}
        self._directions: dict[ConvProblem, dict[str, ConvProblem]] = {}
        self._lock = lock or threading.RLock()  # the executor's: routing and planning are one critical section

    def __contains__(self, problem: ConvProblem) -> bool:
        return problem in self._plans

    def get(self, problem: ConvProblem) -> Plan | None:
        return self._plans.get(problem)

    def plan(self, problem: ConvProblem, device: torch.device, decide: Callable[[], Decision]) -> Plan:
        """``problem``'s plan, made from ``decide()`` the first time."""
        plan = self._plans.get(problem)
        if plan is None:
            with self._lock:
                plan = self._plans.get(problem)
                if plan is None:
                    plan = self._plans[problem] = self._make(problem, device, decide())
        return plan

    def items(self) -> list[tuple[ConvProblem, Plan]]:
        """Every problem planned so far, with its plan."""
        return list(self._plans.items())

    def failed(self, problem: ConvProblem) -> None:
        """``problem``'s plan failed at run time: PyTorch's path from now on (not retried on every call)."""
        self._plans[problem] = Plan(None, "pytorch:chosen candidate failed")

    def directions_of(self, problem: ConvProblem) -> dict[str, ConvProblem]:
        """The problem in each direction, built once (validating a problem costs microseconds per call)."""
        dirs = self._directions.get(problem)
        if dirs is None:
            dirs = self._directions[problem] = {p.direction: p for p in problem.directions()}
        return dirs

    def _make(self, problem: ConvProblem, device: torch.device, decision: Decision) -> Plan:
        if decision.passes_through:
            return Plan(None, f"pytorch:{decision.reason or 'predicted best'}")
        plan = self._switch_plan(problem, device, decision)
        if plan.path in ("gemm", "cudnn"):
            plan.gain_us = decision.gain_us()
        return plan

    def _switch_plan(self, problem: ConvProblem, device: torch.device, decision: Decision) -> Plan:
        """The plan that runs ``decision``'s candidate (PyTorch's path, with the reason, where it cannot)."""
        space_name, name = split_candidate_id(decision.candidate_id)
        if space_name == "cudnn" and device.type != "cuda":
            return Plan(None, "pytorch:cudnn config needs a GPU")
        space = get_space(space_name)
        cand = space.candidate(name, problem.direction)
        cache = self._cache() if device.type == "cuda" else None
        ext = self._native() if device.type == "cuda" else None
        if space_name == "cudnn" and ext is not None and cache is not None:
            cached = cache.get_plan(problem.key, decision.candidate_id)
            if cached is not None:
                uids, blob = cached
                try:
                    return Plan(None, "cudnn", load_native(ext, problem, blob, uids))
                except RuntimeError as exc:
                    log.warning("algosel: a cached plan of %s did not load (%s); building it again", problem.key, exc)
        try:
            runner = space.runner(problem, cand)
        except CandidateError as exc:
            self._stats.count(f"fallback:build {exc.status}")
            return Plan(None, "pytorch:chosen candidate did not build")
        if runner is None:
            return Plan(None, "pytorch:predicted best")
        plan = Plan(runner, space_name)
        blob = getattr(runner, "blob", None)  # a cuDNN runner's serialized plan
        if blob is not None and cache is not None:
            cache.put_plan(problem.key, decision.candidate_id, runner.uids, blob)
        if blob is not None and ext is not None:
            try:
                plan.native_id = load_native(ext, problem, blob, runner.uids)
            except RuntimeError as exc:
                log.warning("algosel: the compiled path cannot load the plan of %s (%s)", problem.key, exc)
        return plan


def load_native(ext: Any, problem: ConvProblem, blob: bytes, uids: tuple[int, int, int]) -> int:
    """Load a plan into the compiled path; ``uids``: of its graph's x, w and y tensors."""
    role = OUTPUT_ROLE[problem.direction]
    like = empty_like_layout(getattr(problem, f"{role}_shape"), problem, "meta")
    return int(ext.load_plan(blob, *uids, ("fwd", "bwd_data", "bwd_filter").index(problem.direction),
                             list(like.shape), list(like.stride()), torch.cuda.current_device()))  # fmt: skip
