"""How fast ``algosel.predict`` answers, on one CPU core.

    python benchmarks/predict_speed.py [--model models/joint-h100-h200-cudnn91900] [--problems 300] [--compile]

Both paths where this machine has compiled trees of the model (``algosel compile --model M``, or ``--compile`` here,
which compiles them into the cache first; :mod:`algosel.learn.compiled`): the trees through LightGBM, then as
native code. Without lleaves, or without cached compiled trees, the LightGBM path alone.

- first prediction for a new problem: ``--problems`` grid shapes (seed 7, not the sweep's seed) in every
  direction, each predicted once with the memo empty (offline: candidates from the nearest recorded problem,
  which is the path that costs most without cuDNN's own enumeration), ranking and, where the model has a time
  model, the predicted time of the choice (:func:`algosel.learn.speed.first_prediction_us`, the measurement
  ``algosel train`` holds against its latency budget);
- the predicted time of PyTorch's default for a new problem (``Selector.predicted_time_ms``), as the runtime
  asks it beside the choice;
- the estimate ``algosel train`` holds a tuned setting to (:func:`algosel.learn.speed.estimated_first_prediction_us`,
  from the tree nodes the first predictions walk);
- repeated prediction: the same problem again (memoised), timed with ``timeit``;
- the model's final fit time on the full training set, as ``algosel train`` measured it (manifest).

Prints medians and 95th percentiles in microseconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
import timeit
from pathlib import Path

import numpy as np

from algosel.candidates import DEFAULT_ID


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--compile", action="store_true", help="compile the model's trees into the cache first")
    return parser.parse_args()


def compile_trees(model_dir: Path) -> None:
    """Compile the model's trees into the cache (later loads take them)."""
    from algosel.learn.compiled import compile_selector
    from algosel.learn.selector import Selector

    t0 = time.perf_counter()
    compile_selector(Selector.load(model_dir, force=True))
    print(f"compiled the trees in {time.perf_counter() - t0:.1f} s (cached: later loads take them)")


def fresh_selector(model_dir: Path, compiled: bool):
    """A fresh selector each time: the candidate lists of the problems are not cached in it."""
    from algosel.learn.compiled import detach
    from algosel.learn.selector import Selector

    selector = Selector.load(model_dir, force=True)
    if not compiled:
        detach(selector)
    return selector


def prediction_paths(model_dir: Path) -> list[str]:
    """The paths this machine has for the model (the compiled one where its trees are cached); prints the load."""
    from algosel.learn.compiled import attach_cached
    from algosel.learn.selector import Selector

    t0 = time.perf_counter()
    paths = ["lightgbm", "compiled"] if attach_cached(Selector.load(model_dir, force=True)) else ["lightgbm"]
    load_s = time.perf_counter() - t0
    print(f"model {model_dir} loaded in {load_s:.2f} s; paths: {', '.join(paths)}")
    return paths


def default_time_us(model_dir: Path, compiled: bool, problems: list) -> list[float]:
    """Microseconds of each predicted time of PyTorch's default for a new problem (after the first problem's)."""
    other = fresh_selector(model_dir, compiled)
    other.predicted_time_ms(problems[0], [DEFAULT_ID])
    times = []
    for q in problems[1:]:
        t = time.perf_counter()
        other.predicted_time_ms(q, [DEFAULT_ID])
        times.append(1e6 * (time.perf_counter() - t))
    return times


def repeated_us(selector, problem) -> float:
    """Microseconds of a prediction of ``problem`` again (memoised), the best of five ``timeit`` runs."""
    import algosel

    algosel.predict(problem, model=selector, live=False)
    n = 200_000
    again = functools.partial(algosel.predict, problem, model=selector, live=False)
    return 1e6 * min(timeit.repeat(again, number=n, repeat=5)) / n


def time_path(path: str, model_dir: Path, problems: list) -> None:
    """Print the first, the default's and the repeated prediction's times of one path (``lightgbm``, ``compiled``)."""
    from algosel.learn.speed import first_prediction_us

    selector = fresh_selector(model_dir, path == "compiled")
    first_us = first_prediction_us(selector, problems)
    default_us = default_time_us(model_dir, path == "compiled", problems) if selector.time_model is not None else []
    again_us = repeated_us(selector, problems[1])
    print(
        f"[{path}] first prediction, new problem (n={len(first_us)}): median {statistics.median(first_us):.0f} "
        f"us, p95 {np.percentile(first_us, 95):.0f} us"
        + ("" if selector.time_model is not None else " (no time model)")
    )
    if default_us:
        print(
            f"[{path}] predicted time of PyTorch's default, new problem: median "
            f"{statistics.median(default_us):.0f} us, p95 {np.percentile(default_us, 95):.0f} us"
        )
    print(f"[{path}] repeated prediction (memoised): {again_us:.2f} us")


def print_estimate(model_dir: Path, problems: list) -> None:
    """What `algosel train` holds a setting to: the estimate from the tree nodes walked (a fresh selector again)."""
    from algosel.learn.speed import estimated_first_prediction_us, first_prediction_nodes

    nodes = first_prediction_nodes(fresh_selector(model_dir, False), problems)
    print(
        f"estimated as `algosel train` estimates it: {estimated_first_prediction_us(nodes):.0f} us "
        f"({nodes['total']:.0f} tree nodes per problem: ranker {nodes['ranker']:.0f} over "
        f"{nodes['ranker_rows']:.1f} candidates, time model {nodes['time_model']:.0f})"
    )


def print_final_fit(model_dir: Path) -> None:
    """The model's final fit time on the full training set, as its manifest records it."""
    manifest = json.loads((model_dir / "manifest.json").read_text())
    print(
        f"final fit on the training set: {manifest.get('final_fit_seconds')} s "
        f"({manifest['params'].get('num_threads')} threads; `algosel train` total {manifest.get('total_seconds')} s)"
    )


def main() -> None:
    args = parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from algosel.learn.models import default_model_dir
    from algosel.learn.speed import new_problems

    model_dir = Path(args.model) if args.model else default_model_dir()
    if args.compile:
        compile_trees(model_dir)
    problems = new_problems(args.problems)
    for path in prediction_paths(model_dir):
        time_path(path, model_dir, problems)
    print_estimate(model_dir, problems)
    print_final_fit(model_dir)


if __name__ == "__main__":
    main()
