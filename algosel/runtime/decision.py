"""One decision's life: what a problem (one direction of one convolution) runs, the words it is told in, and the one
place it is written down.

A call signature goes through these stages, each named where it happens (docs/architecture.md draws them):

1. **met**: its first call reaches the executor (:meth:`~algosel.runtime.executor.Executor.route`);
2. **loading**: the model is still loading beside the step: the call is PyTorch's own, not memoised
   (:attr:`Passing.LOADING`; :mod:`~algosel.runtime.loading`);
3. **deciding**: its problems are decided beside the step (:attr:`Passing.DECIDING`; :mod:`~algosel.runtime.aside`)
   or on the step's thread; verify mode first looks at the device (:attr:`Passing.LOOKING`);
4. **decided**: each problem has a :class:`Decision`, from the records, the persistent cache, the rule (passed,
   switched untimed, or timed) or verify mode's timing (:mod:`~algosel.runtime.decisions`), written by :func:`keep`;
5. **on probation**: a switching route's first calls look whether the device is busy (:attr:`Passing.PROBING`;
   :mod:`~algosel.runtime.probation`): its switch is made, or dropped (:attr:`Reason.DEVICE_IDLE`,
   :attr:`Reason.NETWORK_IDLE`);
6. **on trial**: the step trial keeps the executor's switches where its blocks run faster with them, else drops them
   (:attr:`Reason.TRIAL_SAME`; :mod:`~algosel.runtime.trial`, :mod:`~algosel.runtime.blocks`).

Candidate ids and sources are :data:`algosel.candidates.DEFAULT_ID` and :class:`algosel.candidates.DecisionSource`;
a pass-through's reason is a :class:`Reason` (or the rule's own sentence, which says its expected saving). Members
of both enums are the strings the persistent cache and the statistics hold, so a decision read back compares equal.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from algosel.candidates import DEFAULT_ID, DecisionSource


class Reason(str, enum.Enum):
    """Why a problem runs PyTorch's own path (or what a switch kept says of itself)."""

    FASTEST = "fastest"  # PyTorch's default measured or recorded fastest
    BELOW_THRESHOLD = "gain below the threshold"  # a gain that does not pay (judged again when read back)
    #: A switch kept because the step is GPU-bound that the host-bound bound (``min_gain_us``) would not keep: a process
    #: reading it from the cache judges it by the same rule.
    DEVICE_BOUND = "kept for a GPU-bound step"
    TOO_SHORT_TO_PAY = "predicted shorter than the least gain"  # verify mode times nothing so short
    NO_TIMES = "no time for the choice or the default"
    DTYPE_NOT_COVERED = "dtype not covered"
    NO_CALIBRATION = "no calibrated time model"  # the rule cannot weigh a prediction
    PREDICTED_BEST = "predicted best"  # the model ranks PyTorch's default first
    NEAR_SIZE_DEFAULT = "default fastest at a near size of the layer"
    #: Decided beside the step where the rule would time candidates: the step's thread decides it again, timing them.
    TIME_ON_STEP = "to be timed on the step's thread"
    DEVICE_IDLE = "device idle at the call"  # probation: the route's calls found the device idle
    NETWORK_IDLE = "device idle at most of the network's calls"  # ... or most of the executor's
    TRIAL_SAME = "step as fast without the switches"  # the step trial

    def __str__(self) -> str:
        return self.value


class Passing(str, enum.Enum):
    """What a call that runs PyTorch's own convolution while its signature is not settled counts as (statistics)."""

    LOADING = "pytorch:loading the model"
    DECIDING = "pytorch:deciding"
    LOOKING = "pytorch:looking before timing"
    PROBING = "pytorch:probing the device"

    def __str__(self) -> str:
        return self.value


@dataclass
class Decision:
    """What the runtime runs for one problem (one direction of one convolution)."""

    problem: str  # problem key
    candidate_id: str  # DEFAULT_ID for PyTorch's own path
    source: str  # a DecisionSource: "records", "measured" (timed here), "predicted" (the model's times) or "model"
    reason: str = ""  # why PyTorch's own path, where it is (a Reason, or the rule's sentence)
    times_ms: dict[str, float] = field(default_factory=dict)  # per candidate, measured or predicted
    host_us: dict[str, float] = field(default_factory=dict)  # host time per call, measured (records or here)
    #: Who made it: ``"hook"`` (the executor) or ``"predict"`` (``algosel.predict(verify=k)``, for any framework:
    #: ``candidate_id`` is then the fastest measured, a failed candidate's time ``inf``). Either reads the other's.
    by: str = "hook"

    @property
    def passes_through(self) -> bool:
        return self.candidate_id == DEFAULT_ID

    def gain_us(self) -> float:
        """Device time per call the chosen candidate saves over PyTorch's default by ``times_ms`` (0 where either
        time is unknown)."""
        t, t_default = self.times_ms.get(self.candidate_id), self.times_ms.get(DEFAULT_ID)
        if t is None or t_default is None or math.isnan(t) or math.isnan(t_default):
            return 0.0
        return max(0.0, 1e3 * (t_default - t))


#: Sources worth keeping: a decision of the model's list alone is made again at no cost.
KEPT_SOURCES = (DecisionSource.RECORDS, DecisionSource.MEASURED, DecisionSource.PREDICTED)


def keep(cache: Any, decision: Decision) -> bool:
    """Write ``decision`` into the persistent ``cache`` (None: none): the one place a decision is written, for the
    hook's executors and ``algosel.predict(verify=k)`` alike. Returns whether it was kept."""
    if cache is None or decision.source not in KEPT_SOURCES:
        return False
    cache.put(decision)
    return True
