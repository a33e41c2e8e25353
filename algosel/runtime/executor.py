"""The runtime's executor: decides what each convolution runs, builds it once, and runs it on every call.

A convolution call is three problems (forward, input gradient, weight gradient); each gets a :class:`Decision`:
PyTorch's own path, or a candidate whose gain over PyTorch's default is known to exceed what leaving PyTorch's
path costs. The gain is known from, in order:

- the records the model ships with, for a problem they measured (measurements of this GPU);
- a measurement here (``verify=k``): on the first call of a new problem the model's top ``k`` candidates and
  PyTorch's default are checked and timed once with the sweeper's timer (a small budget), and the fastest kept
  (where the model predicts a gain worth timing, or a long default);
- the model's predicted times, where the model has a time predictor;

and otherwise the call passes through: a network the model knows nothing about runs at PyTorch's speed. What leaving
PyTorch's path costs is the least gain (``min_gain_us``), the path's own host cost, and the host time per call the
candidate takes over PyTorch's default where the records or the measurement timed it (:func:`host_extra_us`).
Decisions go into the persistent cache (:mod:`algosel.runtime.cache`), so a later process decides nothing again.

The decisions of one call signature (shapes, strides, dtypes, geometry, which inputs need gradients, autocast,
TF32 switches) are bundled into a route, memoised per signature; a call then costs one tuple key and one dict
lookup before it runs:

- ``native``: PyTorch's own ``conv2d`` (every direction passes through);
- ``gemm``: every direction is GEMM lowering and the forward is one matrix product: plain differentiable ``addmm``
  on views, as ``nn.Linear`` runs (autograd's backward is the lowering of both gradients);
- ``compiled``: the C++ autograd Function of :mod:`algosel.runtime.native` with a cuDNN plan or PyTorch's kernel per
  direction (cheaper on the host than PyTorch's own call: H200, benchmarks/runtime_costs.py);
- ``function``: the Python autograd Function, each direction through its own runner (the path without the
  extension, and for mixes of GEMM lowering with other candidates).

A gain in device time is worth nothing where the device waits for the host: a host-bound training step (most steps
on an H200) runs as fast as the host enqueues it, and a switch costs it host time without shortening it. So a route
that switches a CUDA convolution away from PyTorch's path starts on probation: its first calls run PyTorch's own
convolution while the executor looks whether the device is still busy with earlier work when the call arrives
(``cudaStreamQuery`` on the call's stream, about a microsecond), and again when the call's gradient comes back (a
gradient hook, just before autograd enqueues its backward directions). Where it is, in at least
``MIN_BUSY_FRACTION`` of ``PROBE_CALLS`` calls' forward looks or of their backward looks (the host is ahead, the
device decides the step's time), the switch is made; where the device sat idle at both, the route passes through
for good (``pytorch:device idle at the call``); so does it where the looks of
all the routes on probation, pooled, found the device busy in less than ``MIN_NETWORK_BUSY_FRACTION`` of them (the
step as a whole is host-bound: ``pytorch:device idle at most of the network's calls``). With ``look_first``, verify
mode takes the looks before it times a new signature's shortlist, and times it only where they find the device
busy (``Executor`` says how). Where the executor's blocks recur (``enabled()`` blocks, optimizer steps under
``enable()``), the looks only drop what cannot pay (``TRIAL_BUSY_FRACTION``), and a step trial
(:mod:`algosel.runtime.trial`) then times blocks with and without the switches and keeps them only where the
blocks are faster with them (``pytorch:step as fast without the switches`` where not).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from algosel.learn.selector import Selector, candidate_row, offline_rows
from algosel.operands import OUTPUT_ROLE, Operands, conv_args, empty_like_layout, pytorch_direction
from algosel.problem import ConvProblem, dtype_of
from algosel.runtime.autograd_thread import on_autograd_thread
from algosel.runtime.cache import Decision, RuntimeCache
from algosel.runtime.trial import DROP, KEEP, StepTrial, block_clock
from algosel.spaces import CandidateError, PreparedCandidate, get_space, split_candidate_id
from algosel.spaces.gemm import gemm_conv, gemm_kind

log = logging.getLogger(__name__)

#: PyTorch's own conv2d, whatever the switches say.
original_conv2d: Callable[..., torch.Tensor] = F.conv2d

#: A candidate replaces PyTorch's default only where it saves at least this much device time per call (us) ...
#: Training steps on an H200 are host-bound: a switch saving a few us of device time gains nothing there, while a
#: switched convolution costs its step more than the per-call micro-benchmarks show (the zoo's autocast networks
#: ran 2-19% slower with switches that saved under 1% of their kernel time: docs/hook.md). Over the shipped
#: records, switching only where the best saves >= 20 us keeps 98.2% of the device time the best candidates save
#: and switches 20% of the problems instead of 46% (2 us); on the held-out problems decided as if unrecorded,
#: total time 0.487x the default's instead of 0.484x (``python benchmarks/switch_rule.py --margins 1.5
#: --min-gains-us 2,10,20,30,50``).
DEFAULT_MIN_GAIN_US = 20.0
#: ... and is at least this much faster (default / candidate) by measurement or records (noise between runs of one
#: case stays within ~2%: docs/sweeper.md) ...
MIN_MEASURED_RATIO = 1.03
#: ... or by the model's predicted times (their error is larger: docs/selector.md has its calibration). Chosen with
#: benchmarks/switch_rule.py on the shipped model's 1212 held-out problems (decided as if unrecorded, scored by their
#: records): 1.5 makes 0.3% of them more than 1% slower than PyTorch's default (1.15: 3.5%, 1.3: 1.4%) for a total
#: time of 0.484x the default's (1.15: 0.465x); a network the model knows nothing about must not run slower.
MIN_PREDICTED_RATIO = 1.5
#: The model's predicted times of a problem farther than this from every recorded problem of its kind (the sum over
#: its shape fields of |log2 ratio| to the nearest, :meth:`~algosel.records.catalogue.Catalogue.distance`) are
#: extrapolations, and a switch there must be predicted at least ``MIN_PREDICTED_RATIO_FAR`` times faster. With
#: 1.5 everywhere, prediction mode switched 40 directions of EfficientNet-B0, MobileNetV3 and DeepLabV3, each then
#: timed against PyTorch's default as benchmarks/switch_check.py does (H200;
#: results/switch_check-h200-20261201-margin1.5.jsonl): the 7 at distance 1 all measured faster (1.09-4.25x); of
#: the 33 at distances 2.6-10.4 (float16 NHWC layers, recorded only in NCHW), all predicted 1.5-2.6x faster, 3 did
#: not build and 18 of the other 30 measured slower than PyTorch's default (down to 0.32x). On the held-out
#: problems, far switches whose default is slow by a wide margin keep most of the gain: total time 0.506x the
#: default's instead of 0.487x (docs/hook.md: ``python benchmarks/switch_rule.py --far-margins``).
NEAR_RECORDS_DISTANCE = 2.0
MIN_PREDICTED_RATIO_FAR = 3.0
#: Host time the Python autograd Function path adds per convolution over PyTorch's own path (us): a cuDNN
#: candidate there must save more device time than this (without the compiled path). benchmarks/hook_bench.py on
#: the H200, 2026-11-30: +57 us (cuDNN) and +51 us (GEMM) per call for a tiny conv.
PYTHON_PATH_OVERHEAD_US = 60.0
#: The reason of a pass-through whose gain did not pay (a cached one is judged again by the reading executor).
BELOW_THRESHOLD = "gain below the threshold"
#: Candidates the verify mode times on a new problem, besides PyTorch's default.
DEFAULT_VERIFY_K = 3
#: Verify mode does not time a problem whose default the model predicts to take less than the least gain
#: (``min_gain_us``) divided by this: no candidate can save the least gain on a convolution shorter than it, and the
#: default takes more than twice its predicted time on 6.1% of the 1,212 held-out problems. With 20 us, the rule
#: skips 88 of them (2 with a default of >= 20 us), losing none of the gains of >= 20 us a call. Each timed problem
#: costs ~0.1 s of the cold first pass.
VERIFY_SKIP_FACTOR = 2.0
#: The reason of a problem verify mode did not time for that.
TOO_SHORT_TO_PAY = "predicted shorter than the least gain"
#: Nor does it time a problem where the model predicts its shortlist's best to save less than the least gain over
#: ``VERIFY_SKIP_FACTOR``, unless it predicts PyTorch's default to take at least this long (ms): there a gain the
#: model does not see can be large. On the held-out problems it times today (1,124; ``python
#: benchmarks/verify_skip.py``), the rule times 35.8% of them and keeps 98.6% of the device time per call that
#: timing finds (switches saving >= 20 us); 40 of 220 such switches are lost, none saving more than 163 us a call.
#: Timing all 1,124 keeps all of it, for 2.8 times as many problems timed.
VERIFY_ALWAYS_TIME_MS = 0.1
#: The reason of a problem verify mode did not time for that.
PREDICTED_GAIN_TOO_SMALL = "predicted gain under the least gain"
#: Of the model's shortlist of a problem it times, verify mode builds and times only the candidates predicted to
#: take at most this times PyTorch's default's time (the first one always). On the 402 held-out problems it times
#: (``python benchmarks/verify_skip.py``), that is 2.30 candidates a problem instead of 3.00, keeping 98.6% of the
#: device time per call timing finds (175 of its 180 switches); 0.9: 1.89 a problem, 98.3%.
VERIFY_MAX_PREDICTED_RATIO = 1.0
#: The same far from the records (``far_from_records``), where the model's predicted times are extrapolations.
VERIFY_MAX_PREDICTED_RATIO_FAR = 3.0
#: PyTorch's default's measured time a call from which verify mode times the rest of the list after its shortlist
#: (``Executor.rest_of_list_to_time``), and the most candidates it times on one problem then.
VERIFY_WHOLE_LIST_MS = 0.25
VERIFY_LIST_MAX = 10
#: Wall time after which no more of that rest is started, on one problem: a bound on what exploring the configs the
#: model ranks low can add to a first pass. (ConvNeXt-T autocast b64's cold first pass, 0.71-0.80 of benchmark
#: mode's tuning on the H200, was not from the rest: 4.00 s without this bound, 3.93 s with it.)
VERIFY_REST_BUDGET_S = 0.1
#: cuDNN's behaviour note of an engine config whose plan build compiles its kernel (NVRTC): verify mode leaves such
#: configs out of the rest of the list (a shortlist may still hold one the model ranks first).
RUNTIME_COMPILED_NOTE = "runtime_compilation"
#: The heuristic modes whose lists that rest comes from: all three, as the model was trained on them (it scores
#: engine configs of mode A's or B's top 8 only: a config of FALLBACK's list alone is never ranked).
VERIFY_WHOLE_LIST_MODES = ("a", "b", "fallback")
#: A plan build longer than this makes verify mode leave out its engine for the rest of the process on problems of
#: the same kind (direction, dtype, layout, grouped or not), unless it was the fastest of its problem (the sweeper's
#: ``slow_build_s``). ConvNeXt-T autocast's depthwise weight gradients (H200, 2026-12-04,
#: ``benchmarks/cold_profile.py``): engines 19 and 16, without a behaviour note, took 0.14-0.99 s a build, 2.05 s of
#: its 4.77 s cold pass in five builds, and none was faster than PyTorch's default; every other build took 2-14 ms.
VERIFY_SLOW_BUILD_S = 0.05
#: Verify mode's timer (``CudaEventTimer``'s settings): a small budget, as a few repeats behind a blocked stream rank
#: a shortlist. A candidate whose warm-up run takes more than ``single_factor`` times the best time so far (PyTorch's
#: default's, timed first) keeps that run as its only time: it cannot be the one kept, which must be 3% faster than
#: the default (``MIN_MEASURED_RATIO``), and its repeats would be spent on a rank already clear (ConvNeXt-T's
#: float32 depthwise weight gradients: 4-12 ms a run for configs of cuDNN's lists, against the default's
#: 0.7-2.3 ms). With ``slow_factor`` equal to it, the timer's 3-repeat tier does not apply here.
VERIFY_TIMER = {"budget_ms": 1.0, "min_repeats": 3, "max_repeats": 5, "slow_factor": 1.25, "single_factor": 1.25}
#: The heuristic modes whose lists verify mode ranks (``Executor.shortlist_to_time``). Mode B's
#: list costs several times A's and FALLBACK's together: on the H200 (2026-12-03, 9 problems of the zoo) a query of
#: the three took 10-101 ms a problem after the first (471 ms), mode A alone 0-3 ms, FALLBACK 1-2 ms, B 8-46 ms; the
#: zoo's ConvNeXt-T float32 spent 2.1 s timing 15 problems with the three lists, 0.255 of benchmark mode's
#: tuning. The model scores engine configs of mode A's or B's top 8 only, so FALLBACK's list adds list context but
#: no candidate of its own: on the 834 unrecorded swept problems of ``benchmarks/verify_far.py`` (a live query's
#: ranks: those of the lists not asked cleared; at ``9df0c98``) A alone and A+FALLBACK find the same 0.905 of the
#: default's total time, with all three asked only on long calls (``VERIFY_WHOLE_LIST_MS``); all three on every
#: shortlist find 0.894, for a query of B on every problem timed. (An earlier count, 0.955 for A+FALLBACK against
#: 0.953 for the three, let the sweep's mode-B ranks through to the model.)
VERIFY_LIVE_MODES = ("a", "fallback")
#: Candidates of the model's shortlist whose predicted times are compared, on a problem the records lack.
PREDICT_TOP_K = 3
#: Calls of a switching route's signature that look at the device (see the module docstring) before the switch is
#: made or dropped; 0 switches at once.
PROBE_CALLS = 8
#: The least share of those calls that must find the device busy for the switch to be made. Set before it was
#: measured, and kept after: the share of PyTorch's default's forward convolution calls that found the H200 busy
#: (``python benchmarks/device_busy.py``, float32 steps of docs/hook.md's zoo) is 0.09 for EfficientNet-V2-S and
#: 0.26 for the tutorial's MyNet, whose switches made the step slower (1.08x and 1.03x the default's), and 0.72-0.84
#: for EfficientNet-B0, MobileNetV3-L and DeepLabV3, where switches paid; per route, 0.75 dropped every switched
#: direction of EfficientNet-V2-S (24) and 12 of MyNet's 13, and kept 9 of EfficientNet-B0's 12 (docs/hook.md,
#: "Probation"). The backward looks count as much: a step whose device starts idle (after a sync: a loss read back
#: each step, the zoo's timed passes) finds it idle at the first forward calls and can still be device-bound in its
#: backward (float32 RegNetY-800MF on the H200: its looks before timing found the device idle at the forward calls of
#: 38 directions, while benchmark mode's kernels were 9% shorter than the default's; ``device_busy.py`` found the
#: default's backward busy at 0.98 of the calls).
MIN_BUSY_FRACTION = 0.75
#: ... and the least share of all the looks of the executor's routes on probation so far (every switching
#: convolution of the network, pooled) that must have found it busy. A convolution's own calls can find the device
#: busy right after a heavy layer in a step that is host-bound as a whole, whose end then waits on the host, not on
#: the device: the tutorial's MyNet (its switching convolutions' calls found the device busy in about a quarter of
#: the looks) kept one switch by the per-route share alone, which cut its kernel time by 0.04-0.08 ms a step and
#: cost it 0.3-0.4 ms of host time (1.033x the default's step, H200, 2026-12-02). At one half, the pooled share of
#: MyNet's routes on probation fell on either side of it from run to run: one run dropped every switch (the
#: executor stepped aside in 895 of 900 blocks), the next kept the 1x7 convolution's (1.012x and 1.031x the
#: default's, benchmarks/results/zoo-h200-20261202-mynet-*-aa.jsonl). At three quarters, the per-route share, three
#: MyNet processes of three dropped them and stood aside, while EfficientNet-B0 and MobileNetV3-L (whose default's
#: convolutions found the device busy in 0.72 and 0.83 of their calls, ``python benchmarks/device_busy.py``) kept 5
#: and 7 switched directions, as at one half (docs/hook.md, "Stepping aside, measured").
MIN_NETWORK_BUSY_FRACTION = 0.75
#: A look at the device within this many seconds after any executor of the process planned anything does not
#: count: planning and measuring synchronize the device, which then sits idle until the host catches up with its
#: queue again.
PROBE_SETTLE_S = 0.05
#: A switch whose known gain (records, measurement or predicted times) is at least this much device time per call
#: (us, summed over the route's directions) is made at once, without probation. Probation looks at the calls of
#: the convolution itself, and a convolution whose own slow default keeps the device busy (a fully connected mode
#: conv, 20-30x slower in cuDNN than as one matrix product: milliseconds a call) can find the device idle at its own
#: calls while the step waits on the device after it. Not lower: at 200 us, the tutorial's MyNet had one switch
#: exempted (its 1x7 convolution's two gradients, 152 + 88 us a call by its records), which cut its kernel time by
#: 0.27 ms a step and made the host-bound step 1.027x the default's, against 1.009x for the pass-through control
#: (H200, 2026-12-02, benchmarks/zoo.py --nets mynet --aa --rounds 300 --processes 2).
PROBATION_EXEMPT_GAIN_US = 1000.0
#: An executor whose every route is PyTorch's own (nothing switched, or every switch dropped by probation) and
#: that met no new call signature in this many ``enabled()`` blocks in a row steps aside: its next blocks leave
#: ``F.conv2d`` as PyTorch's own, so that they cost what the hook switched off costs. Even the compiled dispatch of a
#: pass-through costs a host-bound step about 1% (MyNet, H200: 1.012x with the hook on, a Python wrapper 1.001x,
#: the default against itself 1.004x; benchmarks/passthrough_cost.py).
STEP_ASIDE_AFTER_BLOCKS = 2
#: A stepped-aside executor still routes one block in this many, to meet call signatures that are new (an input
#: size not seen before); a new one makes it route every block again until it is quiet again.
LOOK_AGAIN_EVERY_BLOCKS = 50
#: Probation's least busy share (per route, and pooled over the network's routes) while a step trial is still to
#: judge the executor's switches (:mod:`algosel.runtime.trial`: its blocks recur, and it can step aside). The looks
#: then only spare the switches that cannot pay (and, looking first, their timing); the trial measures whether the
#: rest make the step faster. At three quarters the looks dropped the switches of a step they could have made
#: faster: float32 SqueezeNet 1.1 (b64, H200), whose benchmark mode's steps were 1.06x faster than the default's,
#: had 34 of 96 forward and 66 of 94 backward looks busy (benchmarks/results/zoo-h200-20261203-float32-eebbdbb.jsonl).
TRIAL_BUSY_FRACTION = 0.25
#: The reason of a pass-through whose device was found idle at its calls ...
DEVICE_IDLE = "device idle at the call"
#: ... or at most of the calls of the network's switching convolutions.
NETWORK_IDLE = "device idle at most of the network's calls"
#: ... or whose executor's step trial found PyTorch's own convolutions as fast.
TRIAL_SAME = "step as fast without the switches"
#: What a call that looks at the device counts as, per direction, in :func:`stats`.
PROBING = "pytorch:probing the device"
#: What a signature that looks at the device before its shortlist is timed runs meanwhile (``look_first``).
LOOKING = "pytorch:looking before timing"
#: ``Executor._before_timing``'s verdicts on a direction: look at the device first, or switch at once.
LOOK, EXEMPT = "look", "exempt"

#: When any executor of the process last planned a new call signature (time.perf_counter()): planning may measure,
#: which synchronizes the device for every executor's calls, so looks at the device just after it do not count
#: (``PROBE_SETTLE_S``).
_planned_at_s = [-math.inf]

_counts: Counter[str] = Counter()
#: Routes counted by call (native, GEMM and compiled routes of every executor), for :func:`stats`.
_counted_routes: list[_Route] = []
#: The compiled path's dispatch tables of every executor (their call counts are part of :func:`stats`).
_tables: list[Any] = []


def stats() -> dict[str, int]:
    """Calls per path: ``gemm``, ``cudnn``, ``pytorch:<reason>`` (pass-through), ``fallback:<error>``.

    A convolution whose every needed direction passes through runs natively in PyTorch; its directions are counted
    at the forward call: one, or three where gradients are needed.
    """
    total = Counter(_counts)
    for route in _counted_routes:
        calls = route.calls + sum(table.calls(slot) for table, slot in route.slots)
        for reason in route.reasons:
            total[reason] += calls
    return dict(+total)


def reset_stats() -> None:
    _counts.clear()
    for route in _counted_routes:
        route.calls = 0
    for table in _tables:
        table.reset_calls()


# ------------------------------------------------------------------------------------------------- plans
@dataclass
class _Plan:
    """What runs for one problem: a runner (``None``: PyTorch's path, with the reason as ``path``)."""

    runner: PreparedCandidate | None
    path: str  # "gemm", "cudnn" or "pytorch:<reason>"
    native_id: int = -1  # the plan's id in the compiled path, where it was loaded there
    gain_us: float = 0.0  # device time per call the decision expects it to save over PyTorch's default


def compiled_plans(plans: list[_Plan]) -> list[_Plan]:
    """A convolution's plans with its GEMM directions passed through where GEMM is mixed with other paths.

    Such a mix runs only as the Python autograd Function (about 60 us of host time a call, more than the one
    direction's GEMM gain usually saves in a host-bound step; the switch rule judges each direction alone and does
    not see it), while without the GEMM directions the compiled path runs the rest at PyTorch's own host cost. A
    convolution whose every direction is GEMM keeps it.
    """
    if not any(p.path == "gemm" for p in plans) or all(p.path == "gemm" for p in plans):
        return plans
    return [_Plan(None, "pytorch:gemm mixed with other paths") if p.path == "gemm" else p for p in plans]


@dataclass
class _Route:
    """What one call signature does (see the module docstring for the kinds)."""

    kind: str
    problem: ConvProblem | None = None
    reasons: tuple[str, ...] = ()
    calls: int = 0
    native_route: int = -1  # the compiled path's route id
    run_native: Callable[..., torch.Tensor] | None = None  # the compiled path's entry point
    unseen: Any = None  # the recorder of problems the model's records lack, where this route's problem is one
    slots: list = field(default_factory=list)  # (dispatch table, slot) pairs that run this route's calls in C++
    probe: _Probe | None = None  # on probation: the looks at the device so far (None: decided)
    key: tuple | None = None  # looking before timing (``Executor.look_first``): its call signature
    looked: _Probe | None = None  # probation's looks once they decided (a step trial that cannot tell reads them)


@dataclass
class _Probe:
    """A switching route's looks at the device before its switch is made (module docstring)."""

    calls: int = 0  # looks at the forward calls that count
    busy: int = 0  # of them, those that found the device busy
    back_calls: int = 0  # looks when a call's gradient reached it (its backward directions about to be enqueued)
    back_busy: int = 0

    def idle(self, min_fraction: float) -> bool:
        """Whether the device was busy in less than ``min_fraction`` of the forward looks and of the backward
        looks alike: a switch saves device time where either of its calls' kinds finds the device busy (a step
        that starts with an idle device, after a sync, can be device-bound in its backward)."""
        forward = self.busy >= min_fraction * self.calls if self.calls else False
        backward = self.back_busy >= min_fraction * self.back_calls if self.back_calls else False
        return not (forward or backward) and (self.calls or self.back_calls) > 0


def device_busy(x: torch.Tensor) -> bool | None:
    """Whether the device of ``x`` is still running earlier work of its current stream (None: cannot tell, for a
    tensor off CUDA)."""
    if not x.is_cuda:
        return None
    return not torch.cuda.current_stream(x.device).query()


def host_extra_us(host_us: dict[str, float], candidate_id: str) -> float:
    """Host time per call ``candidate_id`` takes over PyTorch's default, as measured (0 where either is unknown,
    or where the candidate is cheaper: a host-bound step gains nothing from a cheaper launch it does not wait on).

    A switch must pay it on top of the least gain: a host-bound step pays it in full while the device time it saves
    is hidden behind the host. The sweep's records on the H200 (``python benchmarks/host_cost_records.py``) measure
    it by engine: the median over an engine's problems is within +-5 us of PyTorch's default for most cuDNN engines,
    +11 to +30 us for engines 46, 41, 50, 61, 18 and 3, and milliseconds on some problems for a few more (their 95th
    percentiles: the call waits on the device). Of the 1,167 recorded problems whose fastest candidate saves >= 20 us
    of device time a call, 148 take > 10 us more host time for it and 40 > 20 us; with the extra added to the least
    gain, 1,102 of them still switch, keeping 99.7% of the device time saved."""
    t, t_default = host_us.get(candidate_id), host_us.get("pytorch:default")
    if t is None or t_default is None or not (_finite(t) and _finite(t_default)):
        return 0.0
    return max(0.0, t - t_default)


def fastest(times: dict[str, float], host_us: dict[str, float]) -> str:
    """The measured candidate of least device time plus the host time it takes over PyTorch's default (as if the two
    added up, which a host-bound step comes close to): a slightly slower kernel that launches as cheaply as PyTorch's
    beats a faster one that costs its step more host time than it saves."""
    if not times:
        return "pytorch:default"
    return min(times, key=lambda c: times[c] + host_extra_us(host_us, c) / 1e3)


def worth_a_closer_look(times_ms: dict[str, float], min_gain_us: float) -> bool:
    """Whether the predicted times ``times_ms`` of a shortlist and PyTorch's default leave a gain to look for: the
    best of the others predicted to save at least ``min_gain_us`` / ``VERIFY_SKIP_FACTOR`` a call, or the default
    predicted to take at least ``VERIFY_ALWAYS_TIME_MS`` (there a gain the model does not see can be large), or
    either time unknown. Where not, neither timing the shortlist (verify mode) nor querying cuDNN's live list
    (prediction mode) is worth its cost."""
    default_ms = times_ms.get("pytorch:default")
    best_ms = min((t for c, t in times_ms.items() if c != "pytorch:default" and _finite(t)), default=None)
    if default_ms is None or best_ms is None or default_ms >= VERIFY_ALWAYS_TIME_MS:
        return True
    return 1e3 * (default_ms - best_ms) * VERIFY_SKIP_FACTOR >= min_gain_us


def pruned_shortlist(ids: list[str], times_ms: dict[str, float], max_ratio: float | None = None) -> list[str]:
    """The candidates of ``ids`` (best first) that the predicted times ``times_ms`` put within ``max_ratio``
    (default ``VERIFY_MAX_PREDICTED_RATIO``) of PyTorch's default's, the first one whatever its time: building a
    cuDNN plan costs more of verify mode's first pass than timing it (50 ms of EfficientNet-B0 autocast's 190 ms a
    timed problem on the H200), and one predicted slower than the default seldom turns out the fastest."""
    default_ms = times_ms.get("pytorch:default")
    if default_ms is None:
        return ids
    limit_ms = (VERIFY_MAX_PREDICTED_RATIO if max_ratio is None else max_ratio) * default_ms
    kept = [c for c in ids if _finite(times_ms.get(c)) and times_ms[c] <= limit_ms]
    return kept or ids[:1]


def _one_matrix_product(problem: ConvProblem) -> bool:
    """Whether the forward lowering is a single GEMM on views (so autograd's backward is the lowering of both
    gradients), in the math mode the records measured: TF32 for ``float32``, which in autograd's backward follows
    ``torch.backends.cuda.matmul.allow_tf32``. NCHW pointwise is a batched product whose autograd weight gradient
    is not the measured lowering."""
    kind = gemm_kind(problem)
    if kind is None or (kind == "pointwise" and problem.layout != "nhwc"):
        return False
    if problem.dtype in ("float16", "bfloat16"):
        return True
    return torch.backends.cuda.matmul.allow_tf32 == (problem.dtype == "float32")


class Executor:
    """Decides, prepares and caches what every convolution it meets runs (see the module docstring).

    Parameters
    ----------
    selector : Selector, optional
        Default: the shipped model for this GPU (:func:`algosel.learn.models.load_default`).
    verify : int
        On a problem the records lack, time the model's top ``verify`` candidates and PyTorch's default once and
        keep the fastest (0: decide from the records and predicted times only).
    live : bool, optional
        Rank cuDNN's live candidate list for problems the records lack (default: when a GPU and the frontend are
        present).
    min_gain_us : float
        Least device time per call a candidate must save over PyTorch's default.
    max_workspace_bytes : int, optional
    cache : bool or path
        Keep decisions and plans in the persistent cache: ``True`` under :func:`algosel.runtime.native.cache_root`
        (``$ALGOSEL_CACHE_DIR`` or ``~/.cache/algosel``), or under the folder given.
    native : bool, optional
        Use the compiled path where it is built (default); ``False``: the Python path only.
    record : path, optional
        Keep the convolutions met whose problems the model's records lack, with call counts, in this layers file
        (:mod:`algosel.runtime.unseen`; default: the file named by ``$ALGOSEL_RECORD_UNSEEN``, if set), for
        ``algosel sweep --layers``.
    probe_calls : int, optional
        Calls of a switching route that look whether the device waits for the host before the switch is made
        (default ``PROBE_CALLS``; 0: switch at once). See the module docstring.
    step_aside : bool
        Leave ``F.conv2d`` as PyTorch's own in ``enabled()`` blocks once every route passes through and no new call
        signature came for ``STEP_ASIDE_AFTER_BLOCKS`` blocks (one block in ``LOOK_AGAIN_EVERY_BLOCKS`` is still
        routed, to meet new ones).
    look_first : bool
        Verify mode: before timing a new call signature's shortlist, look at the device for ``probe_calls`` calls
        (PyTorch's own convolution runs meanwhile), as probation does after a switch is decided; where the calls
        find the device idle, the signature passes through untimed (a switch there could not be kept), and
        otherwise its shortlist is timed at the next call, and a switch it finds is made without a second
        probation. On by default: in host-bound steps the first pass then times nothing (on the H200 zoo's
        autocast networks, verify mode's cold cost fell from 0.075-0.39 of benchmark mode's tuning to 0.011-0.052);
        where the device is busy, the timing moves to the signature's 9th call. ``False``: time at the first call.
    """

    def __init__(
        self,
        selector: Selector | None = None,
        verify: int = 0,
        live: bool | None = None,
        min_gain_us: float = DEFAULT_MIN_GAIN_US,
        max_workspace_bytes: int | None = None,
        cache: bool | str | os.PathLike = True,
        native: bool | None = None,
        record: str | os.PathLike | None = None,
        probe_calls: int | None = None,
        step_aside: bool = True,
        look_first: bool = True,
    ):
        if selector is None:
            from algosel.learn.models import load_default  # noqa: PLC0415

            selector = load_default()
        self.selector = selector
        self.verify = _count("verify", verify, "candidates to time")
        self.probe_calls = _count("probe_calls", PROBE_CALLS if probe_calls is None else probe_calls, "calls")
        #: The looks of all its routes on probation, pooled (``MIN_NETWORK_BUSY_FRACTION``).
        self.looks = _Probe()
        self.min_gain_us = min_gain_us
        self.max_workspace_bytes = max_workspace_bytes
        self._live = live
        self._native_wanted = native
        self._native: Any = None
        self._native_checked = False
        self._cache_wanted = cache
        self._cache: RuntimeCache | None = None
        self._cache_checked = False
        self._plans: dict[ConvProblem, _Plan] = {}
        self._routes: dict[tuple, _Route] = {}
        self._directions: dict[ConvProblem, dict[str, ConvProblem]] = {}
        self._dtypes = set(selector.manifest.get("dtypes", ("float32", "float16")))
        self._sweeper = None
        self._lock = threading.RLock()
        from algosel.runtime.unseen import recorder_for, recorder_from_env  # noqa: PLC0415

        self._recorder = recorder_for(record) if record else recorder_from_env()
        #: The compiled path's dispatch table (``RouteTable``): call signatures whose route is PyTorch's own
        #: kernel or a compiled route, keyed and run in C++, so that a steady-state call costs no Python beyond
        #: the hook's wrapper. Made on the first planned call where the compiled path loads; ``fast_run`` is its
        #: entry point (None: every call takes :func:`run_conv`).
        self._table: Any = None
        self.fast_run: Callable[..., torch.Tensor | None] | None = None
        self._slot_routes: dict[int, _Route] = {}
        #: Seconds spent deciding (measuring, building plans), for benchmarks of the first pass.
        self.planning_s = 0.0
        self.measured_problems = 0
        self.step_aside = bool(step_aside)
        #: ``enabled()`` blocks in a row that met no new call signature, and blocks stepped aside so far.
        self.quiet_blocks = 0
        self.blocks_aside = 0
        self._routes_changed = True  # a route made or re-decided since _all_native was last computed
        self._all_native = False
        self.look_first = bool(look_first)
        #: Call signatures whose looks before timing found the device busy (``look_first``): timed when met next.
        self._looked: set[tuple] = set()
        #: Decisions :meth:`_before_timing` made for recorded or cached directions, taken by :meth:`_make_plan`
        #: (deciding them again would repeat the records' lookup, or the cache's rejudging).
        self._known: dict[ConvProblem, Decision] = {}
        #: The looks of signatures that looked before timing, for the routes their timing makes (``_Route.looked``).
        self._looks_of: dict[tuple, _Probe] = {}
        #: The step trial of the switches (:mod:`algosel.runtime.trial`): under way, and its verdict once made
        #: (``trial_ratio``: its median ratio of switched to PyTorch's block spans).
        self.trial: StepTrial | None = None
        self.trial_verdict: str | None = None
        self.trial_ratio = math.nan
        self.blocks_ended = 0
        self._block_open = False
        self._device: torch.device | None = None  # of the first call planned: the trial's clock reads its stream

    # ---------------------------------------------------------------------------------------- resources
    def _dispatch_table(self):
        """The dispatch table, made on first use; None without the compiled path, or while recording unseen
        problems (a recorder counts every call in Python)."""
        if self._table is None and self._recorder is None:
            ext = self.native_module()
            if ext is not None and hasattr(ext, "RouteTable"):
                self._table = ext.RouteTable()
                _tables.append(self._table)
                self.fast_run = self._table.run
        return self._table

    def hold_in_table(self, route: _Route, x, w, b, stride, padding, dilation, groups) -> None:
        """Let the dispatch table run calls of this signature (native, compiled and GEMM routes)."""
        if route.kind not in ("native", "compiled", "gemm") or route.unseen is not None or route.probe is not None:
            return
        table = self._dispatch_table()
        if table is None:
            return
        if route.kind == "gemm":  # the table computes what gemm_conv does, in C++
            kind, rid = (2 if gemm_kind(route.problem) == "fc" else 3), -1
        else:
            kind, rid = (0, -1) if route.kind == "native" else (1, route.native_route)
        slot = table.add(x, w, b, stride, padding, dilation, groups, kind, rid)
        if slot < 0:  # a call the table cannot key ("same" padding...): Python's path keeps it
            return
        owner = self._slot_routes.get(slot)
        if owner is route:
            return
        if owner is not None:  # two spellings of one signature (stride=1 and (1, 1)): counted once
            owner.slots.remove((table, slot))
        self._slot_routes[slot] = route
        route.slots.append((table, slot))

    def route_reasons(self) -> dict[str, int]:
        """The directions of every call signature planned so far, by what they run (``cudnn``, ``gemm`` or
        ``pytorch:<reason>``): what the executor switched and why the rest passes through. Unlike :func:`stats`
        (calls), it stays whole where the executor steps aside."""
        return dict(Counter(reason for route in self._routes.values() for reason in route.reasons))

    def begin_block(self) -> bool:
        """A block of this executor begins (an outermost ``enabled()`` block, or a step under ``enable()``): True
        where it leaves ``F.conv2d`` as PyTorch's own (it steps aside, or it is a step trial's block without the
        switches)."""
        self._block_open = True
        if self.trial is None and self.trial_verdict is None and self._trial_ready():
            self.trial = StepTrial(block_clock(self._device))
        if self.trial is not None:
            aside = self.trial.begin()
            if aside is not None:
                return aside
            verdict = self.trial.verdict()
            if verdict is None:  # the device has not run the last blocks yet: routed meanwhile
                return False
            self._judged(verdict)
        return self.stands_aside()

    def block_done(self, routes_before: int) -> None:
        """A block of this executor ended; ``routes_before``: its routes when the block began."""
        changed = len(self._routes) != routes_before
        self.quiet_blocks = 0 if changed else self.quiet_blocks + 1
        if not self._block_open:  # a block inside the process's switch (enable()): not one of its own
            return
        self._block_open = False
        self.blocks_ended += 1
        if self.trial is not None:
            self.trial.end()
            if changed:  # a new call signature: the blocks measured are not alike; a new trial once quiet again
                self.trial = None

    def _trial_possible(self) -> bool:
        """Whether a step trial can judge this executor's switches: it can step aside, its blocks recur, and its
        device has a timeline to read."""
        return (self.step_aside and self._recorder is None and self.blocks_ended > 0 and self._device is not None
                and block_clock(self._device) is not None)  # fmt: skip

    def _trial_ready(self) -> bool:
        """Whether a step trial starts at this block: possible, every route decided, the block before met no new
        signature, and a switch to judge, on a device with a timeline to read."""
        return self._trial_possible() and self.quiet_blocks >= 1 and not self._undecided() and self._switches()

    def _undecided(self) -> int:
        """Call signatures still on probation or looking at the device, and those that looked and are to be timed
        at their next call."""
        return sum(r.probe is not None for r in self._routes.values()) + len(self._looked - set(self._routes))

    def _switches(self) -> bool:
        """Whether any route leaves PyTorch's own convolution (what a step trial judges)."""
        return any(r.kind != "native" for r in self._routes.values())

    def busy_fractions(self) -> tuple[float, float]:
        """Probation's least busy shares (per route, pooled): ``TRIAL_BUSY_FRACTION`` while a step trial is still to
        judge the switches, else ``MIN_BUSY_FRACTION`` and ``MIN_NETWORK_BUSY_FRACTION``."""
        if self.trial_verdict is None and self._trial_possible():
            return TRIAL_BUSY_FRACTION, TRIAL_BUSY_FRACTION
        return MIN_BUSY_FRACTION, MIN_NETWORK_BUSY_FRACTION

    def deciding(self) -> int:
        """Call signatures still looking at the device or on probation, plus one while a step trial is under way
        or due (the blocks until the executor's routes are settled)."""
        due = self.trial is not None or (self.trial_verdict is None and self._trial_possible() and self._switches())
        return self._undecided() + due

    def _judged(self, verdict: str) -> None:
        """The step trial's verdict: the switches stay (:data:`KEEP`), go (:data:`DROP`), or, where it could not
        tell (:data:`UNCLEAR`), stay where probation's looks would have kept them without a trial."""
        self.trial_verdict, self.trial_ratio, self.trial = verdict, self.trial.ratio(), None
        log.info("algosel: step trial of %d switched signatures: %s (median block ratio %.4f)",
                 sum(r.kind != "native" for r in self._routes.values()), verdict, self.trial_ratio)  # fmt: skip
        if verdict == KEEP:
            return
        dropped = 0
        for route in self._routes.values():
            if route.kind == "native":
                continue
            if verdict == DROP:
                reason = TRIAL_SAME
            elif route.looked is None:  # exempt from probation, or nothing to look at: its decision stands
                continue
            elif route.looked.idle(MIN_BUSY_FRACTION):
                reason = DEVICE_IDLE
            elif self.looks.idle(MIN_NETWORK_BUSY_FRACTION):
                reason = NETWORK_IDLE
            else:
                continue
            _pass_through(route, reason)
            dropped += 1
        if dropped:
            self._renew_table()
            self._routes_changed = True

    def _renew_table(self) -> None:
        """A new dispatch table, so that routes made PyTorch's after they were held run as such: the old one keeps
        its slots (their call counts stay in :func:`stats`), and the next calls hold their signatures anew."""
        if self._table is None:
            return
        self._table, self.fast_run, self._slot_routes = None, None, {}
        if _global["executor"] is self:  # enable(): the process's table is this executor's ...
            set_global_executor(self)
        if getattr(_local, "executor", None) is self:  # ... and this thread's, inside a block
            set_local_executor(self)

    def stands_aside(self) -> bool:
        """Whether the next ``enabled()`` block leaves ``F.conv2d`` as PyTorch's own (see ``step_aside``); counts
        the block where it does."""
        if not self.step_aside or self._recorder is not None or self.quiet_blocks < STEP_ASIDE_AFTER_BLOCKS:
            return False
        if self._routes_changed:
            self._routes_changed = False
            self._all_native = bool(self._routes) and all(
                r.kind == "native" and r.probe is None for r in self._routes.values())  # fmt: skip
        if not self._all_native:
            return False
        if (self.blocks_aside + 1) % LOOK_AGAIN_EVERY_BLOCKS == 0:  # a routed block, to meet new signatures
            self.blocks_aside += 1
            return False
        self.blocks_aside += 1
        return True

    def _live_ok(self) -> bool:
        if self._live is None:
            from algosel.learn.models import live_available  # noqa: PLC0415

            self._live = live_available(self.selector)
        return self._live

    def native_module(self):
        """The compiled path's module, or ``None`` (not built, no GPU, or ``native=False``)."""
        if not self._native_checked:
            self._native_checked = True
            if self._native_wanted is not False:
                from algosel.runtime import native  # noqa: PLC0415

                self._native = native.load()
        return self._native

    def runtime_cache(self) -> RuntimeCache | None:
        if not self._cache_checked:
            self._cache_checked = True
            if self._cache_wanted is not False and torch.cuda.is_available():
                from algosel.runtime.native import cache_root  # noqa: PLC0415

                root = cache_root() if self._cache_wanted is True else self._cache_wanted
                self._cache = RuntimeCache(root, self._environment())
        return self._cache

    def _environment(self) -> dict[str, Any]:
        try:
            import cudnn  # noqa: PLC0415

            frontend = getattr(cudnn, "__version__", "?")
        except ImportError:
            frontend = "none"
        from algosel.version import __version__  # noqa: PLC0415

        return {
            "gpu_name": torch.cuda.get_device_name(),
            "cudnn": int(torch.backends.cudnn.version() or 0),
            "torch": torch.__version__,
            "cudnn_frontend": frontend,
            "model": self.selector.manifest.get("data_fingerprint", "?"),
            "algosel": __version__,
        }

    # ---------------------------------------------------------------------------------------- decisions
    def decide(self, problem: ConvProblem, device: torch.device) -> Decision:
        """What ``problem`` runs (see the module docstring); from the persistent cache where it has a decision made
        the same way."""
        if problem.dtype not in self._dtypes:
            return Decision(problem.key, "pytorch:default", "model", "dtype not covered")
        cache = self.runtime_cache() if device.type == "cuda" else None
        if cache is not None:
            hit = cache.get(problem.key)
            # A verifying executor trusts measurements and records only; a predicted decision is made again.
            if hit is not None and (not self.verify or hit.source in ("records", "measured")):
                return self._rejudge(problem, hit)
        decision = self._decide(problem, device)
        if cache is not None and decision.source in ("records", "measured", "predicted"):
            cache.put(decision)
        return decision

    def _decide(self, problem: ConvProblem, device: torch.device) -> Decision:
        sel = self.selector
        if sel.is_recorded(problem):
            rows = sel.catalogue.rows(problem.key) or []
            default_ms = sel.catalogue.time_ms(problem.key, "pytorch:default")
            if self.verify:  # the records are measurements of this GPU: the fastest recorded candidate
                times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows
                         if r.get("status") == "ok" and _finite(r.get("time_ms_median"))
                         and self._allowed(problem, r)}  # fmt: skip
                host_us = self._recorded_host_us(problem, list(times))
                cid = fastest(times, host_us)
                host_us = {c: host_us[c] for c in (cid, "pytorch:default") if c in host_us}
            else:
                cid = sel.choose(problem, self.max_workspace_bytes, top_k=1, live=False)[0].candidate_id
                times = {}
                for c in (cid, "pytorch:default"):
                    t = sel.catalogue.time_ms(problem.key, c)
                    if t is not None:
                        times[c] = t
                host_us = self._recorded_host_us(problem, [cid, "pytorch:default"])
            return self._judge(problem, cid, times, default_ms, "records", MIN_MEASURED_RATIO, host_us)
        live = device.type == "cuda" and self._live_ok()
        if self.verify and self.can_time(device):
            # The nearest recorded problem's list, each config built by name: a few ms, where querying cuDNN's
            # three lists live costs up to ~180 ms a problem (H200, benchmarks/runtime_costs.py).
            return self._measure(problem)
        # The model's shortlist from the nearest recorded problem's list, judged by its predicted times (the
        # calibrated gain estimate), where it has them. Only where these predict a gain worth a closer look is
        # cuDNN's live list of the problem ranked instead (where it can be queried): the query costs ~50 ms a
        # problem, which was 6.8 s of prediction mode's 7.3 s first pass of EfficientNet-B0 autocast (H200,
        # 2026-12-01), and it is paid again at every new input size of a network whose input varies.
        decision = self._predicted(problem, self._choices(problem, False, PREDICT_TOP_K))
        if live and decision.times_ms and worth_a_closer_look(decision.times_ms, self.min_gain_us):
            decision = self._predicted(problem, self._choices(problem, True, PREDICT_TOP_K))
        return decision

    def _predicted(self, problem: ConvProblem, choices) -> Decision:
        """The decision of the model's shortlist ``choices`` for an unrecorded problem, by their predicted times."""
        ids = [c.candidate_id for c in choices]
        predicted = self._predicted_times()
        if predicted is None:
            why = "predicted best" if ids[0] == "pytorch:default" else "no gain estimate for an unrecorded problem"
            return Decision(problem.key, "pytorch:default", "model", why)
        times = predicted(problem, list(dict.fromkeys([*ids, "pytorch:default"])))
        best = min(ids, key=lambda c: times.get(c, math.inf))
        return self._judge(problem, best, times, times.get("pytorch:default"), "predicted",
                           self.min_predicted_ratio(problem),
                           self._recorded_host_us(problem, [best, "pytorch:default"]))  # fmt: skip

    def min_predicted_ratio(self, problem: ConvProblem) -> float:
        """How much faster than PyTorch's default the model must predict a candidate of ``problem`` to switch: more
        where the problem lies far from the records (``NEAR_RECORDS_DISTANCE``)."""
        return MIN_PREDICTED_RATIO_FAR if self.far_from_records(problem) else MIN_PREDICTED_RATIO

    def far_from_records(self, problem: ConvProblem) -> bool:
        """Whether ``problem`` lies farther than ``NEAR_RECORDS_DISTANCE`` from every recorded problem of its kind:
        there the model's predicted times are extrapolations, and the nearest recorded problem's list may not be
        the problem's own (False for a selector that cannot tell)."""
        distance = getattr(self.selector, "records_distance", None)
        return distance is not None and distance(problem) > NEAR_RECORDS_DISTANCE

    def _rejudge(self, problem: ConvProblem, hit: Decision) -> Decision:
        """A cached decision under this executor's rule: the cache keeps the times it was made from, and another
        executor (or an earlier version of the rule) may have written it with another threshold. A switch is kept
        only if it still pays; a pass-through for a gain below the threshold is judged again with its fastest
        candidate."""
        times = hit.times_ms
        default_ms = times.get("pytorch:default")
        if default_ms is None:
            return hit
        if not hit.passes_through:
            cid = hit.candidate_id
        elif hit.reason == BELOW_THRESHOLD:
            others = {c: t for c, t in times.items() if c != "pytorch:default" and _finite(t)}
            if not others:
                return hit
            cid = min(others, key=others.get)
        else:
            return hit
        ratio = self.min_predicted_ratio(problem) if hit.source == "predicted" else MIN_MEASURED_RATIO
        host_us = hit.host_us if hit.source == "measured" else self._recorded_host_us(problem, [cid, "pytorch:default"])
        return self._judge(problem, cid, times, default_ms, hit.source, ratio, host_us)

    def _allowed(self, problem: ConvProblem, row: dict[str, Any]) -> bool:
        from algosel.learn.rules import allowed  # noqa: PLC0415

        return allowed(row, problem.direction, problem.dtype, self.selector.blocked, self.max_workspace_bytes)

    def _choices(self, problem: ConvProblem, live: bool, k: int, modes: tuple[str, ...] | None = None):
        """The model's top ``k`` for an unrecorded problem: cuDNN's live list ranked where it can be queried (of the
        heuristic ``modes``' lists, :meth:`_live_choices`), else the nearest recorded problem's list."""
        if not live:
            return self.selector.choose(problem, self.max_workspace_bytes, top_k=k, live=False)
        # stand-ins of _live_choices for the live list (tests, benchmarks) take (problem, k) where no modes are asked
        return self._live_choices(problem, k) if modes is None else self._live_choices(problem, k, modes)

    def _live_choices(self, problem: ConvProblem, k: int, modes: tuple[str, ...] | None = None):
        """The model's top ``k`` of cuDNN's live list for ``problem`` (with the offline candidates); ``modes``: of
        the heuristic modes' lists (default: A, B and FALLBACK)."""
        space = get_space("cudnn")
        try:
            cands = space.enumerate(problem, modes=modes)
        except CandidateError:
            cands = []
        finally:
            space.release(problem)
        rows = [candidate_row(c) for c in cands] + offline_rows(problem, self.selector.spaces)
        return self.selector.rank_rows(problem, rows, self.max_workspace_bytes)[:k]

    def _judge(self, problem: ConvProblem, cid: str, times: dict[str, float], default_ms: float | None, source: str,
               min_ratio: float, host_us: dict[str, float] | None = None) -> Decision:  # fmt: skip
        """Keep ``cid`` only where its gain over PyTorch's default pays what leaving PyTorch's path costs: the
        path's own host cost, and the host time per call the candidate takes over PyTorch's default where it was
        measured (``host_us``)."""
        host_us = dict(host_us or {})
        if cid == "pytorch:default":
            return Decision(problem.key, cid, source, "fastest", times, host_us)
        t = times.get(cid)
        if t is None or default_ms is None:
            why = "no time for the choice or the default"
            return Decision(problem.key, "pytorch:default", source, why, times, host_us)
        gain_us = 1e3 * (default_ms - t)
        overhead_us = self.overhead_us(problem, cid) + host_extra_us(host_us, cid)
        if gain_us < self.min_gain_us + overhead_us or default_ms < min_ratio * t:
            return Decision(problem.key, "pytorch:default", source, BELOW_THRESHOLD, times, host_us)
        return Decision(problem.key, cid, source, "", times, host_us)

    def _recorded_host_us(self, problem: ConvProblem, candidate_ids: list[str]) -> dict[str, float]:
        """The records' host time per call of ``candidate_ids`` on ``problem`` (or its nearest recorded problem);
        empty for a selector without them, or where nothing but PyTorch's default is asked."""
        host_us = getattr(self.selector, "host_us", None)
        if host_us is None or all(c == "pytorch:default" for c in candidate_ids):
            return {}
        return host_us(problem, candidate_ids)

    def overhead_us(self, problem: ConvProblem, candidate_id: str) -> float:
        """Host time per call that leaving PyTorch's path for ``candidate_id`` costs: nothing measurable for a GEMM
        lowering that is one matrix product (plain autograd ops) or a cuDNN plan on the compiled path (cheaper on the
        host than PyTorch's own call), the Python Function's cost otherwise."""
        if candidate_id.startswith("gemm:"):
            return 0.0 if _one_matrix_product(problem.directions()[0]) else PYTHON_PATH_OVERHEAD_US
        return 0.0 if self.native_module() is not None else PYTHON_PATH_OVERHEAD_US

    def _measure(self, problem: ConvProblem) -> Decision:
        """Time the model's top ``verify`` candidates and PyTorch's default once; keep the fastest correct one."""
        import time  # noqa: PLC0415

        t0 = time.perf_counter()
        ids, why = self.shortlist_to_time(problem)
        if why:
            return Decision(problem.key, "pytorch:default", "model", why)
        times, host_us = self._time_candidates(problem, ids)
        rest = self.rest_of_list_to_time(problem, ids, times.get("pytorch:default"))
        if rest:  # a long call: the rest of the list, PyTorch's default first again as the reference
            deadline_s = time.perf_counter() + VERIFY_REST_BUDGET_S
            more_times, more_host_us = self._time_candidates(problem, rest, deadline_s)
            times.update({c: t for c, t in more_times.items() if c != "pytorch:default"})
            host_us.update({c: h for c, h in more_host_us.items() if c != "pytorch:default"})
        self.measured_problems += 1
        self.planning_s += time.perf_counter() - t0
        default_ms = times.get("pytorch:default")
        return self._judge(problem, fastest(times, host_us), times, default_ms, "measured", MIN_MEASURED_RATIO,
                           host_us)  # fmt: skip

    def _time_candidates(self, problem: ConvProblem, ids: list[str], deadline_s: float | None = None
                         ) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
        """Median device time (ms) and host time per call (us) of PyTorch's default and ``ids`` on ``problem``, as
        the verifier measured them (candidates that failed, or not started by ``deadline_s``, are left out). A
        gradient's problem is timed on autograd's thread for the device: PyTorch keeps its cuDNN plans per thread
        (:mod:`algosel.runtime.autograd_thread`), and its default's plans built for the timing are then the ones the
        network's backward uses, not a second set."""
        pairs = []
        for cid in ["pytorch:default", *ids]:
            space_name, name = split_candidate_id(cid)
            space = get_space(space_name)
            pairs.append((space, space.candidate(name, problem.direction)))
        verifier = self._verifier()
        on_gpu = self._device is not None and self._device.type == "cuda"

        def measure():
            no_autocast = torch.autocast("cuda", enabled=False) if on_gpu else contextlib.nullcontext()
            with planning(), torch.no_grad(), no_autocast:
                return verifier.measure_candidates(problem, pairs, source="runtime", deadline_s=deadline_s)

        if problem.direction == "fwd" or not on_gpu:
            rows = measure()
        else:  # where the network's backward runs (the verifier's device: the current one), and builds its plans
            rows = on_autograd_thread(measure, torch.device("cuda", torch.cuda.current_device()))
        times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows if r["status"] == "ok"}
        host_us = {r["candidate_id"]: float(r["host_overhead_us"]) for r in rows
                   if r["status"] == "ok" and _finite(r.get("host_overhead_us"))}  # fmt: skip
        return times, host_us

    def rest_of_list_to_time(self, problem: ConvProblem, timed: list[str], default_ms: float | None) -> list[str]:
        """What verify mode times on ``problem`` after its shortlist ``timed``, where PyTorch's default measured
        ``default_ms`` a call: nothing under ``VERIFY_WHOLE_LIST_MS``; else the model's ranking of the lists of all
        three heuristic modes (``VERIFY_WHOLE_LIST_MODES``; the nearest recorded list where cuDNN cannot be asked)
        without the candidates timed, pruned as the shortlist is, up to ``VERIFY_LIST_MAX`` candidates in all, none
        compiled at build time (``RUNTIME_COMPILED_NOTE``: its plan build compiles a kernel); ``_measure`` starts
        none of them after ``VERIFY_REST_BUDGET_S``.

        A long call is where the model's ranking misses most and what it misses costs most: ConvNeXt-T's float32
        depthwise 7x7 weight gradients (NHWC, 0.74-2.3 ms a call by PyTorch's default; no records of their kind)
        have their fastest configs at ranks 2-4 of modes B's and FALLBACK's lists and in none of mode A's, where
        the shortlist (mode A's and FALLBACK's, ranked by a model that scores configs of mode A's or B's top 8
        only) held none faster than the default (H200, 2026-12-03, ``data/sweeps/h200-zoo-nhwc``). There the
        timing costs little beside the call itself, and a few such calls carry much of a step. PyTorch's benchmark
        mode times up to 10 configs on every problem (``torch.backends.cudnn.benchmark_limit``)."""
        if default_ms is None or default_ms < VERIFY_WHOLE_LIST_MS:
            return []
        use_live = self._live_ok()
        choices = self._choices(problem, use_live, VERIFY_LIST_MAX + 1, VERIFY_WHOLE_LIST_MODES)
        ids = [c.candidate_id for c in choices if c.candidate_id != "pytorch:default"
               and RUNTIME_COMPILED_NOTE not in c.notes.split(",")][:VERIFY_LIST_MAX]  # fmt: skip
        rest = [c for c in ids if c not in timed]
        predicted = self._predicted_times()
        if rest and predicted is not None:
            times = predicted(problem, [*rest, "pytorch:default"])
            limit_ms = self._max_predicted_ratio(problem) * times.get("pytorch:default", math.inf)
            rest = [c for c in rest if not _finite(times.get(c)) or times[c] <= limit_ms]
        return rest[: max(VERIFY_LIST_MAX - len(timed), 0)]

    def shortlist_to_time(self, problem: ConvProblem, gain_filter: bool = False, prune: bool = True,
                          live: bool | None = None) -> tuple[list[str], str]:  # fmt: skip
        """The candidates verify mode times on a new ``problem`` besides PyTorch's default, or none and why not: the
        model's top ``verify`` of cuDNN's live list of the problem (heuristic modes ``VERIFY_LIVE_MODES``, where it
        can be queried; ``live`` forces either list), whatever the predicted gain, pruned to those predicted no
        slower than the default (:func:`pruned_shortlist`; ``prune=False``: all of them), and nothing where the
        default is predicted too short to pay. ``gain_filter=True``: also nothing where the predicted gain is not
        worth timing (:func:`worth_a_closer_look`), as verify mode did near the records before.

        The model's predicted times miss what a problem the records lack gains. Far from the records the nearest
        recorded list may not be the problem's own: that of a grouped convolution (RegNet's, 4-49 groups, which no
        record holds) names configs that are not its own, and the model's predicted default was half the measured
        one (H200, float32 RegNetY-800MF: its 20-group 3x3 convolution's weight gradient, 404 us a call by PyTorch's
        default, 98 us by the live list's top 3, 404 us by the nearest list's). Near them the predicted gain missed
        ConvNeXt-T's: its float32 layers (b32) took 0.998 of the default's convolution time with the filter, 0.963
        without it. On 834 unrecorded problems swept on the H200 (the zoo's RegNetY, SqueezeNet and ConvNeXt layers
        in float32, ConvNeXt's also NHWC and float16, GoogLeNet's and MyNet's; ``python benchmarks/verify_far.py``,
        by the records; best 0.859 of the default's total time), the shortlists find 0.914 of it this way for 771
        problems timed, 0.905 with the rest of the list on long calls (:meth:`rest_of_list_to_time`), 0.931 with
        the filter and the nearest list near the records (553 timed), 0.953 with both everywhere (128). With the
        rest of the list, pruned at 1x the default's predicted time far from the records too
        (``VERIFY_MAX_PREDICTED_RATIO_FAR``): 0.926; at 3x: 0.905; unpruned: 0.904, but the slow candidates pruning
        skips made ConvNeXt-T's cold first pass (its float32
        depthwise convolutions' weight gradients: 0.3-2.3 ms a call) 4.3x as long (5.7 s, 0.64 of benchmark mode's
        tuning; H200, 2026-12-03). What the extra timing finds but a host-bound step cannot use, the step trial
        drops (:mod:`algosel.runtime.trial`)."""
        if self._too_short_to_pay(problem):
            return [], TOO_SHORT_TO_PAY
        use_live = (True if live is None else live) and self._live_ok()
        choices = self._choices(problem, use_live, self.verify + 1, VERIFY_LIVE_MODES)
        ids = [c.candidate_id for c in choices if c.candidate_id != "pytorch:default"][: self.verify]
        if not ids:
            return [], "predicted best"
        predicted = self._predicted_times() if (gain_filter or prune) else None
        if predicted is not None:
            times = predicted(problem, [*ids, "pytorch:default"])
            if gain_filter and not worth_a_closer_look(times, self.min_gain_us):
                return [], PREDICTED_GAIN_TOO_SMALL
            if prune:
                ids = pruned_shortlist(ids, times, self._max_predicted_ratio(problem))
        return ids, ""

    def _max_predicted_ratio(self, problem: ConvProblem) -> float:
        """How much slower than PyTorch's default the model may predict a candidate of ``problem`` for verify mode
        to time it: more where the problem lies far from the records."""
        return VERIFY_MAX_PREDICTED_RATIO_FAR if self.far_from_records(problem) else VERIFY_MAX_PREDICTED_RATIO

    def _predicted_times(self):
        """The model's predicted-times function (``Selector.predicted_time_ms``), or None: a model without a time
        model (trained before it, or with it turned off) has no gain estimate."""
        sel = self.selector
        return getattr(sel, "predicted_time_ms", None) if getattr(sel, "time_model", True) is not None else None

    def _too_short_to_pay(self, problem: ConvProblem) -> bool:
        """Whether the model predicts PyTorch's default on ``problem`` to take less than the least gain over
        ``VERIFY_SKIP_FACTOR`` (False without a time model)."""
        predicted = self._predicted_times()
        if predicted is None:
            return False
        default_ms = predicted(problem, ["pytorch:default"]).get("pytorch:default")
        return default_ms is not None and 1e3 * default_ms * VERIFY_SKIP_FACTOR < self.min_gain_us

    def _verifier(self):
        if self._sweeper is None:
            from algosel.measure.sweep import Sweeper  # noqa: PLC0415
            from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415

            # A small budget: a few repeats behind a blocked stream are enough to rank a shortlist. Candidates are
            # checked against PyTorch's default (listed first) under the caller's TF32 switches: an exact reference
            # and switches set otherwise each made PyTorch build a plan of its own per problem, a third of the cold
            # pass (EfficientNet-B0 autocast on the H200: 5.2 of 18.9 s).
            timer = CudaEventTimer(**VERIFY_TIMER)
            self._sweeper = Sweeper([], timer, {"env_id": "runtime"}, operand_sets=1, reference="first",
                                    math="caller", slow_build_s=VERIFY_SLOW_BUILD_S)  # fmt: skip
        return self._sweeper

    # ------------------------------------------------------------------------------------------- plans
    def plan(self, problem: ConvProblem, device: torch.device) -> _Plan:
        cached = self._plans.get(problem)
        if cached is None:
            with self._lock:
                cached = self._plans.get(problem)
                if cached is None:
                    cached = self._plans[problem] = self._make_plan(problem, device)
        return cached

    def _make_plan(self, problem: ConvProblem, device: torch.device) -> _Plan:
        decision = self._known.pop(problem, None) or self.decide(problem, device)
        if decision.passes_through:
            return _Plan(None, f"pytorch:{decision.reason or 'predicted best'}")
        plan = self._switch_plan(problem, device, decision)
        if plan.path in ("gemm", "cudnn"):
            plan.gain_us = decision.gain_us()
        return plan

    def _switch_plan(self, problem: ConvProblem, device: torch.device, decision: Decision) -> _Plan:
        """The plan that runs ``decision``'s candidate (PyTorch's path, with the reason, where it cannot)."""
        space_name, name = split_candidate_id(decision.candidate_id)
        if space_name == "cudnn" and device.type != "cuda":
            return _Plan(None, "pytorch:cudnn config needs a GPU")
        space = get_space(space_name)
        cand = space.candidate(name, problem.direction)
        cache = self.runtime_cache() if device.type == "cuda" else None
        ext = self.native_module() if device.type == "cuda" else None
        if space_name == "cudnn" and ext is not None and cache is not None:
            cached = cache.get_plan(problem.key, decision.candidate_id)
            if cached is not None:
                uids, blob = cached
                try:
                    return _Plan(None, "cudnn", self._load_native(ext, problem, blob, uids))
                except RuntimeError as exc:
                    log.warning("algosel: a cached plan of %s did not load (%s); building it again", problem.key, exc)
        try:
            runner = space.runner(problem, cand)
        except CandidateError as exc:
            _counts[f"fallback:build {exc.status}"] += 1
            return _Plan(None, "pytorch:chosen candidate did not build")
        if runner is None:
            return _Plan(None, "pytorch:predicted best")
        plan = _Plan(runner, space_name)
        blob = getattr(runner, "blob", None)
        if blob is not None and cache is not None:
            cache.put_plan(problem.key, decision.candidate_id, runner.uids, blob)
        if blob is not None and ext is not None:
            try:
                plan.native_id = self._load_native(ext, problem, blob, runner.uids)
            except RuntimeError as exc:
                log.warning("algosel: the compiled path cannot load the plan of %s (%s)", problem.key, exc)
        return plan

    def _load_native(self, ext, problem: ConvProblem, blob: bytes, uids: tuple[int, int, int]) -> int:
        """Load a plan into the compiled path; ``uids``: of its graph's x, w and y tensors."""
        role = OUTPUT_ROLE[problem.direction]
        like = empty_like_layout(getattr(problem, f"{role}_shape"), problem, "meta")
        return int(ext.load_plan(blob, *uids, ("fwd", "bwd_data", "bwd_filter").index(problem.direction),
                                 list(like.shape), list(like.stride()), torch.cuda.current_device()))  # fmt: skip

    def directions_of(self, problem: ConvProblem) -> dict[str, ConvProblem]:
        """The problem in each direction, built once (validating a problem costs microseconds per call)."""
        dirs = self._directions.get(problem)
        if dirs is None:
            dirs = self._directions[problem] = {p.direction: p for p in problem.directions()}
        return dirs

    def route(self, key: tuple, problem: ConvProblem, device: torch.device, grads: tuple[bool, bool]) -> _Route:
        """How calls with signature ``key`` run (see the module docstring). Memoised by ``key``, which the caller
        builds from the call's arguments without validating a problem."""
        route = self._routes.get(key)
        if route is not None:
            return route
        if self._device is None:
            self._device = device
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        dirs = self.directions_of(problem)
        # The forward, and each gradient the call's autograd will compute: (input, weight) requires_grad.
        directions = [problem] + [dirs[d] for d, g in zip(("bwd_data", "bwd_filter"), grads) if g]
        if capturing and any(p not in self._plans for p in directions):
            # Nothing is decided inside a CUDA graph capture (deciding may measure, which synchronizes).
            return _Route("native", None, ("pytorch:capturing",))
        verdicts = (
            {self._before_timing(p, device) for p in directions}
            if self.look_first and self.verify and self.probe_calls and key not in self._looked
            else set()
        )
        if LOOK in verdicts and EXEMPT not in verdicts:
            # PyTorch's own convolution while probation's looks decide whether timing could pay at all
            route = _Route("native", problem, (LOOKING,) * len(directions), probe=_Probe(), key=key)
            self._routes[key] = route
            self._routes_changed = True
            return route
        plans = [self.plan(p, device) for p in directions]
        if device.type == "cuda" and self.native_module() is not None:
            plans = compiled_plans(plans)
        reasons = tuple(p.path for p in plans)
        if all(p.runner is None and p.native_id < 0 for p in plans):
            route = _Route("native", problem, reasons)
        elif all(p.path == "gemm" for p in plans) and _one_matrix_product(problem):
            route = _Route("gemm", problem, reasons)
        elif all(p.path != "gemm" for p in plans) and all(p.native_id >= 0 or p.runner is None for p in plans):
            route = self._native_route(problem, plans, grads, reasons)
        else:
            route = _Route("function", problem, reasons)  # its reasons are not counted: run_direction counts
        if route.kind != "function":
            _counted_routes.append(route)
        if (route.kind != "native" and self.probe_calls and key not in self._looked
                and sum(p.gain_us for p in plans) < PROBATION_EXEMPT_GAIN_US):  # fmt: skip
            route.probe = _Probe()
        if self._recorder is not None and not self.selector.is_recorded(problem):
            route.unseen = self._recorder
        route.looked = self._looks_of.pop(key, None)  # timed after looking first: the looks that let it time
        self._routes[key] = route
        self._routes_changed = True
        return route

    def can_time(self, device: torch.device) -> bool:
        """Whether verify mode times candidates on ``device`` now (a GPU, outside a CUDA graph capture)."""
        return device.type == "cuda" and not torch.cuda.is_current_stream_capturing()

    def _before_timing(self, problem: ConvProblem, device: torch.device) -> str:
        """What ``look_first`` does for one direction of a new signature: :data:`LOOK` where deciding it would time
        its shortlist (undecided, neither recorded nor in the persistent cache as measured, with candidates worth
        timing, as :meth:`decide` and :meth:`_measure` would find); :data:`EXEMPT` where its known or predicted
        gain is one probation exempts (``PROBATION_EXEMPT_GAIN_US``: its switch is made at once, so the signature
        does not look first); ``""`` otherwise."""
        if not self.can_time(device) or problem in self._plans or problem.dtype not in self._dtypes:
            return ""
        cache = self.runtime_cache() if device.type == "cuda" else None
        hit = cache.get(problem.key) if cache is not None else None
        if self.selector.is_recorded(problem) or (hit is not None and hit.source in ("records", "measured")):
            known = self._known.get(problem)
            if known is None:  # from the records or the cache: nothing is timed
                known = self._known[problem] = self.decide(problem, device)
            return EXEMPT if known.gain_us() >= PROBATION_EXEMPT_GAIN_US else ""
        # the nearest recorded list, also far from the records: a query of cuDNN's live list (a few ms for
        # VERIFY_LIVE_MODES, milliseconds more per problem than the nearest list) is not paid by a signature whose
        # looks find the device idle
        ids = self.shortlist_to_time(problem, live=False)[0]
        predicted = self._predicted_times()
        if ids and predicted is not None:
            times = predicted(problem, [*ids, "pytorch:default"])
            default_ms = times.get("pytorch:default", math.nan)
            if 1e3 * (default_ms - min(times.get(c, math.inf) for c in ids)) >= PROBATION_EXEMPT_GAIN_US:
                return EXEMPT
        return LOOK if ids else ""

    def _native_route(self, problem: ConvProblem, plans: list[_Plan], grads, reasons) -> _Route:
        ext = self.native_module()
        ids = iter(p.native_id for p in plans)
        fwd = next(ids)
        dgrad = next(ids) if grads[0] else -1
        wgrad = next(ids) if grads[1] else -1
        args = conv_args(problem)
        rid = ext.register_route(fwd, dgrad, wgrad, list(args["stride"]), list(args["padding"]),
                                 list(args["dilation"]), args["groups"], problem.layout == "nhwc")  # fmt: skip
        return _Route("compiled", problem, reasons, native_route=int(rid), run_native=ext.run_route)


