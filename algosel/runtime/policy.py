"""The runtime's rules in one place: :class:`SwitchPolicy` holds every number a decision rests on, and the functions
below apply them.

An executor takes one policy (``Executor(policy=...)``); a variant is ``dataclasses.replace(DEFAULT_POLICY, ...)``.
The policy is what the rule weighs (:mod:`algosel.runtime.rule`): measured costs (a plan build, a timing, the Python
path's host time), the noise bounds a measured gain must clear, the prior on how long a run goes on, and four
procedures whose settings are values of their own: how a candidate is timed (:class:`VerifyTimer`), how the runtime
looks at the device before a switch (:class:`LookPolicy`), how it judges a whole step (:class:`TrialPolicy`), and how
processes sharing a cache wait for each other (:class:`SharingPolicy`). Nothing here has state, and nothing else in
:mod:`algosel.runtime` holds a tunable number. Each field's comment says what it rests on; docs/hook.md ("The
policy") lists the measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from algosel.candidates import DEFAULT_ID
from algosel.runtime.decision import Decision, Reason


def _check_numbers(value: Any, shares: tuple[str, ...] = ()) -> None:
    """One line naming the field of a policy value that is not a number >= 0 (or a share over 1)."""
    name = type(value).__name__
    for f in fields(value):
        v = getattr(value, f.name)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if not v >= 0:
            raise ValueError(f"{name}.{f.name} must be a number >= 0, got {v!r}")
        if f.type == "int" and not isinstance(v, int):
            raise ValueError(f"{name}.{f.name} must be an integer, got {v!r}")
        if f.name in shares and v > 1:
            raise ValueError(f"{name}.{f.name} is a share in [0, 1], got {v!r}")


@dataclass(frozen=True)
class VerifyTimer:
    """How a candidate is timed (the sweeper's ``CudaEventTimer`` settings): a small budget, as a few repeats behind a
    blocked stream rank a shortlist. A candidate whose warm-up run takes over ``single_factor`` times the best so far
    (PyTorch's default, timed first) keeps that run as its only time: it cannot be kept (it must beat the default by
    ``min_measured_ratio``), and repeats would be spent on a rank already clear."""

    budget_ms: float = 1.0
    min_repeats: int = 3
    max_repeats: int = 5
    slow_factor: float = 1.25
    single_factor: float = 1.25
    #: A plan build longer than this (s) that lost leaves its engine out on problems of the same kind for the rest of
    #: the process (ConvNeXt-T autocast: engines 19/16 took 0.14-0.99 s a build and never won).
    slow_build_s: float = 0.05

    def __post_init__(self) -> None:
        _check_numbers(self)

    def as_kwargs(self) -> dict[str, Any]:
        """The settings the sweeper's timer takes."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "slow_build_s"}


@dataclass(frozen=True)
class LookPolicy:
    """Probation: is the device what the step waits on? A route that switches looks at the device at its first
    calls; a switch whose calls find it idle saves nothing (the host is what the step waits on)."""

    #: Calls of a switching signature that look at the device before the switch is made (0: switch at once).
    probe_calls: int = 8
    #: Least share of a route's looks (forward or backward), and of all the executor's looks pooled, that must find the
    #: device busy: 0.75 dropped every switch of EfficientNet-V2-S and kept 9 of EfficientNet-B0's 12 (their
    #: default's busy shares 0.09 and 0.72); MyNet kept a losing switch by the route's share alone.
    min_busy_fraction: float = 0.75
    #: LookPolicy within this many seconds after any planning do not count (planning synchronizes the device).
    settle_s: float = 0.05
    #: A switch known to save this much device time per call (us) is made without looking (fully connected mode saves
    #: milliseconds; at 200 us MyNet's 1x7 switch was exempted and cost its host-bound step 2.7%).
    exempt_gain_us: float = 1000.0
    #: Share of the executor's looks (at least four signatures' worth, pooled) that must find the device busy for the
    #: step to count as GPU-bound: there a measured switch's saved device time shortens the step whatever its size, and
    #: ``min_gain_us`` (a host-bound step's bound) does not apply. High, so that a step host-bound part of the time
    #: does not count.
    device_bound_fraction: float = 0.95

    def __post_init__(self) -> None:
        _check_numbers(self, ("min_busy_fraction", "device_bound_fraction"))

    def device_bound_min_looks(self) -> int:
        """LookPolicy pooled before a step can count as GPU-bound: four signatures' probation (one at least)."""
        return max(1, 4 * self.probe_calls)


@dataclass(frozen=True)
class TrialPolicy:
    """Blocks (an ``enabled()`` block or an optimizer step): stepping aside where nothing switches, and the step
    trial that keeps the switches only where blocks with them are faster (a sign test over ABBA pairs)."""

    #: Quiet blocks (no new call signature) after which an executor with nothing switched steps aside (even a
    #: pass-through's compiled dispatch costs a host-bound step ~1%).
    step_aside_after_blocks: int = 2
    #: A stepped-aside executor still routes one block in this many, to meet new call signatures.
    look_again_every_blocks: int = 50
    #: Pairs of blocks a trial measures (ABBA order, one with the switches and one without each).
    pairs: int = 8
    #: Least median gain of the switched blocks (a fraction of PyTorch's block span) for the switches to stay.
    margin: float = 0.005
    #: Pairs whose switched block must be the shorter (7 of 8 by chance in 3.5% of equal trials).
    min_wins: int = 7
    #: Most scatter of the pairs' log ratios (median absolute deviation) for the trial to decide anything.
    max_scatter: float = 0.05
    #: Busy share probation asks while a trial is still to judge the switches: the trial measures the rest.
    busy_fraction: float = 0.25

    def __post_init__(self) -> None:
        _check_numbers(self, ("busy_fraction",))
        if self.look_again_every_blocks < 1:
            raise ValueError(f"TrialPolicy.look_again_every_blocks must be >= 1, got {self.look_again_every_blocks!r}")
        if self.min_wins > self.pairs:
            raise ValueError(f"TrialPolicy.min_wins ({self.min_wins}) exceeds pairs ({self.pairs})")


@dataclass(frozen=True)
class SharingPolicy:
    """Processes sharing a cache (the ranks of a job): one times a problem, the others wait for its decision."""

    #: How long a process waits for another's measurement of the same problem before timing it itself (a problem is
    #: timed in 0.01-1 s; ConvNeXt-T's slowest first builds took 1.07 s on the H200).
    wait_s: float = 10.0
    #: A claim on a problem older than this (s) is taken over: its process died or hangs (runtime.claims).
    claim_stale_s: float = 60.0

    def __post_init__(self) -> None:
        _check_numbers(self)


@dataclass(frozen=True)
class SwitchPolicy:
    """When the runtime leaves PyTorch's convolution for a candidate, and what it spends finding out.

    Every field has the default the project measured (H100 and H200, cuDNN 9.19; docs/hook.md, "The policy"). Gains
    and host costs are per call in microseconds, device times in milliseconds.
    """

    # -- noise bounds: what a measured switch must gain -------------------------------------------------------------
    #: Least device time a switch saves per call where the step is not known to be GPU-bound: a host-bound step hides
    #: smaller savings. 20 us keeps 98.2% of the records' saved time switching 20% of problems instead of 46% (2 us).
    min_gain_us: float = 20.0
    #: Least speed-up (default / candidate) by measurement or records: run-to-run noise stays within ~2%.
    min_measured_ratio: float = 1.03
    # -- measured costs -------------------------------------------------------------------------------------------
    #: Host time the Python autograd Function adds per call over PyTorch's own (H200: +57 us cuDNN, +51 us GEMM).
    python_path_overhead_us: float = 60.0
    #: Building one cuDNN plan (H200: 2-14 ms a build, docs/results/2026-12-04-cold-pass.md).
    plan_build_ms: float = 10.0
    #: Timing one candidate besides its runs' device time: warm-up, synchronisation, the timer's fixed part.
    timing_overhead_ms: float = 1.0
    # -- the rule's prior and reach -------------------------------------------------------------------------------
    #: Steps a training run is expected to go on for once a layer is met (a prior; the steps seen so far where
    #: more): what a decision's cost is spread over. Training runs last thousands of steps.
    expected_run_steps: float = 1000.0
    #: Most candidates the rule times on one problem besides PyTorch's default (the calibration measures the model's
    #: top 3: a fourth has no error of its own; 6 and 10 gave the replay's figures unchanged).
    rule_max_timed: int = 3
    # -- procedures -----------------------------------------------------------------------------------------------
    timer: VerifyTimer = field(default_factory=VerifyTimer)
    looks: LookPolicy = field(default_factory=LookPolicy)
    trial: TrialPolicy = field(default_factory=TrialPolicy)
    sharing: SharingPolicy = field(default_factory=SharingPolicy)

    def __post_init__(self) -> None:
        _check_numbers(self)
        for name, kind in (
            ("timer", VerifyTimer),
            ("looks", LookPolicy),
            ("trial", TrialPolicy),
            ("sharing", SharingPolicy),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"SwitchPolicy.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")


#: The measured defaults.
DEFAULT_POLICY = SwitchPolicy()

def finite(v: Any) -> bool:
    """Whether ``v`` is a time (not None, not NaN)."""
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def host_extra_us(host_us: dict[str, float], candidate_id: str) -> float:
    """Host time per call ``candidate_id`` takes over PyTorch's default, as measured (0 where either is unknown, or
    where the candidate is cheaper: a host-bound step gains nothing from a cheaper launch it does not wait on). A
    switch pays it on top of the least gain (engines 46, 41, 50, 61, 18 and 3 cost +11 to +30 us a call; the rest
    within +-5 us: ``benchmarks/archive/host_cost_records.py``)."""
    t, t_default = host_us.get(candidate_id), host_us.get(DEFAULT_ID)
    if not (finite(t) and finite(t_default)):
        return 0.0
    return max(0.0, t - t_default)


def fastest(times: dict[str, float], host_us: dict[str, float]) -> str:
    """The measured candidate of least device time plus the host time it takes over PyTorch's default (as if they
    added up, which a host-bound step comes close to)."""
    if not times:
        return DEFAULT_ID
    return min(times, key=lambda c: times[c] + host_extra_us(host_us, c) / 1e3)


def judge(policy: SwitchPolicy, problem_key: str, cid: str, times: dict[str, float], default_ms: float | None,
          source: str, min_ratio: float, overhead_us: float, host_us: dict[str, float] | None = None,
          device_bound: bool = False) -> Decision:  # fmt: skip
    """Keep ``cid`` only where its gain over PyTorch's default pays what leaving PyTorch's path costs: the least gain,
    the path's own host cost ``overhead_us``, and the host time the candidate takes over the default (``host_us``),
    and is at least ``min_ratio`` times faster. ``device_bound`` (a GPU-bound step; measured or recorded times): no
    least gain beyond the noise bound and the host costs, and a switch kept only so says so
    (:attr:`Reason.DEVICE_BOUND`)."""
    host_us = dict(host_us or {})
    if cid == DEFAULT_ID:
        return Decision(problem_key, cid, source, Reason.FASTEST, times, host_us)
    t = times.get(cid)
    if t is None or default_ms is None:
        return Decision(problem_key, DEFAULT_ID, source, Reason.NO_TIMES, times, host_us)
    gain_us = 1e3 * (default_ms - t)
    cost_us = overhead_us + host_extra_us(host_us, cid)
    least_us = 0.0 if device_bound else policy.min_gain_us
    if gain_us < least_us + cost_us or default_ms < min_ratio * t:
        return Decision(problem_key, DEFAULT_ID, source, Reason.BELOW_THRESHOLD, times, host_us)
    reason = Reason.DEVICE_BOUND if gain_us < policy.min_gain_us + cost_us else ""
    return Decision(problem_key, cid, source, reason, times, host_us)
