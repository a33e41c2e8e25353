"""The runtime's executor: decides what each convolution it meets runs, builds it once, and runs it on every call.

An executor composes the runtime's parts under one :class:`~algosel.runtime.policy.SwitchPolicy`: the decisions
(:mod:`~algosel.runtime.decisions`: records, cache, the rule, verify mode), the plans, the routes and their compiled
dispatch, probation and the blocks (stepping aside, the step trial); docs/architecture.md draws them.

Its seams are arguments: the selector (:class:`~algosel.learn.protocol.RuntimeSelector`), the policy, the candidate
source, the measurer (what times candidates), the device probe and the clock. Tests and benchmarks set them; nothing
patches a module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from algosel.problem import ConvProblem
from algosel.runtime.aside import DecidingAside
from algosel.runtime.blocks import Blocks
from algosel.runtime.cache import RuntimeCache, runtime_environment
from algosel.runtime.candidates import CandidateSource
from algosel.runtime.config import HookConfig
from algosel.runtime.decision import Decision, Passing
from algosel.runtime.decisions import EXEMPT, LOOK, Decider
from algosel.runtime.device import CudaDevice, DeviceProbe
from algosel.runtime.fallbacks import NO_MODEL
from algosel.runtime.loading import ModelLoading
from algosel.runtime.parts import ModelParts
from algosel.runtime.plans import Plan, PlanBook, compiled_plans
from algosel.runtime.probation import Looks, Probation
from algosel.runtime.routes import Dispatch, Route, RouteBook, compiled_route, one_matrix_product
from algosel.runtime.state import STATE, tables_changed
from algosel.runtime.stats import CallStats
from algosel.runtime.verify import Measurer, Verifier


class Executor:
    """Decides, prepares and caches what every convolution it meets runs (see the module docstring).

    Where its model cannot be loaded (none for this GPU, a damaged one), it warns once and runs PyTorch's own
    convolutions instead (:mod:`algosel.runtime.fallbacks`): the hook is never the reason a
    training step fails.

    Parameters
    ----------
    config : HookConfig, optional
        What it does (:class:`~algosel.runtime.config.HookConfig`: the selector or model directory, ``verify``, the
        rule, the policy, the cache...); or give those options as keywords, which make one.
    candidates, measurer, device_probe, clock, calibration : optional
        What stands in for the machine (the tests' and benchmarks' seams): where ranked lists come from (default:
        the selector's, :class:`ModelCandidates`), what times candidates (the sweeper with ``policy.timer``), the
        device probe (CUDA's), the clock of looks and planning, and the rule's calibration (the model directory's
        ``calibration.json``).
    """

    def __init__(self, config: HookConfig | None = None, *, candidates: CandidateSource | None = None,
                 measurer: Measurer | None = None, device_probe: DeviceProbe | None = None,
                 clock: Callable[[], float] = time.perf_counter, calibration: Any = None, **options: Any):  # fmt: skip
        # one configuration value (options given as keywords make it), checked before any long work
        if config is not None and not isinstance(config, HookConfig):
            raise ValueError(f"config must be a HookConfig, got {config!r}")
        if config is not None and options:
            raise ValueError(f"give a HookConfig or its options, not both (got {', '.join(sorted(options))})")
        self.config = config = config or HookConfig.of(options)
        self.policy = policy = config.effective_policy()
        #: The model, loaded at once or (``background_load``) beside the first steps (:mod:`algosel.runtime.loading`).
        self.model = ModelLoading(config.selector, calibration is None, config.background_load)
        self._verify_k = config.verify
        self._given = {"candidates": candidates, "live": config.live, "measurer": measurer,
                       "record_measured": config.record_measured, "calibration": calibration,
                       "rule_times": config.rule_times, "tuning_budget_s": config.tuning_budget_s}  # fmt: skip
        self._parts: ModelParts | None = None
        #: Where new problems are decided beside the step (``decide_aside``; :mod:`algosel.runtime.aside`), else None.
        self.aside: DecidingAside | None = None
        #: Calls that passed through unmemoised (the model loading, their problems being decided), and their count
        #: when the current block began: a block with such calls is not quiet (it does not step aside).
        self.unsettled_calls = 0
        self._unsettled_at_begin = 0
        self.max_workspace_bytes = config.max_workspace_bytes
        self.look_first = bool(config.look_first)
        self.device_probe = device_probe or CudaDevice()
        self.clock = clock
        self._cache_wanted, self._native_wanted = config.cache, config.native
        self._cache: Any = None
        self._native: Any = None
        self._checked: set[str] = set()
        self._lock = threading.RLock()
        self._first_device: torch.device | None = None  # of the first call planned: step trials read its stream
        from algosel.runtime.unseen import recorder_for, recorder_from_env  # noqa: PLC0415

        self.recorder = recorder_for(config.record) if config.record else recorder_from_env()
        self.call_stats = CallStats()
        self.plans = PlanBook(self.call_stats, self.runtime_cache, self.native_module, self._lock)
        self.routes = RouteBook()
        self.dispatch = Dispatch(self._new_table, self.call_stats.add_table)
        self.probation = Probation(policy, self.device_probe, clock, self.call_stats, self.routes,
                                   self.busy_fractions)  # fmt: skip
        self.blocks = Blocks(policy, self.routes, self.probation, self.device_probe, lambda: self._first_device,
                             self.recorder is not None, config.step_aside, self._renew_table)  # fmt: skip
        STATE.executors.add(self)

    # ----------------------------------------------------------------------------------------- the model
    def _built(self) -> ModelParts:
        """What decides, made once the model is loaded (waiting for it)."""
        if self._parts is None:
            model = self.model.wait()
            with self._lock:
                if self._parts is None:
                    self._parts = ModelParts.make(self, model)
                    if self.config.decide_aside and not self.config.verify:
                        decider = self._parts.decider
                        self.aside = DecidingAside(decider.prepare, decider.prepared)
        return self._parts

    @property
    def selector(self) -> Any:
        return self._built().selector

    @property
    def unavailable(self) -> str:
        return self._built().unavailable

    @property
    def candidates(self) -> CandidateSource:
        return self._built().candidates

    @property
    def verifier(self) -> Verifier:
        return self._built().verifier

    @property
    def decider(self) -> Decider:
        return self._built().decider

    # ----------------------------------------------------------------------------------------- settings
    @property
    def verify(self) -> int:
        return self._verify_k

    @property
    def probe_calls(self) -> int:
        return self.policy.looks.probe_calls

    @property
    def step_aside(self) -> bool:
        return self.blocks.step_aside

    @step_aside.setter
    def step_aside(self, value: bool) -> None:
        self.blocks.step_aside = bool(value)

    # ---------------------------------------------------------------------------------------- resources
    def native_module(self) -> Any:
        """The compiled path's module, or ``None`` (not built, no GPU, or ``native=False``)."""
        if "native" not in self._checked:
            self._checked.add("native")
            if self._native_wanted is not False:
                from algosel.runtime import native  # noqa: PLC0415

                self._native = native.load()
        return self._native

    def runtime_cache(self) -> Any:
        """The persistent cache (None: turned off, or no GPU to key it by)."""
        if "cache" not in self._checked:
            self._checked.add("cache")
            wanted = self._cache_wanted
            if hasattr(wanted, "get") and hasattr(wanted, "put"):  # a cache object
                self._cache = wanted
            elif wanted is not False and torch.cuda.is_available():
                from algosel.runtime.native import cache_root  # noqa: PLC0415

                # (it warns once and carries on where its folder cannot be read or written)
                self._cache = RuntimeCache(cache_root() if wanted is True else wanted, self._environment())
        return self._cache

    def _environment(self) -> dict[str, Any]:
        return runtime_environment(self.selector)

    def _new_table(self) -> Any:
        """A new dispatch table of the compiled path; None without it, or while recording (a recorder counts every
        call in Python)."""
        if self.recorder is not None:
            return None
        ext = self.native_module()
        return ext.RouteTable() if ext is not None and hasattr(ext, "RouteTable") else None

    def dispatch_table(self) -> Any:
        """The compiled path's dispatch table, made on first use (None where there is none)."""
        return self.dispatch.current()

    def _renew_table(self) -> None:
        """Routes were made PyTorch's after they were held: a new table, which the switches then name."""
        if self.dispatch.renew():
            tables_changed(self)

    # ---------------------------------------------------------------------------------------- decisions
    def decide(self, problem: ConvProblem, device: torch.device) -> Decision:
        """What ``problem`` runs (:meth:`Decider.decide`)."""
        return self.decider.decide(problem, device)

    def plan(self, problem: ConvProblem, device: torch.device) -> Plan:
        """``problem``'s plan, decided and built the first time."""
        return self.plans.plan(problem, device, lambda: self.decider.take(problem, device))

    def directions_of(self, problem: ConvProblem) -> dict[str, ConvProblem]:
        return self.plans.directions_of(problem)

    # -------------------------------------------------------------------------------------------- routes
    def route(self, key: tuple, problem: ConvProblem, device: torch.device, grads: tuple[bool, bool]) -> Route:
        """How calls with signature ``key`` run (:mod:`algosel.runtime.routes`), made on the first call once the
        model is loaded (before: PyTorch's own, not memoised); ``grads``: whether the input and the weight need
        gradients."""
        with self._lock:
            hit = self.routes.by_key.get(key)
            if hit is not None:
                return hit
            if not self.model.ready():
                self.call_stats.count(Passing.LOADING)
                self.unsettled_calls += 1
                return Route("native", problem, (Passing.LOADING,))
            return self._make_route(key, problem, device, grads)

    def _make_route(self, key: tuple, problem: ConvProblem, device: torch.device, grads: tuple[bool, bool]) -> Route:
        if self._first_device is None:
            self._first_device = device
        dirs = self.directions_of(problem)
        # The forward, and each gradient the call's autograd will compute: (input, weight) requires_grad.
        directions = [problem] + [dirs[d] for d, g in zip(("bwd_data", "bwd_filter"), grads) if g]
        if self.unavailable:  # no model: every call PyTorch's own (fallbacks.NO_MODEL)
            route = Route("native", problem, (f"pytorch:{NO_MODEL}",) * len(directions))
            self.call_stats.add_route(route)
            self.routes.add(key, route)
            return route
        if self.device_probe.capturing(device) and any(p not in self.plans for p in directions):
            # Nothing is decided inside a CUDA graph capture (deciding may measure, which synchronizes).
            return Route("native", None, ("pytorch:capturing",))
        aside = self.aside
        if aside is not None and device.type == "cuda":
            # what deciding reads of the GPU, read here first: no CUDA call is made on the deciding thread
            self.native_module()
            self.runtime_cache()
        if aside is not None and not aside.ready([p for p in directions if p not in self.plans], device):
            # PyTorch's own convolution while the worker decides the call's problems (not memoised: asked again)
            self.call_stats.count(Passing.DECIDING)
            self.unsettled_calls += 1
            return Route("native", problem, (Passing.DECIDING,))
        looking = self.look_first and self.verify and self.probe_calls and key not in self.routes.looked
        verdicts = {self.decider.before_timing(p, device, p in self.plans) for p in directions} if looking else set()
        if LOOK in verdicts and EXEMPT not in verdicts:
            # PyTorch's own convolution while probation's looks decide whether timing could pay at all
            route = Route("native", problem, (Passing.LOOKING,) * len(directions), probe=Looks(), key=key)
            self.routes.add(key, route)
            return route
        plans = [self.plan(p, device) for p in directions]
        ext = self.native_module() if device.type == "cuda" else None
        if ext is not None:
            plans = compiled_plans(plans)
        reasons = tuple(p.path for p in plans)
        if all(p.runner is None and p.native_id < 0 for p in plans):
            route = Route("native", problem, reasons)
        elif all(p.path == "gemm" for p in plans) and one_matrix_product(problem):
            route = Route("gemm", problem, reasons)
        elif all(p.path != "gemm" for p in plans) and all(p.native_id >= 0 or p.runner is None for p in plans):
            route = compiled_route(ext, problem, [p.native_id for p in plans], grads, reasons)
        else:
            route = Route("function", problem, reasons)  # its reasons are not counted: run_direction counts
        if route.kind != "function":
            self.call_stats.add_route(route)
        if (route.kind != "native" and self.probe_calls and key not in self.routes.looked
                and sum(p.gain_us for p in plans) < self.policy.looks.exempt_gain_us):  # fmt: skip
            route.probe = Looks()
        if self.recorder is not None and not self.selector.is_recorded(problem):
            route.unseen = self.recorder
        route.looked = self.routes.looks_of.pop(key, None)  # timed after looking first: the looks that let it time
        self.routes.add(key, route)
        return route

    def route_reasons(self) -> dict[str, int]:
        """The directions of every call signature planned so far, by what they run (``cudnn``, ``gemm`` or
        ``pytorch:<reason>``). Unlike :meth:`stats` (calls), it stays whole where the executor steps aside."""
        return self.routes.reasons()

    def route_list(self) -> list[Route]:
        """Every call signature's route so far, in the order they were met."""
        return list(self.routes.by_key.values())

    # -------------------------------------------------------------------------------- blocks, probation
    def begin_block(self) -> bool:
        """A block begins (an outermost ``enabled()`` block, or a step under ``enable()``): True where it leaves
        ``F.conv2d`` as PyTorch's own (:meth:`Blocks.begin`)."""
        self._unsettled_at_begin = self.unsettled_calls
        return self.blocks.begin()

    def block_done(self, routes_before: int) -> None:
        # a block whose calls passed through while the model loaded or their problems were decided met signatures
        # still to route: not a quiet block (stepping aside then would leave the decisions unused for many blocks)
        self.blocks.done(routes_before, unsettled=self.unsettled_calls != self._unsettled_at_begin)
        if self._parts is not None:  # (before the model is ready nothing is decided)
            self._parts.decider.recurrence.steps = self.blocks.blocks_ended

    def busy_fractions(self) -> tuple[float, float]:
        return self.blocks.busy_fractions()

    def device_bound(self) -> bool:
        """Whether the step is GPU-bound by the looks so far: at least four signatures' worth of them, pooled over the
        executor's routes (forward and backward), of which ``policy.looks.device_bound_fraction`` found the device
        busy."""
        looks = getattr(self, "probation", None)  # (none while the executor is being made)
        if looks is None:
            return False
        looks = looks.looks
        total, busy = looks.calls + looks.back_calls, looks.busy + looks.back_busy
        bound = self.policy.looks
        return total >= bound.device_bound_min_looks() and busy >= bound.device_bound_fraction * total

    def deciding(self) -> int:
        """Call signatures still looking at the device or on probation, plus one while a step trial is under way or
        due, plus one while the model loads and one per problem still being decided beside the step (the blocks
        until the executor's routes are settled)."""
        waiting = 0 if self.model.ready() else 1
        if self.aside is not None:
            waiting += self.aside.pending()
        return self.blocks.deciding() + waiting

    @property
    def looks(self) -> Looks:
        """The looks of all its routes on probation, pooled."""
        return self.probation.looks

    @property
    def blocks_aside(self) -> int:
        return self.blocks.blocks_aside

    @property
    def trial_verdict(self) -> str | None:
        return self.blocks.trial_verdict

    @property
    def trial_ratio(self) -> float:
        return self.blocks.trial_ratio

    @property
    def trial(self) -> Any:
        return self.blocks.trial

    # ------------------------------------------------------------------------------------------ figures
    @property
    def planning_s(self) -> float:
        """Seconds spent measuring, for benchmarks of the first pass."""
        return self.verifier.planning_s

    @property
    def measured_problems(self) -> int:
        return self.verifier.measured_problems

    def stats(self) -> dict[str, int]:
        """This executor's calls per path (see :func:`process_stats`)."""
        return dict(+self.call_stats.snapshot())

    @property
    def min_gain_us(self) -> float:
        return self.policy.min_gain_us
