"""Pick by the ranker or by the time model? Cross-validated on the training shapes (CPU).

    python benchmarks/rank_vs_time.py [--data data/sweeps/h200] [--params-from models/h200-cudnn91900]
        [--folds 3] [--out results.json]

The selector ranks a problem's candidates with a LambdaRank model and predicts each candidate's time with a
regression beside it (docs/selector.md, "Predicted times"). Either could choose: this scores both, and blends of
them, by k-fold cross-validation grouped by shape on the training shapes of ``--data`` (the held-out test shapes of
``algosel.learn.evaluate.is_test_shape`` are left out, as training leaves them out). Per fold it fits the ranker
with ``--params-from``'s hyperparameters and the time model with its defaults, and picks per problem on the
model's shortlist:

- ``ranker``: the highest-scored candidate (what the shipped selector does);
- ``time``: the lowest predicted time;
- ``time_in_top3``: the lowest predicted time among the ranker's top 3;
- ``blend_w``: the highest of ``z(ranker score) - w * z(log2 predicted time)``, both standardised per problem.

Prints geomean of best, within 5% and total-time ratio per picker, out of fold, and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import refit_inputs

BLEND_WEIGHTS = (0.5, 1.0, 2.0)


def _per_problem_z(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` standardised within each problem (0 where a problem's values are all equal)."""
    s = pd.Series(values)
    g = s.groupby(keys)
    std = g.transform("std").fillna(0.0).to_numpy()
    return np.where(std > 0, (values - g.transform("mean").to_numpy()) / np.where(std > 0, std, 1.0), 0.0)


def _top3_mask(keys: np.ndarray, scores: np.ndarray, shortlist: np.ndarray) -> np.ndarray:
    """Rows among the three highest-scored shortlisted candidates of their problem."""
    d = pd.DataFrame({"k": keys, "s": np.where(shortlist, scores, -np.inf)})
    rank = d.groupby("k")["s"].rank(ascending=False, method="first").to_numpy()
    return shortlist & (rank <= 3)


def fold_scores(train, test, params) -> dict[str, np.ndarray]:
    """Each picker's scores (higher is picked) on the rows of ``test``, from models fitted on ``train``."""
    from algosel.learn.ranker import Ranker  # noqa: PLC0415
    from algosel.learn.rules import shortlist_mask  # noqa: PLC0415
    from algosel.learn.time_model import TimeModel, TimeModelParams  # noqa: PLC0415

    ranker = Ranker(params).fit_prepared(train.data, train.X)
    timer = TimeModel(TimeModelParams(num_threads=params.num_threads)).fit_prepared(train.data, train.X)
    rank_score = ranker.score(test.X)
    log2_ms = timer.predict_log2_ms(test.X, num_threads=params.num_threads)
    keys = test.data["problem_key"].to_numpy()
    shortlist = shortlist_mask(test.data)
    out = {"ranker": rank_score, "time": -log2_ms}
    out["time_in_top3"] = np.where(_top3_mask(keys, rank_score, shortlist), -log2_ms, -np.inf)
    z_rank, z_time = _per_problem_z(keys, rank_score), _per_problem_z(keys, log2_ms)
    for w in BLEND_WEIGHTS:
        out[f"blend_{w:g}"] = z_rank - w * z_time
    return out


def run(data: list[str], params_from: str, folds: int, threads: int) -> dict[str, dict[str, float]]:
    """Out-of-fold geomean of best, within 5% and total-time ratio of every picker (see the module docstring)."""
    from algosel.learn.artifact import tuned_params  # noqa: PLC0415
    from algosel.learn.evaluate import Prepared, is_test_shape, pick_times, selector_table, summary  # noqa: PLC0415
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    params = tuned_params(params_from, RankerParams(num_threads=threads))
    frame, envs = load_records(*data)
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    train_prep = prep.rows(~is_test_shape(prep.shape))
    fold_of = {s: zlib.crc32(s.encode()) % folds for s in np.unique(train_prep.shape)}
    fold = np.array([fold_of[s] for s in train_prep.shape])
    picks: dict[str, list[pd.DataFrame]] = {}
    for f in range(folds):
        t0 = time.perf_counter()
        test = train_prep.rows(fold == f)
        for name, scores in fold_scores(train_prep.rows(fold != f), test, params).items():
            picks.setdefault(name, []).append(pick_times(test.data, scores))
        print(f"fold {f + 1}/{folds}: {test.data['problem_key'].nunique()} problems, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)  # fmt: skip
    return {name: summary(selector_table(frame, pd.concat(parts))) for name, parts in picks.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    refit_inputs.add_arguments(p)
    p.add_argument("--out", help="write the result as JSON here")
    args = p.parse_args(argv)
    error = refit_inputs.problem("rank_vs_time.py", args)
    if error:
        print(error, file=sys.stderr)
        return 2
    result = run(args.data, args.params_from, args.folds, args.threads)
    print(f"{'picker':<14} {'problems':>8} {'geomean':>8} {'within5':>8} {'total':>7}")
    for name, r in result.items():
        print(f"{name:<14} {r['problems']:>8} {r['geomean']:>8.4f} {r['within_5pct']:>8.1%} "
              f"{r['total_time_ratio']:>7.4f}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"data": args.data, "params_from": args.params_from,
                                              "folds": args.folds, "pickers": result}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
