"""How long a selector takes to answer a problem it has not seen, on one CPU core.

A first prediction is what the runtime asks for a new shape: the choice (:meth:`Selector.choose`, with its
predicted time where the model has a time model) and the predicted time of PyTorch's default beside it (where the
model covers PyTorch's default). It must stay under :data:`PREDICT_BUDGET_US` (the selector issue's requirement; a
prediction is paid on the host whenever a framework meets a new shape).

Two numbers:

- :func:`first_prediction_us` times it (``benchmarks/predict_speed.py`` prints the median for a saved model);
- :func:`estimated_first_prediction_us` estimates it from the work that differs between tuned settings, the tree
  nodes the ranker and the time model walk for the benchmark's problems (:func:`first_prediction_nodes`), at a
  fixed cost plus a cost per node (:data:`FIXED_US`, :data:`NS_PER_NODE`). ``algosel train`` holds every tuned
  setting to the budget by this estimate, not by a stopwatch: on the shared 2-core machine where the shipped
  model is trained, one setting's timed median moved between 760 and 1,110 us from one quarter of an hour to the
  next, and three runs of the same ``algosel train`` command chose three different settings (127 leaves x 150
  trees, 255 x 150, 31 x 150). The estimate depends only on the model and the problems, so a command makes the
  same model wherever it runs.

:data:`FIXED_US` and :data:`NS_PER_NODE` are a least-squares line through the timed medians (thread CPU time, one
core, the smaller of three interleaved runs: a busy neighbour only ever slows a run) of seven ranker settings with
the shipped time model, 31 to 255 leaves and 150 to 600 trees (12,530 to 36,756 nodes; residuals within 80 us),
measured on that machine on 2026-12-01.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import lightgbm as lgb
import numpy as np

from algosel.candidates import DEFAULT_ID
from algosel.learn.extrapolation import ExtrapolationWarning, extrapolation_warnings_scope
from algosel.measure.grid import GridSpec, sample_grid
from algosel.problem import ConvProblem

if TYPE_CHECKING:  # for annotations only
    from algosel.learn.selector import Selector

#: The longest first prediction (median, one core) a model may take, in microseconds.
PREDICT_BUDGET_US = 1000.0
#: The cost of a first prediction outside the trees (candidate list, feature rows, LightGBM's calls), in us ...
FIXED_US = 368.0
#: ... and per tree node walked (see the module docstring).
NS_PER_NODE = 30.5


@dataclass(frozen=True)
class LatencyLine:
    """A first prediction's estimated time on one core: ``fixed_us`` plus ``ns_per_node`` per tree node walked."""

    fixed_us: float
    ns_per_node: float

    def estimate_us(self, nodes: float) -> float:
        """The estimate for ``nodes`` tree nodes walked per problem."""
        return self.fixed_us + self.ns_per_node * float(nodes) / 1000.0


#: Where the trees go through LightGBM (the line of the module docstring).
LIGHTGBM_LINE = LatencyLine(FIXED_US, NS_PER_NODE)
#: Where the trees are compiled (:mod:`algosel.learn.compiled`): the line through two models' timed medians on the
#: compiled path (``benchmarks/predict_speed.py``, one core of the 2-core machine, 2026-12-06): the shipped 127 x 150
#: model, 15,487 nodes per problem, 503 us, and a 255 x 600 ranker with the same time model, 57,977 nodes, 1,065 us.
#: Two points, on a shared machine: a rougher line than LightGBM's seven.
COMPILED_LINE = LatencyLine(298.0, 13.2)
#: The lines by the name ``algosel train --trees`` takes.
LATENCY_LINES: dict[str, LatencyLine] = {"lightgbm": LIGHTGBM_LINE, "compiled": COMPILED_LINE}
#: Grid shapes (x 3 directions) of the benchmark and the estimate.
SPEED_SHAPES = 300
#: The seed of those shapes: not the sweep's (0), so none of them is recorded.
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
    with warnings.catch_warnings(), extrapolation_warnings_scope(fresh=False):
        warnings.simplefilter("ignore", ExtrapolationWarning)
        answer(problems[0])
        out = []
        for p in problems[1:]:
            t = clock()
            answer(p)
            out.append(1e6 * (clock() - t))
    return np.array(out)


def leaf_depths(booster: lgb.Booster) -> np.ndarray:
    """Per tree (rows) and leaf index (columns): the number of decisions from the root to the leaf (0 past a tree's
    last leaf, and for a tree of one leaf)."""
    trees = booster.dump_model()["tree_info"]
    out = np.zeros((len(trees), max((t["num_leaves"] for t in trees), default=1)), dtype=np.int64)
    for i, tree in enumerate(trees):
        stack = [(tree["tree_structure"], 0)]
        while stack:
            node, depth = stack.pop()
            if "left_child" in node:
                stack += [(node["left_child"], depth + 1), (node["right_child"], depth + 1)]
            else:
                out[i, node.get("leaf_index", 0)] = depth
    return out


def nodes_walked(booster: lgb.Booster, X: np.ndarray, depths: np.ndarray | None = None) -> np.ndarray:
    """The decisions a prediction of each row of ``X`` takes over all of the booster's trees."""
    X = np.asarray(X, dtype=np.float64)
    if not len(X):
        return np.zeros(0)
    depths = leaf_depths(booster) if depths is None else depths
    leaves = np.asarray(booster.predict(X, pred_leaf=True, num_threads=1), dtype=np.int64).reshape(len(X), -1)
    return depths[np.arange(depths.shape[0])[None, :], leaves].sum(axis=1).astype(np.float64)


def first_prediction_nodes(selector: Selector, problems: list[ConvProblem]) -> dict[str, float]:
    """Mean tree nodes a first prediction (as :func:`first_prediction_us` makes it) walks per problem: ``ranker``,
    ``time_model`` (0 without one) and ``total``; and ``ranker_rows``, the candidates scored per problem.

    The problems must be new to ``selector`` (answered here, they are memoised afterwards)."""
    ranker_rows: list[np.ndarray] = []
    time_rows: list[np.ndarray] = []
    ranker, time_model = selector.ranker, selector.time_model
    # Record what is scored, through instance attributes that shadow the methods for the duration.
    score = ranker.score
    ranker.score = lambda X: (ranker_rows.append(np.array(X)), score(X))[1]  # type: ignore[method-assign]
    if time_model is not None:
        predict_ms = time_model.predict_ms
        time_model.predict_ms = lambda X: (time_rows.append(np.array(X)), predict_ms(X))[1]  # type: ignore
    try:
        first_prediction_us(selector, problems)
    finally:
        del ranker.score
        if time_model is not None:
            del time_model.predict_ms
    count = max(1, len(problems))
    r = float(nodes_walked(ranker.booster_, np.vstack(ranker_rows)).sum()) / count if ranker_rows else 0.0
    t = (
        float(nodes_walked(time_model.booster_, np.vstack(time_rows)).sum()) / count
        if time_model is not None and time_rows
        else 0.0
    )
    rows = float(sum(len(x) for x in ranker_rows)) / count
    return {"ranker": r, "time_model": t, "total": r + t, "ranker_rows": rows}


def estimated_first_prediction_us(nodes: dict[str, float] | float, line: LatencyLine = LIGHTGBM_LINE) -> float:
    """The first prediction's estimated time on one core (by default :data:`FIXED_US` + :data:`NS_PER_NODE` per node,
    the trees through LightGBM; :data:`COMPILED_LINE` where they are compiled) for :func:`first_prediction_nodes`'s
    count (or its ``total``)."""
    total = nodes["total"] if isinstance(nodes, dict) else float(nodes)
    return line.estimate_us(total)
