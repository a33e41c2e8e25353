"""How well the time model predicts what the runtime decides on: a candidate's time relative to PyTorch's default (CPU).

    python benchmarks/time_ratio.py [--data data/sweeps/h200] [--out time_ratio.json]
    python benchmarks/time_ratio.py --unseen data/sweeps/h200-mynet

The runtime switches where a candidate's predicted time is well below PyTorch's default's predicted time, so the
error that matters is that of the ratio, ``log2(t_candidate / t_default)``, not of either time alone. On the
shipped model's split (the held-out shapes of :func:`algosel.learn.evaluate.is_test_shape`), this fits:

- the shipped time model's regression of ``log2(time_ms)`` (:class:`algosel.learn.time_model.TimeModel`, its
  default parameters), judged on absolute times (its calibration) and on the ratio of two of its predictions;
- a regression of the ratio itself (same features, every timed candidate but the default, target
  ``log2(t / t_default)`` of its problem), at the time model's size and at twice its trees.

Prints the median and p90 of each error (``2**|log2 error| - 1``) and the fit times; ``--out`` writes them as JSON.
Beside the errors, what a switch rule sees: of the candidates each predictor says are at least 1.5x faster than the
default, how many, the share measured faster than it, and their measured geomean ratio. ``--unseen DIR`` also
judges the same fits on a dataset none of them trained on (e.g. a sweep of one's own network's layers).
"""

from __future__ import annotations

import argparse
import json
import time

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.learn.evaluate import Prepared, is_test_shape
from algosel.learn.features import CATEGORICAL_FEATURES, FEATURE_NAMES
from algosel.learn.time_model import TimeModel, TimeModelParams, log_error_stats, timed_mask
from algosel.records.store import load_records, main_environment


