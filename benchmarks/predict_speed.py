"""How fast ``algosel.predict`` answers, on one CPU core.

    python benchmarks/predict_speed.py [--model models/h200-cudnn91900] [--problems 300]

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
import json
import os
import statistics
import time
import timeit
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--problems", type=int, default=300)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    import algosel
    from algosel.learn.models import default_model_dir
    from algosel.learn.selector import Selector
    from algosel.learn.speed import (
        estimated_first_prediction_us,
        first_prediction_nodes,
        first_prediction_us,
        new_problems,
    )

    model_dir = Path(args.model) if args.model else default_model_dir()
    t0 = time.perf_counter()
    selector = Selector.load(model_dir, force=True)
    load_s = time.perf_counter() - t0
    problems = new_problems(args.problems)
    first_us = first_prediction_us(selector, problems)
    default_us = []
    if selector.time_model is not None:
        # A fresh selector: the candidate lists of the problems above are not cached in it.
        fresh = Selector.load(model_dir, force=True)
        fresh.predicted_time_ms(problems[0], ["pytorch:default"])
        for q in problems[1:]:
            t = time.perf_counter()
            fresh.predicted_time_ms(q, ["pytorch:default"])
            default_us.append(1e6 * (time.perf_counter() - t))
    # What `algosel train` holds a setting to: the estimate from the tree nodes walked (a fresh selector again).
    nodes = first_prediction_nodes(Selector.load(model_dir, force=True), problems)
    p = problems[1]
    algosel.predict(p, model=selector, live=False)
    n = 200_000
    repeated_us = (
        1e6 * min(timeit.repeat(lambda: algosel.predict(p, model=selector, live=False), number=n, repeat=5)) / n
    )
    manifest = json.loads((model_dir / "manifest.json").read_text())
    print(f"model {model_dir} loaded in {load_s:.2f} s")
    print(
        f"first prediction, new problem (n={len(first_us)}): median {statistics.median(first_us):.0f} us, "
        f"p95 {np.percentile(first_us, 95):.0f} us" + ("" if selector.time_model is not None else " (no time model)")
    )
    if default_us:
        print(
            f"predicted time of PyTorch's default, new problem: median {statistics.median(default_us):.0f} us, "
            f"p95 {np.percentile(default_us, 95):.0f} us"
        )
    print(
        f"estimated as `algosel train` estimates it: {estimated_first_prediction_us(nodes):.0f} us "
        f"({nodes['total']:.0f} tree nodes per problem: ranker {nodes['ranker']:.0f} over "
        f"{nodes['ranker_rows']:.1f} candidates, time model {nodes['time_model']:.0f})"
    )
    print(f"repeated prediction (memoised): {repeated_us:.2f} us")
    print(
        f"final fit on the training set: {manifest.get('final_fit_seconds')} s "
        f"({manifest['params'].get('num_threads')} threads; `algosel train` total {manifest.get('total_seconds')} s)"
    )


if __name__ == "__main__":
    main()
