"""The learned selector: a LightGBM model that scores every candidate of a problem; the highest score wins.

Two formulations are supported and compared by cross-validation (``algosel train`` keeps the better):

- ``lambdarank``: one group per problem, relevance graded from the candidate's time relative to the group's best
  (:func:`relevance`): learning the *order* within a problem is exactly the selection task;
- ``regression``: predict ``log2(time / best)`` of each candidate and pick the smallest.

The relevance falls linearly with ``log2(time / best)`` down to 0 at :data:`ZERO_RELEVANCE_RATIO`, and the gain of
a grade is linear too, so that what LambdaRank's swaps weigh is the log time lost, which the geomean of the pick
sums: picking a candidate 20x slower than the best costs far more than picking one 1.7x slower. (Exponential
gains, and grades that bottomed out at 1.68x, taught the ranker that both were equally bad.)

Only the candidates a selector scores are learnt from (the shortlist, :func:`algosel.learn.rules.on_shortlist`),
their relevance graded against the best of every candidate. A candidate that failed (did not build, did not run,
gave a wrong result) is kept with the lowest relevance (or a large regression target), so the model learns to
rank it last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.learn.features import CATEGORICAL_FEATURES, FEATURE_NAMES, frame_features
from algosel.learn.rowpredict import row_predictor
from algosel.learn.rules import SHORTLIST_RANK, shortlist_mask
from algosel.records.analysis import ok_mask

#: Relevance grades per doubling of the time over the best.
GRADES_PER_DOUBLING = 6
#: Time / best at and beyond which a candidate's relevance is 0 (as a failed candidate's).
ZERO_RELEVANCE_RATIO = 32.0
#: Relevance of the best candidate (5 doublings of 6 grades).
MAX_RELEVANCE = round(GRADES_PER_DOUBLING * np.log2(ZERO_RELEVANCE_RATIO))
#: log2 slowdown used as the regression target of a failed candidate (32x the best).
FAILED_LOG2_RATIO = 5.0


def relevance(ratio: np.ndarray) -> np.ndarray:
    """Graded relevance from time / best (``inf`` for failed candidates): :data:`MAX_RELEVANCE` for the best,
    :data:`GRADES_PER_DOUBLING` fewer per doubling, 0 from :data:`ZERO_RELEVANCE_RATIO` on."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.round(MAX_RELEVANCE - GRADES_PER_DOUBLING * np.log2(ratio))
    return np.clip(np.nan_to_num(rel, nan=0.0, neginf=0.0, posinf=0.0), 0, MAX_RELEVANCE).astype(int)


def with_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Records sorted by problem (groups contiguous, as LightGBM's ranking needs), with ``ratio`` = time / best
    (``inf`` for failures). Problems without any correct candidate are dropped: nothing can be learnt there."""
    ok = ok_mask(frame)
    # A problem of one GPU is one ranking: records of several GPUs (a joint model) are grouped per environment.
    keys = ["problem_key", "env_id"] if "env_id" in frame else ["problem_key"]
    best = frame["time_ms_median"].where(ok).groupby([frame[k] for k in keys]).transform("min")
    out = frame.assign(ratio=np.where(ok, frame["time_ms_median"] / best, np.inf))
    out = out[best.notna()]
    return out.sort_values([*keys, "candidate_id"], kind="stable").reset_index(drop=True)


def base_lgb_params(num_leaves: int, learning_rate: float, min_child_samples: int, feature_fraction: float,
                    num_threads: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """The LightGBM options every model of the selector shares (the ranker and the time model): its tuned sizes,
    and deterministic, quiet training with one-hot splits for small categoricals."""
    return {
        "num_leaves": num_leaves,
        "learning_rate": learning_rate,
        "min_data_in_leaf": min_child_samples,
        "feature_fraction": feature_fraction,
        "num_threads": num_threads,
        "seed": seed,
        "deterministic": True,
        "verbosity": -1,
        "max_cat_to_onehot": 8,
    }


@dataclass
class RankerParams:
    """Hyperparameters (the ones tuned by cross-validation, and the fixed ones)."""

    objective: str = "lambdarank"
    num_leaves: int = 63
    learning_rate: float = 0.05
    n_estimators: int = 300
    min_child_samples: int = 20
    feature_fraction: float = 0.8
    lambdarank_truncation_level: int = 20
    num_threads: int = 2
    seed: int = 0

    def lgb_params(self) -> dict[str, Any]:
        common = base_lgb_params(self.num_leaves, self.learning_rate, self.min_child_samples, self.feature_fraction,
                                 self.num_threads, self.seed)  # fmt: skip
        if self.objective == "lambdarank":
            return {
                **common,
                "objective": "lambdarank",
                "metric": "ndcg",
                "eval_at": [1],
                "lambdarank_truncation_level": self.lambdarank_truncation_level,
                "label_gain": [float(i) for i in range(MAX_RELEVANCE + 1)],  # linear: see the module docstring
            }
        if self.objective == "regression":
            return {**common, "objective": "regression", "metric": "l2"}
        raise ValueError(f"RankerParams.objective must be 'lambdarank' or 'regression'; got {self.objective!r}")


@dataclass(frozen=True)
class TrainingRows:
    """What a ranker's fit learns from (:meth:`Ranker.training_rows`): feature rows, their labels (relevance grades
    for LambdaRank, ``log2(time / best)`` for regression), their weights (None: all alike) and, for LambdaRank, the
    rows of each ranking (one problem on one GPU; None for regression), in the rows' order."""

    X: np.ndarray
    label: np.ndarray
    weight: np.ndarray | None
    group: np.ndarray | None