def at_default(data: pd.DataFrame, values: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Per row, ``values`` at the row of PyTorch's default of the row's problem (NaN where that row is missing or
    not ``valid``)."""
    default = data["candidate_id"].eq(DEFAULT_ID).to_numpy()
    if valid is not None:
        default = default & valid
    per_problem = pd.Series(np.asarray(values)[default], index=data["problem_key"].to_numpy()[default])
    return data["problem_key"].map(per_problem[~per_problem.index.duplicated()]).to_numpy(float)


def measured_log2(data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``log2`` of every row's measured time, and per row that of its problem's default (NaN where untimed)."""
    log2_ms = np.log2(data["time_ms_median"].to_numpy(float).clip(min=np.finfo(float).tiny))
    return log2_ms, at_default(data, log2_ms, timed_mask(data))


def ratio_rows(data: pd.DataFrame, default_log2: np.ndarray) -> np.ndarray:
    """The rows a ratio is defined for: timed candidates other than the default, of problems whose default is timed."""
    return timed_mask(data) & ~data["candidate_id"].eq(DEFAULT_ID).to_numpy() & np.isfinite(default_log2)


def switch_view(predicted_ratio: np.ndarray, measured_ratio: np.ndarray, margin: float = 1.5) -> dict:
    """Of the rows predicted at least ``margin`` times faster than the default (``log2`` ratios), how many, the share
    measured faster, and the measured geomean of t / t_default."""
    picked = predicted_ratio <= -np.log2(margin)
    m = measured_ratio[picked]
    return {"predicted_faster": int(picked.sum()), "measured_faster": float((m < 0).mean()) if len(m) else None,
            "measured_geomean": float(2.0 ** m.mean()) if len(m) else None}  # fmt: skip


def _judge(out: dict, label: str, data: pd.DataFrame, X, absolute, ratio_models: dict, threads: int) -> None:
    """The errors (and switch views) of every fit on ``data``, into ``out[label]``."""
    measured, measured_default = measured_log2(data)
    measured_ratio = measured - measured_default
    rows = ratio_rows(data, measured_default)
    predicted = absolute.predict_log2_ms(X, num_threads=threads)
    two_times = predicted - at_default(data, predicted)
    res = {"absolute": log_error_stats((predicted - measured)[timed_mask(data)]),
           "time_model_ratio": dict(log_error_stats((two_times - measured_ratio)[rows]),
                                    **switch_view(two_times[rows], measured_ratio[rows]))}  # fmt: skip
    for name, booster in ratio_models.items():
        ratio = booster.predict(X, num_threads=threads)
        res[name] = dict(
            log_error_stats((ratio - measured_ratio)[rows]), **switch_view(ratio[rows], measured_ratio[rows])
        )
    out[label] = res


def run(data_dirs: list[str], threads: int, unseen: list[str] | None = None) -> dict:
    t0 = time.perf_counter()
    frame, envs = load_records(*data_dirs)
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    train, held = prep.rows(~test), prep.rows(test)
    out: dict = {"data": data_dirs, "train_rows": len(train.data), "held_out_rows": len(held.data),
                 "prepare_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    measured, measured_default = measured_log2(held.data)
    measured_ratio = measured - measured_default
    rows = ratio_rows(held.data, measured_default)

    params = TimeModelParams(num_threads=threads)
    t1 = time.perf_counter()
    absolute = TimeModel(params).fit_prepared(train.data, train.X)
    out["time_model_fit_s"] = round(time.perf_counter() - t1, 1)
    predicted = absolute.predict_log2_ms(held.X, num_threads=threads)
    predicted_default = at_default(held.data, predicted)
    out["time_model_absolute"] = log_error_stats((predicted - measured)[timed_mask(held.data)])
    out["time_model_ratio"] = log_error_stats(((predicted - predicted_default) - measured_ratio)[rows])

    train_measured, train_default = measured_log2(train.data)
    train_rows = ratio_rows(train.data, train_default)
    target = (train_measured - train_default)[train_rows]
    boosters = {}
    for name, trees, rate in (("ratio_model", params.n_estimators, params.learning_rate),
                              ("ratio_model_2x_trees", 2 * params.n_estimators, params.learning_rate / 2)):  # fmt: skip
        t1 = time.perf_counter()
        dataset = lgb.Dataset(train.X[train_rows], target, feature_name=list(FEATURE_NAMES),
                              categorical_feature=list(CATEGORICAL_FEATURES))  # fmt: skip
        booster = boosters[name] = lgb.train(dict(params.lgb_params(), learning_rate=rate), dataset,
                                             num_boost_round=trees)  # fmt: skip
        error = booster.predict(held.X, num_threads=threads) - measured_ratio
        out[name] = dict(log_error_stats(error[rows]), trees=trees, learning_rate=rate,
                         fit_s=round(time.perf_counter() - t1, 1))  # fmt: skip
    _judge(out, "held_out", held.data, held.X, absolute, boosters, threads)
    if unseen:
        other, other_envs = load_records(*unseen)
        other, _ = main_environment(other, other_envs)
        prepared = Prepared.build(other, other_envs)
        out["unseen_data"] = unseen
        _judge(out, "unseen", prepared.data, prepared.X, absolute, boosters, threads)
    return out


def _view_text(s: dict) -> str:
    if "predicted_faster" not in s:
        return ""
    if not s["predicted_faster"]:
        return "; none predicted >= 1.5x faster"
    return (f"; predicted >= 1.5x faster: {s['predicted_faster']}, measured faster {s['measured_faster']:.1%}, "
            f"measured geomean {s['measured_geomean']:.3f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--unseen", nargs="+", default=None, help="also judge the fits on these datasets")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    result = run(args.data, args.threads, args.unseen)
    for label in ("held_out", "unseen"):
        if label not in result:
            continue
        print(f"{label}:" + (f" {' '.join(result['unseen_data'])}" if label == "unseen" else ""))
        for key, s in result[label].items():
            print(f"  {key:22s} median {100 * s['median']:5.1f}%  p90 {100 * s['p90']:6.1f}%  ({s['rows']} rows)"
                  f"{_view_text(s)}")  # fmt: skip
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