def _count(name: str, value: Any, unit: str) -> int:
    """``value`` where it is a non-negative integer (not a bool); else a ValueError naming ``name`` and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer ({unit}), got {value!r}")
    return value


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


# ------------------------------------------------------------------------------------ the Python Function
def run_direction(ex: Executor, problem: ConvProblem, ops: Operands, fallback: Callable[[], torch.Tensor],
                  bias: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Run ``problem``'s plan on ``ops`` (whose output slot is allocated here for a cuDNN plan, which writes into
    it); ``bias`` is added (fused into the GEMM where the lowering allows). ``fallback`` (PyTorch, bias included)
    runs on pass-through and on failure."""
    plan = ex._plans.get(problem)
    if plan is None:
        with planning(), torch.no_grad():
            plan = ex.plan(problem, ops.x.device if ops.x is not None else ops.y.device)
    if plan.runner is None and plan.native_id >= 0:  # a plan loaded from the cache into the compiled path only
        _counts[plan.path] += 1
        out = ex.native_module().run_plan(plan.native_id, *ops.inputs(problem.direction))
        return out if bias is None else out + bias.view(1, -1, 1, 1)
    if plan.runner is None:
        _counts[plan.path] += 1
        return fallback()
    try:
        if plan.path == "gemm":  # the GEMM runner adds the bias inside its product where the lowering allows
            out = plan.runner.run(ops, bias)
        else:
            role = OUTPUT_ROLE[problem.direction]
            like = ops.y if ops.y is not None else ops.x
            setattr(ops, role, empty_like_layout(getattr(problem, f"{role}_shape"), problem, like.device))
            out = plan.runner.run(ops)
            if bias is not None:
                out = out + bias.view(1, -1, 1, 1)
        _counts[plan.path] += 1
        return out
    except Exception as exc:  # noqa: BLE001 - any failure of a chosen candidate falls back, counted
        _counts[f"fallback:{type(exc).__name__}"] += 1
        log.warning("algosel: %s failed on %s (%s); falling back to PyTorch", plan.path, problem.key, exc)
        ex._plans[problem] = _Plan(None, "pytorch:chosen candidate failed")
        return fallback()


