"""How long a selector takes to answer a problem it has not seen, on one CPU core.

``benchmarks/predict_speed.py`` prints these numbers for a saved model; ``algosel train`` uses the same
measurement, on the same problems, to refuse a tuned setting whose first prediction is slower than
:data:`TUNING_BUDGET_US` (:data:`PREDICT_BUDGET_US` less a margin for the measurement's spread; a prediction is
paid on the host whenever a framework meets a new shape). A first prediction is what the runtime
asks for a new shape: the choice (:meth:`Selector.choose`, with its predicted time where the model has a time
model) and the predicted time of PyTorch's default beside it (where the model covers PyTorch's default).

``algosel train`` reads the thread's CPU time (:func:`time.thread_time`), not the wall clock: on a machine shared
with other work, the wall clock also counts the time the process waited for a core.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from algosel.learn import selector as selector_module
from algosel.learn.selector import DEFAULT_ID, ExtrapolationWarning
from algosel.measure.grid import GridSpec, sample_grid
from algosel.problem import ConvProblem

if TYPE_CHECKING:  # for annotations only
    from algosel.learn.selector import Selector

#: The longest first prediction (median, one core) a shipped model may take, in microseconds (the selector issue's
#: requirement, as ``benchmarks/predict_speed.py`` measures it: wall clock).
PREDICT_BUDGET_US = 1000.0
#: What ``algosel train`` holds a tuned setting to: the budget less a margin for the measurement's spread. On this
#: project's 2-core CPU machine the benchmark's wall-clock median of one model was 5-12% above train's CPU-time
#: median of it (255 leaves x 150 trees: 901 us in train, 981-1012 us in three benchmark runs), and one model's
#: benchmark median moved by up to 10% between runs; a setting measured at the budget itself is over it as often
#: as not.
TUNING_BUDGET_US = 0.85 * PREDICT_BUDGET_US
#: Grid shapes (x 3 directions) timed: the benchmark's problems, so that train and benchmark time the same ones.
SPEED_SHAPES = 300
#: The seed of the problems timed: not the sweep's (0), so none of them is recorded.
SPEED_SEED = 7


@contextlib.contextmanager
def one_core() -> Iterator[None]:
    """Run the block pinned to one CPU core (where the OS allows it); the affinity is restored afterwards."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def new_problems(count: int = SPEED_SHAPES, seed: int = SPEED_SEED) -> list[ConvProblem]:
    """``count`` grid shapes of ``seed`` in each of the three directions (``3 * count`` problems)."""
    return [q for p in sample_grid(GridSpec(count=count, seed=seed)) for q in p.directions()]


def first_prediction_us(
    selector: Selector, problems: list[ConvProblem], clock: Callable[[], float] = time.perf_counter
) -> np.ndarray:
    """Microseconds of a first prediction (see the module docstring; offline, ``top_k=1``) of each problem after
    the first, read on ``clock`` (seconds).

    The first problem is answered once beforehand and not counted (LightGBM's first call sets up buffers). The
    problems must be new to ``selector``: one already memoised would be timed as a repeat.
    """
    if not problems:
        return np.empty(0)
    # A legacy-algorithm model has no PyTorch default to compare with: its choice's time alone.
    timed = selector.time_model is not None and "pytorch" in selector.spaces

    def answer(p: ConvProblem) -> None:
        selector.choose(p, live=False)
        if timed:
            selector.predicted_time_ms(p, [DEFAULT_ID])

    # Grid shapes beyond the recorded sizes are answered as extrapolations: not worth a warning here, and the
    # one warning a process gets is left for the user's own problems.
    warned = selector_module._extrapolation_warned  # noqa: SLF001 - this module times the selector
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        try:
            answer(problems[0])
            out = []
            for p in problems[1:]:
                t = clock()
                answer(p)
                out.append(1e6 * (clock() - t))
        finally:
            selector_module._extrapolation_warned = warned  # noqa: SLF001
    return np.array(out)
