"""The decision rule: for a problem the records lack, the action of largest expected net saving.

The actions: pass through (PyTorch's own convolution, value 0); switch to one of the model's top candidates untimed;
time the model's top ``k`` and PyTorch's default and keep the fastest. Each action's value is

    expected saving per call (ms) x expected calls still to come - what it costs now (ms)

The saving is expected over the time model's *calibrated* error (:mod:`algosel.learn.calibration`): the held-out
errors of PyTorch's default's predicted time and of each ranked candidate's predicted speed-up, one row per held-out
problem of the problem's family and distance from the records. A row is one possible truth: the default really takes
``d * 2**e_default`` and candidate ``r`` is really ``(d / c_r) * 2**e_speedup[r]`` times faster. So

- an untimed switch to ``r`` saves ``mean over rows of (true default - true candidate - route host cost)``: it can
  lose, and only a prediction whose error leaves the gain positive on average switches;
- timing the top ``k`` saves ``mean over rows of max(0, best of the k's savings)``: the measurement keeps the default
  where no candidate wins, so its saving is never negative; it costs ``k`` plan builds and ``k + 1`` timings.

What a call costs comes from :class:`Costs` (measured, :class:`~algosel.runtime.policy.SwitchPolicy`'s fields); the
expected calls from :mod:`algosel.runtime.recurrence`. Nothing here has state: the functions are pure, and tested
against hand-computed values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from algosel.candidates import DEFAULT_ID

if TYPE_CHECKING:  # (importing the hook loads no model library)
    from algosel.learn.calibration import ErrorSamples

PASS, SWITCH, TIME = "pass", "switch", "time"
#: The runtime's least share of error rows in which an untimed switch saves time: every one, so that only a switch no
#: held-out error reverses is made untimed (fully connected mode's GEMM). Not a tunable: the runtime's promise (never
#: slower than the default) where timing is not worth its cost. At 0.95 the replay's untimed switches made 5 of 14
#: networks' steady steps 1-5% slower than the default (float32 pointwise weight gradients whose default ran 2-4x
#: faster than predicted; benchmarks/replay.py).
UNTIMED_WIN_SHARE = 1.0


@dataclass(frozen=True)
class Costs:
    """What deciding costs, measured (docs/hook.md, "The rule"): milliseconds, except ``route_host_us``."""

    #: Building one cuDNN plan for a candidate (2-14 ms on the H200, 2026-12-04; a GEMM lowering builds nothing).
    plan_build_ms: float = 10.0
    #: Timing one candidate besides its own device time: warm-up, synchronisation, the timer's fixed part.
    timing_overhead_ms: float = 1.0
    #: Runs of a candidate a timing makes (the timer's repeats plus its warm-up).
    timing_runs: int = 6
    #: Host time per call a switched route costs over PyTorch's own (0 on the compiled path).
    route_host_us: float = 0.0


@dataclass(frozen=True)
class Action:
    """What the rule does with one problem: ``kind`` (:data:`PASS`, :data:`SWITCH` or :data:`TIME`), the candidates
    it switches to (one) or times (``k``, best predicted first), and its expected net value in ms."""

    kind: str
    candidates: tuple[str, ...] = ()
    value_ms: float = 0.0
    expected_calls: float = 0.0

    @property
    def reason(self) -> str:
        """What a pass-through or a switch says in the statistics."""
        if self.kind == PASS:
            return "expected saving below its cost"
        return f"expected saving {self.value_ms:.3g} ms over {self.expected_calls:.3g} calls"


def savings_ms(predicted_ms: Mapping[str, float], ranked: Sequence[str], errors: ErrorSamples,
               route_host_us: float = 0.0) -> np.ndarray:  # fmt: skip
    """Per error row (one possible truth) and ranked candidate: the device time per call the candidate saves over
    PyTorch's default, less the route's host cost; rows x candidates (NaN where the calibration has no error for that
    rank: a candidate past the ranks it measured takes the last rank's)."""
    d = predicted_ms[DEFAULT_ID]
    true_default = d * np.exp2(errors.default)[:, None]
    cols = []
    for r, cid in enumerate(ranked):
        e = errors.speedup[:, min(r, errors.speedup.shape[1] - 1)]
        speedup = (d / predicted_ms[cid]) * np.exp2(e)
        cols.append(true_default[:, 0] * (1.0 - 1.0 / speedup))
    return np.stack(cols, axis=1) - route_host_us / 1e3


def timing_cost_ms(predicted_ms: Mapping[str, float], timed: Sequence[str], costs: Costs) -> float:
    """What timing ``timed`` and PyTorch's default costs: a plan build per candidate, and each one's runs."""
    device_ms = sum(predicted_ms[c] for c in [*timed, DEFAULT_ID])
    builds_ms = len(timed) * costs.plan_build_ms
    return builds_ms + (len(timed) + 1) * costs.timing_overhead_ms + costs.timing_runs * device_ms


def decide(predicted_ms: Mapping[str, float], ranked: Sequence[str], errors: ErrorSamples, expected_calls: float,
           costs: Costs, max_k: int = 3, can_time: bool = True, can_switch: bool = True,
           min_win_share: float = 0.0) -> Action:  # fmt: skip
    """The action of largest expected net value for one problem.

    Parameters
    ----------
    predicted_ms : mapping
        Predicted device time per call of PyTorch's default (``DEFAULT_ID``) and of each id of ``ranked``.
    ranked : sequence of str
        The model's candidates, best first (PyTorch's default left out).
    errors : ErrorSamples
        The calibration's rows for the problem's group.
    expected_calls : float
        Calls of the problem still to come.
    costs : Costs
    max_k : int
        Most candidates a timing takes.
    can_time, can_switch : bool
        Whether timing (a GPU that can time, the user's consent) and untimed switches are allowed.
    min_win_share : float
        Least share of the error rows in which an untimed switch must save time: a noise bound that keeps the
        runtime's promise (never slower than the default) where the calibration's tails are thin.
    """
    ranked = [c for c in ranked if c != DEFAULT_ID and _finite(predicted_ms.get(c))]
    if not ranked or not _finite(predicted_ms.get(DEFAULT_ID)) or not len(errors) or expected_calls <= 0:
        return Action(PASS, expected_calls=expected_calls)
    saving = savings_ms(predicted_ms, ranked, errors, costs.route_host_us)
    best = Action(PASS, expected_calls=expected_calls)
    if can_switch:
        mean = np.nanmean(saving, axis=0)
        r = int(np.nanargmax(mean))
        value = expected_calls * float(mean[r]) - costs.plan_build_ms * _builds(ranked[r])
        wins = float(np.nanmean(saving[:, r] > 0))
        if value > best.value_ms and wins >= min_win_share:
            best = Action(SWITCH, (ranked[r],), value, expected_calls)
    if can_time:
        for k in range(1, min(max_k, len(ranked)) + 1):
            kept = np.nanmax(np.maximum(saving[:, :k], 0.0), axis=1)
            value = expected_calls * float(np.nanmean(kept)) - timing_cost_ms(predicted_ms, ranked[:k], costs)
            if value > best.value_ms:
                best = Action(TIME, tuple(ranked[:k]), value, expected_calls)
    return best


def _builds(candidate_id: str) -> int:
    """Plans a switch builds: one for a cuDNN engine config, none for a GEMM lowering."""
    return 0 if candidate_id.startswith("gemm:") else 1


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0