class Conv2dFunction(torch.autograd.Function):
    """The hooked convolution on the Python path: each direction through its own plan."""

    @staticmethod
    def forward(ctx, x, weight, bias, problem: ConvProblem, ex: Executor):
        mf = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
        x = x.contiguous(memory_format=mf)
        weight = weight.contiguous(memory_format=mf)
        ctx.save_for_backward(x, weight)
        ctx.problem, ctx.ex, ctx.has_bias = problem, ex, bias is not None
        out = run_direction(ex, problem, Operands(x, weight, None),
                            lambda: original_conv2d(x, weight, bias, **conv_args(problem)), bias)  # fmt: skip
        # A view returned from a custom Function cannot be modified in place (an in-place activation after the
        # conv raised in EfficientNet and SqueezeNet): return the output as a tensor of its own, sharing storage.
        return out.detach() if out._is_view() else out

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        problem, ex = ctx.problem, ctx.ex
        mf = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
        grad_y = grad_y.contiguous(memory_format=mf)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dirs = ex.directions_of(problem)
        if torch.is_grad_enabled():
            # A differentiable backward was asked for (double backward): PyTorch's own, which has one.
            gx, gw, _ = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, *(list(v) for v in (conv_args(problem)["stride"],
                                                            conv_args(problem)["padding"],
                                                            conv_args(problem)["dilation"])),
                False, [0, 0], problem.groups, [need_x, need_w, False])  # fmt: skip
        else:
            gx = gw = None
            if need_x:
                p = dirs["bwd_data"]
                gx = run_direction(ex, p, Operands(None, weight, grad_y),
                                   lambda: pytorch_direction(p, x, weight, grad_y))  # fmt: skip
            if need_w:
                p = dirs["bwd_filter"]
                gw = run_direction(ex, p, Operands(x, None, grad_y),
                                   lambda: pytorch_direction(p, x, weight, grad_y))  # fmt: skip
        gb = grad_y.sum(dim=(0, 2, 3)) if need_b and ctx.has_bias else None
        return gx, gw, gb, None, None


