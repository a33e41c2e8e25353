"""The runtime's rules in one place: :class:`SwitchPolicy` holds every threshold, and the functions below apply them.

An executor takes one policy (``Executor(policy=...)``); a variant is ``dataclasses.replace(DEFAULT_POLICY, ...)``.
Nothing here has state, and nothing else in :mod:`algosel.runtime` holds a tunable number. Each field's comment
says what the number does and what it rests on; the measurements behind them are in docs/hook.md ("The rules") and
the dated pages of docs/results/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from algosel.candidates import DEFAULT_ID
from algosel.runtime.cache import Decision


@dataclass(frozen=True)
class VerifyTimer:
    """Verify mode's timer (the sweeper's ``CudaEventTimer`` settings): a small budget, as a few repeats behind a
    blocked stream rank a shortlist. A candidate whose warm-up run takes over ``single_factor`` times the best so far
    (PyTorch's default, timed first) keeps that run as its only time: it cannot be kept (it must beat the default by
    ``min_measured_ratio``), and repeats would be spent on a rank already clear."""

    budget_ms: float = 1.0
    min_repeats: int = 3
    max_repeats: int = 5
    slow_factor: float = 1.25
    single_factor: float = 1.25

    def as_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SwitchPolicy:
    """When the runtime leaves PyTorch's convolution for a candidate, and what it spends finding out.

    Every field has the default the project measured (H200, cuDNN 9.19; docs/hook.md, "The rules"). Gains and host
    costs are per call in microseconds, device times in milliseconds, shares in [0, 1].
    """

    # -- what a switch must gain -----------------------------------------------------------------------------
    #: Least device time a switch saves per call. 20 us keeps 98.2% of the records' saved time switching 20% of
    #: problems instead of 46% (2 us); host-bound steps gain nothing from smaller savings (benchmarks/zoo.py).
    min_gain_us: float = 20.0
    #: Least speed-up (default / candidate) by measurement or records: run-to-run noise stays within ~2%.
    min_measured_ratio: float = 1.03
    #: Least speed-up by the model's predicted times near the records: 1.5 makes 0.3% of held-out problems >1%
    #: slower than the default (1.15: 3.5%) for 0.484x the default's total time.
    min_predicted_ratio: float = 1.5
    #: Records distance (sum of |log2 ratio| over shape fields) beyond which predicted times are extrapolations.
    near_records_distance: float = 2.0
    #: Least predicted speed-up there: 18 of 30 far switches at 1.5 measured slower than the default.
    min_predicted_ratio_far: float = 3.0
    #: Host time the Python autograd Function adds per call over PyTorch's own (H200: +57 us cuDNN, +51 us GEMM).
    python_path_overhead_us: float = 60.0
    #: Candidates of the model's shortlist whose predicted times prediction mode compares.
    predict_top_k: int = 3
    #: cuDNN heuristic modes whose lists prediction mode ranks where it queries a problem's live list (as verify
    #: mode's ``verify_live_modes``: mode B's query costs several times A's and FALLBACK's together; the
    #: multi-scale detection head's first pass took 19.7 s in prediction mode with all three against the
    #: default's 2.4 s, H100, benchmarks/zoo_gpu.py --jobs runs).
    predict_live_modes: tuple[str, ...] = ("a", "fallback")
    #: "layer": cuDNN's live list queried for one batch and input size of a layer serves the layer's other sizes
    #: (ranked by the model for each; a config that does not build falls back to PyTorch's path); "problem": queried
    #: for every size. A network whose input size keeps changing (multi-scale training) otherwise pays the query
    #: (a few to ~50 ms) at every new size of every layer.
    live_list_scope: str = "layer"

    # -- what verify mode times --------------------------------------------------------------------------------
    #: No timing where the default is predicted under ``min_gain_us / verify_skip_factor`` (it cannot save the
    #: least gain; the default takes over twice its predicted time on 6.1% of held-out problems).
    verify_skip_factor: float = 2.0
    #: With the gain filter, a default predicted this long (ms) is timed whatever its predicted gain.
    verify_always_time_ms: float = 0.1
    #: Of a timed shortlist, only candidates predicted within this ratio of the default are built (2.30 a problem
    #: instead of 3.00, keeping 98.6% of the device time timing finds).
    verify_max_predicted_ratio: float = 1.0
    #: The same far from the records, where predictions extrapolate.
    verify_max_predicted_ratio_far: float = 3.0
    #: A default measured this long (ms) a call makes verify mode time the rest of cuDNN's lists too ...
    verify_whole_list_ms: float = 0.25
    #: ... up to this many candidates in all on one problem (PyTorch's benchmark mode times 10) ...
    verify_list_max: int = 10
    #: ... none started after this many seconds on one problem.
    verify_rest_budget_s: float = 0.1
    #: A plan build longer than this (s) that lost leaves its engine out on problems of the same kind for the rest of
    #: the process (ConvNeXt-T autocast: engines 19/16 took 0.14-0.99 s a build and never won).
    verify_slow_build_s: float = 0.05
    #: cuDNN heuristic modes whose lists the shortlist ranks (mode B's query costs several times A's and
    #: FALLBACK's together, and finds the same 0.905 of the default's total time on 834 unrecorded problems).
    verify_live_modes: tuple[str, ...] = ("a", "fallback")
    #: Modes whose lists the rest of the list comes from (all three, as the model was trained on them).
    verify_whole_list_modes: tuple[str, ...] = ("a", "b", "fallback")
    #: cuDNN's behaviour note of a config whose plan build compiles a kernel: left out of the rest of the list.
    runtime_compiled_note: str = "runtime_compilation"
    timer: VerifyTimer = field(default_factory=VerifyTimer)

    # -- the rule: expected saving x expected calls - cost (algosel.runtime.rule) ---------------------------------
    #: Steps a training run is expected to go on for once a layer is met (a prior; the steps seen so far where
    #: more): what a decision's cost is spread over. Training runs last thousands of steps.
    expected_run_steps: float = 1000.0
    #: Building one cuDNN plan (H200: 2-14 ms a build, docs/results/2026-12-04-cold-pass.md).
    plan_build_ms: float = 10.0
    #: Timing one candidate besides its runs' device time: warm-up, synchronisation, the timer's fixed part.
    timing_overhead_ms: float = 1.0
    #: Most candidates the rule times on one problem (besides PyTorch's default).
    rule_max_timed: int = 3
    #: Least share of the calibration's error rows in which an untimed switch saves time: every row, so that only
    #: a switch no held-out error reverses is made untimed (fully connected mode's GEMM). At 0.95 the replay's
    #: untimed switches made 5 of 14 networks' steady steps 1-5% slower than the default (float32 pointwise weight
    #: gradients whose default ran 2-4x faster than predicted; benchmarks/replay.py, docs/hook.md "The rule").
    untimed_min_win_share: float = 1.0

    # -- processes sharing a cache (the ranks of a job) ------------------------------------------------------------
    #: How long a process waits for another's measurement of the same problem before timing it itself (verify mode
    #: times a problem in 0.01-1 s; ConvNeXt-T's slowest first builds took 1.07 s on the H200).
    shared_wait_s: float = 10.0
    #: A claim on a problem older than this (s) is taken over: its process died or hangs (runtime.claims).
    claim_stale_s: float = 60.0

    # -- probation: is the device what the step waits on? --------------------------------------------------------
    #: Calls of a switching signature that look at the device before the switch is made (0: switch at once).
    probe_calls: int = 8
    #: Least share of a route's forward (or backward) looks that must find the device busy: 0.75 dropped every
    #: switch of EfficientNet-V2-S and kept 9 of EfficientNet-B0's 12 (their default's busy shares 0.09 and 0.72).
    min_busy_fraction: float = 0.75
    #: Least busy share of all the executor's looks pooled: MyNet kept a losing switch by the per-route share.
    min_network_busy_fraction: float = 0.75
    #: Looks within this many seconds after any planning do not count (planning synchronizes the device).
    probe_settle_s: float = 0.05
    #: A switch known to save this much device time per call (us) is made without probation (fully connected
    #: mode saves milliseconds; at 200 us MyNet's 1x7 switch was exempted and cost its host-bound step 2.7%).
    probation_exempt_gain_us: float = 1000.0
    #: Busy share probation asks while a step trial is still to judge the switches: the trial measures the rest.
    trial_busy_fraction: float = 0.25

    # -- a GPU-bound step: the device time a switch saves is the step's ------------------------------------------
    #: Share of the executor's looks at the device (forward and backward, pooled) that must find it busy for the
    #: step to count as GPU-bound: there the host enqueues ahead of the device, and a switch's saved device time
    #: shortens the step whatever its size (the per-call least gain is there for host-bound steps, which hide it).
    #: High, so that a step that is host-bound part of the time does not count (a conservative default: it awaits
    #: the GPU-bound zoo's measurement, benchmarks/zoo_gpu.py).
    device_bound_busy_fraction: float = 0.95
    #: Looks pooled before a step can count as GPU-bound (four signatures' probation).
    device_bound_min_looks: int = 32
    #: The least gain a measured or recorded switch saves per call in a GPU-bound step, instead of ``min_gain_us``
    #: (still at least ``min_measured_ratio`` faster, plus its path's host cost: probation and the step trial still
    #: judge it). 5 us keeps what saves 3% of a 0.17 ms call; conservative, awaiting the GPU-bound zoo.
    device_bound_min_gain_us: float = 5.0

    # -- blocks: stepping aside, the step trial ------------------------------------------------------------------
    #: Quiet blocks (no new call signature) after which an executor with nothing switched steps aside (even a
    #: pass-through's compiled dispatch costs a host-bound step ~1%).
    step_aside_after_blocks: int = 2
    #: A stepped-aside executor still routes one block in this many, to meet new call signatures.
    look_again_every_blocks: int = 50
    #: Pairs of blocks a step trial measures (ABBA order, one with the switches and one without each).
    trial_pairs: int = 8
    #: Least median gain of the switched blocks (a fraction of PyTorch's block span) for the switches to stay.
    trial_margin: float = 0.005
    #: Pairs whose switched block must be the shorter (a sign test: 7 of 8 by chance in 3.5% of equal trials).
    trial_min_wins: int = 7
    #: Most scatter of the pairs' log ratios (median absolute deviation) for the trial to decide anything.
    trial_max_scatter: float = 0.05

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or (isinstance(value, (int, float)) and not value >= 0):
                raise ValueError(f"SwitchPolicy.{f.name} must be a number >= 0, got {value!r}")
            if f.type == "int" and not isinstance(value, int):
                raise ValueError(f"SwitchPolicy.{f.name} must be an integer, got {value!r}")
        for name in (
            "min_busy_fraction",
            "min_network_busy_fraction",
            "trial_busy_fraction",
            "device_bound_busy_fraction",
            "untimed_min_win_share",
        ):
            if getattr(self, name) > 1:
                raise ValueError(f"SwitchPolicy.{name} is a share in [0, 1], got {getattr(self, name)!r}")
        if self.live_list_scope not in ("problem", "layer"):
            raise ValueError(f"SwitchPolicy.live_list_scope must be 'problem' or 'layer', got {self.live_list_scope!r}")
        if self.trial_min_wins > self.trial_pairs:
            raise ValueError(f"SwitchPolicy.trial_min_wins ({self.trial_min_wins}) exceeds trial_pairs "
                             f"({self.trial_pairs})")  # fmt: skip

    def min_predicted(self, far: bool) -> float:
        """The least predicted speed-up of a switch, near the records or far from them."""
        return self.min_predicted_ratio_far if far else self.min_predicted_ratio

    def max_predicted(self, far: bool) -> float:
        """How much slower than the default verify mode may predict a candidate and still time it."""
        return self.verify_max_predicted_ratio_far if far else self.verify_max_predicted_ratio


#: The measured defaults.
DEFAULT_POLICY = SwitchPolicy()

# -- reasons: what a pass-through's statistics say -------------------------------------------------------------------
#: A gain that did not pay (a cached one is judged again by the reading executor's policy).
BELOW_THRESHOLD = "gain below the threshold"
#: A switch kept by the GPU-bound rule (``device_bound_min_gain_us``) that the host-bound rule would not keep: a
#: process reading it from the cache judges it by the same rule.
DEVICE_BOUND = "kept for a GPU-bound step"
#: Verify mode did not time a problem predicted shorter than the least gain ...
TOO_SHORT_TO_PAY = "predicted shorter than the least gain"
#: ... nor one whose predicted gain is under it (``gain_filter``).
PREDICTED_GAIN_TOO_SMALL = "predicted gain under the least gain"
#: Probation found the device idle at the route's calls ...
DEVICE_IDLE = "device idle at the call"
#: ... or at most of the network's switching calls.
NETWORK_IDLE = "device idle at most of the network's calls"
#: The step trial found PyTorch's own convolutions as fast.
TRIAL_SAME = "step as fast without the switches"
#: What a call that looks at the device counts as, per direction.
PROBING = "pytorch:probing the device"
#: What a signature that looks before its shortlist is timed runs meanwhile.
LOOKING = "pytorch:looking before timing"


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


def worth_a_closer_look(policy: SwitchPolicy, times_ms: dict[str, float]) -> bool:
    """Whether predicted times of a shortlist and the default leave a gain to look for: the best of the others saving
    at least ``min_gain_us / verify_skip_factor``, or a default of at least ``verify_always_time_ms``, or a time
    unknown. Where not, neither timing the shortlist nor querying cuDNN's live list is worth its cost."""
    default_ms = times_ms.get(DEFAULT_ID)
    best_ms = min((t for c, t in times_ms.items() if c != DEFAULT_ID and finite(t)), default=None)
    if default_ms is None or best_ms is None or default_ms >= policy.verify_always_time_ms:
        return True
    return 1e3 * (default_ms - best_ms) * policy.verify_skip_factor >= policy.min_gain_us


