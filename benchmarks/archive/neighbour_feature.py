"""Whether the nearest training problem's measured times help the ranker, scored on the held-out shapes (CPU).

    python benchmarks/neighbour_feature.py [--data data/sweeps/h200] [--trees 150] [--leaves 127]

A runtime that meets a problem its records lack can look at the nearest recorded problem of its kind (the
catalogue's ``nearest``: the least sum of |log2 ratio| over the shape fields). This asks whether what that
problem measured, given to the ranker as features, picks better than the features alone: per candidate, log2 of
its time over the best on the nearest training problem (a failure counts as 64x; NaN where that problem's list
lacks it), its rank there, and the distance to that problem. A training problem's nearest is another training
problem (never itself), a held-out problem's the nearest training problem, so that no held-out measurement is seen.

Both rankers are fit with the same LambdaRank settings (the shipped model's by default) on the training shapes'
shortlisted rows and scored as ``algosel evaluate`` scores the held-out problems: geomean of the pick over the best,
share within 5%, total time.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from sklearn.neighbors import NearestNeighbors

#: The added columns, in order.
NEIGHBOUR_FEATURES = ("nearest_log2_ratio", "nearest_rank", "nearest_distance")
#: log2 of the ratio a failed candidate counts as (64x: the ranker's relevance gives it nothing).
FAILED_LOG2_RATIO = 6.0


def neighbour_columns(prep, test: np.ndarray) -> np.ndarray:
    """Rows of :data:`NEIGHBOUR_FEATURES` for every row of ``prep`` (an :class:`~algosel.learn.evaluate.Prepared`),
    the nearest problem taken among the training problems (``~test``) of the row's kind, other than its own."""
    from algosel.problem import ConvProblem
    from algosel.records.catalogue import _position, problem_kind

    data = prep.data
    keys, cands = data["problem_key"].to_numpy(), data["candidate_id"].to_numpy()
    ratio = np.log2(np.clip(data["ratio"].to_numpy(dtype=float), 1.0, 2.0**FAILED_LOG2_RATIO))
    measured: dict[str, dict[str, float]] = {}
    for k, c, v in zip(keys, cands, ratio):
        measured.setdefault(k, {})[c] = float(v)
    ranks = {k: {c: i for i, c in enumerate(sorted(d, key=d.get))} for k, d in measured.items()}
    is_test = dict(zip(keys, test))
    problems = {k: ConvProblem.from_key(k) for k in measured}
    buckets: dict[tuple, list[str]] = {}
    for k, p in problems.items():
        if not is_test[k]:
            buckets.setdefault(problem_kind(p), []).append(k)
    # The catalogue's distance (the sum of |log2 ratio| over the shape fields) is the Manhattan metric on these
    # positions: one neighbour index per kind.
    index = {kind: NearestNeighbors(metric="manhattan").fit(np.vstack([_position(problems[k]) for k in ks]))
             for kind, ks in buckets.items()}  # fmt: skip
    nearest: dict[str, tuple[str | None, float]] = {}
    for k, p in problems.items():
        kind = problem_kind(p)
        keys_of_kind = buckets.get(kind, [])
        own = 0 if is_test[k] else 1  # a training problem is in the index: it asks for one more, never itself
        if len(keys_of_kind) <= own:
            nearest[k] = (None, math.nan)
            continue
        dist, idx = index[kind].kneighbors(_position(p)[None, :], n_neighbors=1 + own)
        picks = [(keys_of_kind[i], d) for i, d in zip(idx[0], dist[0]) if keys_of_kind[i] != k]
        nearest[k] = (picks[0][0], float(picks[0][1]))
    out = np.full((len(data), len(NEIGHBOUR_FEATURES)), math.nan)
    for row, (k, c) in enumerate(zip(keys, cands)):
        other, distance = nearest[k]
        if other is not None:
            out[row] = (measured[other].get(c, math.nan), ranks[other].get(c, math.nan), distance)
    return out


def held_out_score(prep, X: np.ndarray, names: list[str], test: np.ndarray, params) -> dict:
    """Fit a ranker on the training rows of ``X`` (columns ``names``) and score its picks on the test rows."""
    import lightgbm as lgb

    from algosel.learn.evaluate import pick_times
    from algosel.learn.features import CATEGORICAL_FEATURES
    from algosel.learn.ranker import relevance, shortlist_mask

    train = prep.data[~test]
    keep = np.asarray(shortlist_mask(train))
    rows = train[keep]
    dataset = lgb.Dataset(X[~test][keep], relevance(rows["ratio"].to_numpy()),
                          group=rows.groupby("problem_key", sort=False).size().to_numpy(), feature_name=names,
                          categorical_feature=list(CATEGORICAL_FEATURES), free_raw_data=True)  # fmt: skip
    t0 = time.perf_counter()
    booster = lgb.train(params.lgb_params(), dataset, num_boost_round=params.n_estimators)
    fit_s = time.perf_counter() - t0
    held = prep.data[test].reset_index(drop=True)
    picks = pick_times(held, booster.predict(X[test], num_threads=params.num_threads))
    best = held[held["status"] == "ok"].groupby("problem_key")["time_ms_median"].min().reindex(picks.index)
    ratio = (picks["model"] / best).dropna()
    return {"problems": len(ratio), "geomean": math.exp(float(np.log(ratio).mean())),
            "within_5pct": float((ratio <= 1.05).mean()), "total": float(picks["model"].sum() / best.sum()),
            "fit_s": fit_s}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/sweeps/h200")
    p.add_argument("--trees", type=int, default=150)
    p.add_argument("--leaves", type=int, default=127)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    from algosel.learn.evaluate import Prepared, is_test_shape
    from algosel.learn.features import FEATURE_NAMES
    from algosel.learn.ranker import RankerParams
    from algosel.records.store import load_records, main_environment

    try:
        frame, envs = load_records(args.data)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    params = RankerParams(n_estimators=args.trees, num_leaves=args.leaves, num_threads=args.threads)
    extra = neighbour_columns(prep, test)
    missing = np.isnan(extra[:, 0]).mean()
    print(f"{args.data}: {int(test.sum())} held-out rows of {len(test)}; {missing:.1%} of the rows' candidates are "
          f"not on their nearest problem's list; {args.trees} trees x {args.leaves} leaves")  # fmt: skip
    print("| features | held-out problems | geomean x best | within 5% | total x best | fit s |")
    print("| --- | --- | --- | --- | --- | --- |")
    names = list(FEATURE_NAMES)
    for label, X, cols in (("the model's", prep.X, names),
                           ("+ nearest problem's ratio, rank, distance", np.column_stack([prep.X, extra]),
                            names + list(NEIGHBOUR_FEATURES)),
                           ("+ nearest problem's ratio", np.column_stack([prep.X, extra[:, :1]]),
                            names + list(NEIGHBOUR_FEATURES[:1]))):  # fmt: skip
        s = held_out_score(prep, X, cols, test, params)
        print(f"| {label} | {s['problems']} | {s['geomean']:.4f} | {s['within_5pct']:.1%} | {s['total']:.4f} | "
              f"{s['fit_s']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