# ------------------------------------------------------------------------------------------ one call
# The TF32 and determinism switches are part of every call's key. Their public properties cost 0.5 and 1 us a read
# (Python descriptors over these C getters), a fifth of the routing's per-call cost: read the getters where torch
# has them.
_cudnn_tf32: Callable[[], bool] = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32
)
_matmul_tf32: Callable[[], bool] = getattr(torch._C, "_get_cublas_allow_tf32", None) or (
    lambda: torch.backends.cuda.matmul.allow_tf32
)
_cudnn_deterministic: Callable[[], bool] = getattr(torch._C, "_get_cudnn_deterministic", None) or (
    lambda: torch.backends.cudnn.deterministic
)
_deterministic_algorithms: Callable[[], bool] = getattr(torch._C, "_get_deterministic_algorithms", None) or (
    torch.are_deterministic_algorithms_enabled
)


def deterministic_asked() -> bool:
    """Whether the process asked PyTorch for deterministic convolutions (``torch.backends.cudnn.deterministic`` or
    ``torch.use_deterministic_algorithms``): then every convolution is PyTorch's own, which honours it (the
    candidates' determinism is not recorded for every engine config)."""
    return _cudnn_deterministic() or _deterministic_algorithms()


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def run_conv(ex: Executor, x, w, b, stride, padding, dilation, groups) -> torch.Tensor:
    """One ``conv2d`` call through ``ex`` (see the module docstring)."""
    device_type = "cuda" if x.is_cuda else x.device.type  # is_cuda: a fifth of the cost of building a device
    # Under autocast, conv2d runs in autocast's dtype (float32 inputs are cast below F.conv2d).
    cast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    grads = (x.requires_grad, w.requires_grad) if torch.is_grad_enabled() else (False, False)
    # Everything the route depends on, read without validating anything: the steady-state cost of a call is
    # building this key and one dict lookup.
    key = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device,
           None if b is None else (b.shape, b.dtype, b.device), stride, padding, dilation, groups, grads, cast,
           _cudnn_tf32(), _matmul_tf32(), deterministic_asked())  # fmt: skip
    try:
        route = ex._routes.get(key)
    except TypeError:  # list arguments (F.conv2d accepts them)
        stride, padding, dilation = _hashable(stride), _hashable(padding), _hashable(dilation)
        key = key[:9] + (stride, padding, dilation) + key[12:]
        route = ex._routes.get(key)
    if route is None:
        route = _first_call(ex, key, x, w, b, stride, padding, dilation, groups, cast, grads)
        if route is None:  # counted by _first_call
            return original_conv2d(x, w, b, stride, padding, dilation, groups)
        if ex._routes.get(key) is route:  # memoised (not a decision deferred by a capture)
            ex.hold_in_table(route, x, w, b, stride, padding, dilation, groups)
    if route.unseen is not None:
        route.unseen.add(route.problem, 1)
    if route.probe is not None:
        probe = route.probe
        if not _probe(ex, route, x):
            out = original_conv2d(x, w, b, stride, padding, dilation, groups)
            if out.requires_grad:  # and look again when its gradient comes back
                out.register_hook(_look_back(ex, probe))
            return out
        ex.hold_in_table(route, x, w, b, stride, padding, dilation, groups)
    kind = route.kind
    if kind == "native":
        route.calls += 1
        # PyTorch's native path gets the uncast tensors, so that autocast casts them itself and reuses its cache
        # of cast weights.
        return original_conv2d(x, w, b, stride, padding, dilation, groups)
    if cast is not None:
        x, w = x.to(cast), w.to(cast)
        b = b.to(cast) if b is not None else None
    with torch.autocast(device_type, enabled=False):
        if kind == "compiled":
            route.calls += 1
            return route.run_native(route.native_route, x, w, b)
        if kind == "gemm":
            route.calls += 1
            return gemm_conv(route.problem, x, w, b)
        return Conv2dFunction.apply(x, w, b, route.problem, ex)