def too_short_to_pay(policy: SwitchPolicy, default_ms: float | None) -> bool:
    """Whether a default predicted to take ``default_ms`` is too short for any candidate to save the least gain."""
    return default_ms is not None and 1e3 * default_ms * policy.verify_skip_factor < policy.min_gain_us


def pruned_shortlist(ids: list[str], times_ms: dict[str, float], max_ratio: float) -> list[str]:
    """The candidates of ``ids`` (best first) predicted within ``max_ratio`` of PyTorch's default, the first one
    whatever its time: building a cuDNN plan costs more of verify mode's first pass than timing it."""
    default_ms = times_ms.get(DEFAULT_ID)
    if default_ms is None:
        return ids
    kept = [c for c in ids if finite(times_ms.get(c)) and times_ms[c] <= max_ratio * default_ms]
    return kept or ids[:1]


def judge(policy: SwitchPolicy, problem_key: str, cid: str, times: dict[str, float], default_ms: float | None,
          source: str, min_ratio: float, overhead_us: float, host_us: dict[str, float] | None = None,
          device_bound: bool = False) -> Decision:  # fmt: skip
    """Keep ``cid`` only where its gain over PyTorch's default pays what leaving PyTorch's path costs: the least gain,
    the path's own host cost ``overhead_us``, and the host time the candidate takes over the default (``host_us``),
    and is at least ``min_ratio`` times faster. ``device_bound`` (a GPU-bound step; measured or recorded times): the
    least gain is ``device_bound_min_gain_us``, and a switch kept only by it says so (:data:`DEVICE_BOUND`)."""
    host_us = dict(host_us or {})
    if cid == DEFAULT_ID:
        return Decision(problem_key, cid, source, "fastest", times, host_us)
    t = times.get(cid)
    if t is None or default_ms is None:
        return Decision(problem_key, DEFAULT_ID, source, "no time for the choice or the default", times, host_us)
    gain_us = 1e3 * (default_ms - t)
    cost_us = overhead_us + host_extra_us(host_us, cid)
    least_us = policy.device_bound_min_gain_us if device_bound else policy.min_gain_us
    if gain_us < least_us + cost_us or default_ms < min_ratio * t:
        return Decision(problem_key, DEFAULT_ID, source, BELOW_THRESHOLD, times, host_us)
    reason = DEVICE_BOUND if gain_us < policy.min_gain_us + cost_us else ""
    return Decision(problem_key, cid, source, reason, times, host_us)
