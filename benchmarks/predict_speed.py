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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--compile", action="store_true", help="compile the model's trees into the cache first")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    import algosel
    from algosel.learn.compiled import attach_cached, compile_selector, detach
    from algosel.learn.models import default_model_dir
    from algosel.learn.selector import Selector
    from algosel.learn.speed import (
        estimated_first_prediction_us,
        first_prediction_nodes,
        first_prediction_us,
        new_problems,
    )

    model_dir = Path(args.model) if args.model else default_model_dir()
    if args.compile:
        t0 = time.perf_counter()
        compile_selector(Selector.load(model_dir, force=True))
        print(f"compiled the trees in {time.perf_counter() - t0:.1f} s (cached: later loads take them)")
    problems = new_problems(args.problems)

    def fresh(compiled: bool) -> Selector:
        # A fresh selector each time: the candidate lists of the problems are not cached in it.
        selector = Selector.load(model_dir, force=True)
        if not compiled:
            detach(selector)
        return selector

    t0 = time.perf_counter()
    paths = ["lightgbm", "compiled"] if attach_cached(Selector.load(model_dir, force=True)) else ["lightgbm"]
    load_s = time.perf_counter() - t0
    print(f"model {model_dir} loaded in {load_s:.2f} s; paths: {', '.join(paths)}")
    for path in paths:
        selector = fresh(path == "compiled")
        first_us = first_prediction_us(selector, problems)
        default_us = []
        if selector.time_model is not None:
            other = fresh(path == "compiled")
            other.predicted_time_ms(problems[0], [DEFAULT_ID])
            for q in problems[1:]:
                t = time.perf_counter()
                other.predicted_time_ms(q, [DEFAULT_ID])
                default_us.append(1e6 * (time.perf_counter() - t))
        p = problems[1]
        algosel.predict(p, model=selector, live=False)
        n = 200_000
        again = functools.partial(algosel.predict, p, model=selector, live=False)
        repeated_us = 1e6 * min(timeit.repeat(again, number=n, repeat=5)) / n
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
        print(f"[{path}] repeated prediction (memoised): {repeated_us:.2f} us")
    # What `algosel train` holds a setting to: the estimate from the tree nodes walked (a fresh selector again).
    nodes = first_prediction_nodes(fresh(False), problems)
    print(
        f"estimated as `algosel train` estimates it: {estimated_first_prediction_us(nodes):.0f} us "
        f"({nodes['total']:.0f} tree nodes per problem: ranker {nodes['ranker']:.0f} over "
        f"{nodes['ranker_rows']:.1f} candidates, time model {nodes['time_model']:.0f})"
    )
    manifest = json.loads((model_dir / "manifest.json").read_text())
    print(
        f"final fit on the training set: {manifest.get('final_fit_seconds')} s "
        f"({manifest['params'].get('num_threads')} threads; `algosel train` total {manifest.get('total_seconds')} s)"
    )


if __name__ == "__main__":
    main()