def _probe(ex: Executor, route: _Route, x: torch.Tensor) -> bool:
    """One call of a route on probation: look at the device; True where the route runs as decided from this call
    on (its switch made, or dropped for PyTorch's path), False where this call takes PyTorch's own path."""
    probe = route.probe
    busy = _look_at(x)
    if busy is None and not x.is_cuda:  # nothing to look at (CPU): the decision stands
        route.probe = None
        return _time_next(ex, route) if route.key is not None else True
    _count_look(ex, probe, busy, backward=False)
    if probe.calls < ex.probe_calls:
        _counts[PROBING] += len(route.reasons)
        return False
    route.probe, route.looked = None, probe
    ex._routes_changed = True
    per_route, pooled = ex.busy_fractions()
    idle = (DEVICE_IDLE if probe.idle(per_route)
            else NETWORK_IDLE if ex.looks.idle(pooled) else None)  # fmt: skip
    if route.key is not None:  # it looked before timing: untimed where idle, timed at the next call where busy
        if idle is None:
            return _time_next(ex, route)
        route.key = None
        route.reasons = (f"pytorch:{idle}",) * len(route.reasons)
        _counted_routes.append(route)
        return True
    if idle is not None:
        _pass_through(route, idle)
    return True


def _pass_through(route: _Route, reason: str) -> None:
    """A switched route becomes PyTorch's own convolution, each direction for ``reason``. Its plans stay loaded: the
    compiled path never frees one (a backward queued by an earlier call may still run it), and the same problem met
    in another signature reuses them."""
    if route.kind == "function":  # counted per direction by run_direction until now
        _counted_routes.append(route)
    route.kind = "native"
    route.reasons = (f"pytorch:{reason}",) * len(route.reasons)