@dataclass
class Ranker:
    """Scores candidates; fit on records (see the module docstring). Learned state ends in ``_``."""

    params: RankerParams = field(default_factory=RankerParams)
    booster_: lgb.Booster | None = None

    def fit(self, frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> Ranker:
        """Fit on records (any order; failures included)."""
        data = with_ratios(frame)
        if data.empty:
            raise ValueError("no problem with a correct, timed candidate to learn from")
        return self.fit_prepared(data, frame_features(data, envs))

    def fit_prepared(self, data: pd.DataFrame, X: np.ndarray, shortlist_rank: int | None = SHORTLIST_RANK,
                     weight: np.ndarray | None = None) -> Ranker:  # fmt: skip
        """Fit on the output of :func:`with_ratios` and its feature rows (lets cross-validation reuse ``X``): on the
        rows :meth:`training_rows` keeps (the arguments are its)."""
        rows = self.training_rows(data, X, shortlist_rank, weight)
        dataset = lgb.Dataset(
            rows.X,
            rows.label,
            group=rows.group,
            weight=rows.weight,
            feature_name=list(FEATURE_NAMES),
            categorical_feature=list(CATEGORICAL_FEATURES),
            free_raw_data=True,
        )
        self.booster_ = lgb.train(self.params.lgb_params(), dataset, num_boost_round=self.params.n_estimators)
        return self

    def training_rows(self, data: pd.DataFrame, X: np.ndarray, shortlist_rank: int | None = SHORTLIST_RANK,
                      weight: np.ndarray | None = None) -> TrainingRows:  # fmt: skip
        """What :meth:`fit_prepared` learns from, of the output of :func:`with_ratios` and its feature rows ``X``:
        only the rows on the shortlist of ``shortlist_rank`` (``None``: all). ``weight``: one per row of ``data``
        (a joint model's weight of each GPU's records; LambdaRank scales each row's gradients by it); without it,
        ``data``'s ``weight`` column where it has one (records of a runtime cache beside a sweep's:
        :mod:`algosel.learn.cache_records`)."""
        if weight is None and "weight" in data:
            weight = data["weight"].to_numpy(dtype=np.float64)
        keep = shortlist_mask(data, shortlist_rank)
        if not keep.all():
            data, X = data[keep], X[keep]
            weight = None if weight is None else np.asarray(weight)[keep]
        ratio = data["ratio"].to_numpy()
        if self.params.objective == "lambdarank":
            keys = ["problem_key", "env_id"] if "env_id" in data else ["problem_key"]
            group = data.groupby(keys, sort=False).size().to_numpy()
            return TrainingRows(X, relevance(ratio), weight, group)
        label = np.where(np.isfinite(ratio), np.log2(ratio), FAILED_LOG2_RATIO)
        return TrainingRows(X, label, weight, None)

    def score(self, X: np.ndarray) -> np.ndarray:
        """Higher is better, for either objective."""
        if self.booster_ is None:
            raise RuntimeError("Ranker is not fitted: call fit() or load a trained model first")
        raw = row_predictor(self, self.booster_).predict(X)  # Booster.predict(X, num_threads=1), set up once
        return raw if self.params.objective == "lambdarank" else -raw


def fingerprint(frame: pd.DataFrame) -> str:
    """A hash of what a model was trained on (problems, candidates, statuses and times)."""
    import hashlib  # noqa: PLC0415

    cols = frame[["problem_key", "candidate_id", "status", "time_ms_median", "env_id"]].sort_values(
        ["problem_key", "candidate_id", "env_id"]
    )
    h = hashlib.blake2b(digest_size=10)
    h.update(pd.util.hash_pandas_object(cols, index=False).to_numpy().tobytes())
    return h.hexdigest()