def _look_back(ex: Executor, probe: _Probe) -> Callable[[torch.Tensor], None]:
    """The gradient hook of a call on probation: a look at the device when the call's output gradient is ready,
    just before autograd enqueues the call's backward directions (which the route's switch also changes)."""

    def look(grad: torch.Tensor) -> None:
        _count_look(ex, probe, _look_at(grad), backward=True)

    return look


def _look_at(t: torch.Tensor) -> bool | None:
    """:func:`device_busy` for probation (None inside a CUDA graph capture, where a stream query is not allowed)."""
    return None if t.is_cuda and torch.cuda.is_current_stream_capturing() else device_busy(t)


def _count_look(ex: Executor, probe: _Probe, busy: bool | None, backward: bool) -> None:
    """Count a look (``busy`` None: it could not tell) into the route's looks and the executor's pooled ones, unless
    it comes within ``PROBE_SETTLE_S`` of planning."""
    if busy is None or time.perf_counter() - _planned_at_s[0] < PROBE_SETTLE_S:
        return
    for looks in (probe, ex.looks):
        if backward:
            looks.back_calls += 1
            looks.back_busy += busy
        else:
            looks.calls += 1
            looks.busy += busy


def _time_next(ex: Executor, route: _Route) -> bool:
    """A signature that looked before timing found the device busy: forgotten, so that its next call plans it
    again, timing its shortlist (and switching without a second probation); this call takes PyTorch's path."""
    _counts[PROBING] += len(route.reasons)
    ex._looked.add(route.key)
    ex._looks_of[route.key] = route.looked
    if ex._routes.get(route.key) is route:
        del ex._routes[route.key]
    route.key = None
    return False


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def call_problem(
    x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, groups, compute_dtype: torch.dtype
) -> tuple[ConvProblem | None, str]:
    """The forward problem of a conv2d call computed in ``compute_dtype``, or None and why the hook does not
    handle it."""
    if deterministic_asked():
        return None, "pytorch:deterministic algorithms asked for"
    dtype = dtype_of(str(compute_dtype).removeprefix("torch."), torch.backends.cudnn.allow_tf32)
    if dtype is None:
        return None, "pytorch:dtype not covered"
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    r, s = w.shape[2], w.shape[3]
    if isinstance(padding, str):
        if padding == "valid":
            ph = pw = 0
        elif padding == "same":
            if (dh * (r - 1)) % 2 or (dw * (s - 1)) % 2 or (sh, sw) != (1, 1):
                return None, "pytorch:asymmetric same padding"
            ph, pw = dh * (r - 1) // 2, dw * (s - 1) // 2
        else:
            return None, "pytorch:unknown padding"
    else:
        ph, pw = _pair(padding)
    nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    try:
        p = ConvProblem(n=x.shape[0], c=x.shape[1], k=w.shape[0], h=x.shape[2], w=x.shape[3], r=r, s=s,
                        pad_h=ph, pad_w=pw, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, groups=groups,
                        dtype=dtype, layout="nhwc" if nhwc else "nchw")  # fmt: skip
    except ValueError as exc:
        return None, f"pytorch:invalid problem ({exc})"
    return p, ""


def _first_call(ex: Executor, key, x, w, b, stride, padding, dilation, groups, cast, grads) -> _Route | None:
    """Validate a new call signature and plan it; ``None`` (counted) when PyTorch should take it unmemoised."""
    # Anything PyTorch would reject goes to PyTorch, so the user gets PyTorch's own error.
    if (x.dim() != 4 or w.dim() != 4 or x.device != w.device or (b is not None and b.device != x.device)
            or x.shape[1] != w.shape[1] * groups or not x.is_floating_point()):  # fmt: skip
        _counts["pytorch:not a plain 4-D conv"] += 1
        return None

    def compute_dtype(t: torch.Tensor) -> torch.dtype:
        return cast if cast is not None and t.dtype == torch.float32 else t.dtype

    dtype = compute_dtype(x)
    if dtype != compute_dtype(w) or (b is not None and compute_dtype(b) != dtype):
        _counts["pytorch:mixed dtypes"] += 1
        return None
    problem, reason = call_problem(x, w, stride, padding, dilation, groups, dtype)
    if problem is None:
        route = _Route("native", None, (reason,))
        _counted_routes.append(route)
        ex._routes[key] = route
        return route
    # Deciding may measure candidates: outside the caller's autocast and autograd, and with the hook suspended in
    # this thread (the measurements' own convolutions are PyTorch's).
    with planning(), torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        try:
            return ex.route(key, problem, x.device, grads)
        finally:
            _planned_at_s[0] = time.perf_counter()


# ------------------------------------------------------------------------------------------- switches
# Which executor routes F.conv2d: a thread's own (``enabled()``, ``patch_model``) over the process's (``enable()``).
_local = threading.local()
_global: dict[str, Executor | None] = {"executor": None}
_shared: dict[tuple, Executor] = {}
_shared_lock = threading.Lock()


#: The compiled path's module once its ``conv2d`` routes ``F.conv2d`` (:func:`install_dispatch`): its current table
#: mirrors the switches below.
_dispatch: dict[str, Any] = {"module": None}


def _table_of(ex: Executor | None | bool):
    return ex._dispatch_table() if ex else None


def set_local_executor(ex: Executor | None | bool) -> None:
    """This thread's executor (None: the process's applies; False: suspended while it plans)."""
    _local.executor = ex
    module = _dispatch["module"]
    if module is not None:
        module.set_thread_table(_table_of(ex), ex is not None)


def set_global_executor(ex: Executor | None) -> None:
    """The process's executor (:func:`algosel.runtime.hook.enable`)."""
    _global["executor"] = ex
    module = _dispatch["module"]
    if module is not None:
        module.set_global_table(_table_of(ex))


def install_dispatch(
    python_conv2d: Callable[..., torch.Tensor], unheld_conv2d: Callable[..., torch.Tensor]
) -> Callable[..., torch.Tensor]:
    """What ``F.conv2d`` becomes while the hook is on: the compiled path's ``conv2d`` where it loads (a call whose
    signature the current executor's table holds costs no Python; every other goes to ``unheld_conv2d``, the Python
    hook less its own look at the table), else ``python_conv2d`` itself. Under ``torch.compile``, dynamo traces
    ``python_conv2d`` in its place."""
    module = _dispatch["module"]
    if module is None:
        from algosel.runtime import native  # noqa: PLC0415

        ext = native.load()
        if ext is None or not hasattr(ext, "conv2d"):
            return python_conv2d
        ext.set_fallback(unheld_conv2d)
        try:
            torch._dynamo.substitute_in_graph(ext.conv2d, skip_signature_check=True)(python_conv2d)
        except (AttributeError, TypeError, ValueError) as exc:  # no polyfills in this torch: compile would break
            log.warning("algosel: torch.compile cannot trace the compiled path's conv2d (%s); using Python's", exc)
            return python_conv2d
        _dispatch["module"] = module = ext
        # Switches made before: this thread's and the process's.
        set_global_executor(_global["executor"])
        set_local_executor(getattr(_local, "executor", None))
    return module.conv2d


def current_executor() -> Executor | None:
    """The executor routing this thread's convolutions now, or ``None`` (PyTorch's own path)."""
    ex = getattr(_local, "executor", None)
    if ex is None:
        ex = _global["executor"]
    return ex or None  # False: suspended while this thread plans


@contextlib.contextmanager
def planning():
    """Suspend the hook in this thread while it plans: the convolutions of a measurement are PyTorch's own."""
    previous = getattr(_local, "executor", None)
    set_local_executor(False)
    try:
        yield
    finally:
        set_local_executor(previous)


def shared_executor(**config: Any) -> Executor:
    """The process's executor of this configuration (created once): its decisions, plans and routes outlive every
    ``enabled()`` block, so a context manager around each training step plans nothing twice."""
    key = tuple(sorted((k, id(v) if isinstance(v, Selector) else v) for k, v in config.items()))
    ex = _shared.get(key)
    if ex is None:
        with _shared_lock:
            ex = _shared.get(key)
            if ex is None:
                ex = _shared[key] = Executor(**config)
    return ex


#: Executors by a small integer, for the custom ops of torch.compile (whose arguments cannot be Python objects).
_by_id: list[Executor] = []


def executor_id(ex: Executor) -> int:
    """``ex``'s number for :func:`executor_by_id` (assigned on first use)."""
    for i, known in enumerate(_by_id):
        if known is ex:
            return i
    with _shared_lock:
        _by_id.append(ex)
        return len(_by_id) - 1


def executor_by_id(number: int) -> Executor | None:
    """The executor numbered ``number`` (``-1``: :func:`current_executor`)."""
    return current_executor() if number < 0 else _by_id[number]
