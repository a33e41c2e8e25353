"""The time model: a LightGBM regression of each candidate's device time, beside the ranker.

The ranker orders a problem's candidates; the time model says how long each would take, in milliseconds, on shapes
never recorded. The runtime needs both numbers to decide whether switching away from PyTorch's default pays for
the host overhead a switch costs. It predicts ``log2(time_ms)`` of any candidate of a problem's list, PyTorch's
default included, from the same feature rows as the ranker (:mod:`algosel.learn.features`); it learns from the
candidates that ran correctly and were timed.

Its calibration is measured on problems it never saw (:func:`calibration`): the median and 90th percentile of
``|log2(predicted / measured)|``, given as ratios (``2**x - 1``: 0.10 means 10% off), over every candidate, over
the candidate the ranker picks and over PyTorch's default.

A model directory may hold it as a second LightGBM text file (:data:`TIME_MODEL_FILE`), named in the manifest's
``time_model`` section and, like every file of the directory, its size and SHA-256 recorded in the manifest's
``files`` and checked before LightGBM reads it; models without it still load and rank (their predicted times are
``None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.files import write_text
from algosel.learn.artifact import booster_from_bytes, verified_bytes
from algosel.learn.features import CATEGORICAL_FEATURES, FEATURE_NAMES
from algosel.learn.ranker import base_lgb_params
from algosel.learn.rowpredict import row_predictor
from algosel.records.analysis import ok_mask

#: The time model's file in a model directory.
TIME_MODEL_FILE = "time_model.txt"


class TimeModelError(ValueError):
    """A time model file that is missing or corrupt."""


@dataclass
class TimeModelParams:
    """Hyperparameters of the time model's regression (``l2`` on ``log2(time_ms)``).

    The defaults are sized by the latency budget of a first prediction (:data:`algosel.learn.speed
    .PREDICT_BUDGET_US`), which the time model shares with the ranker: in 3-fold cross-validation on the H200
    training shapes, 600 trees of 255 leaves (learning rate 0.05) had a median error of 11.5% but added about
    500 us to a first prediction; these 200 trees (depth <= 10, learning rate 0.1) 12.8%, adding about 250 us.
    """

    num_leaves: int = 255
    max_depth: int = 10
    learning_rate: float = 0.1
    n_estimators: int = 200
    min_child_samples: int = 20
    feature_fraction: float = 0.8
    num_threads: int = 2
    seed: int = 0

    def lgb_params(self) -> dict[str, Any]:
        base = base_lgb_params(self.num_leaves, self.learning_rate, self.min_child_samples, self.feature_fraction,
                               self.num_threads, self.seed)  # fmt: skip
        return {**base, "objective": "regression", "metric": "l2", "max_depth": self.max_depth}


def timed_mask(data: pd.DataFrame) -> np.ndarray:
    """The rows a time model learns from and is judged on: candidates that ran correctly and were timed."""
    return np.asarray(ok_mask(data) & (data["time_ms_median"] > 0), dtype=bool)


@dataclass
class TimeModel:
    """Predicts a candidate's device time (see the module docstring). Learned state ends in ``_``."""

    params: TimeModelParams = field(default_factory=TimeModelParams)
    booster_: lgb.Booster | None = None

    def fit_prepared(self, data: pd.DataFrame, X: np.ndarray) -> TimeModel:
        """Fit on records and their feature rows (rows of failed or untimed candidates are skipped)."""
        keep = timed_mask(data)
        if not keep.any():
            raise ValueError("no correct, timed candidate to learn device times from")
        target = np.log2(data["time_ms_median"].to_numpy(dtype=np.float64)[keep])
        dataset = lgb.Dataset(
            X[keep],
            target,
            feature_name=list(FEATURE_NAMES),
            categorical_feature=list(CATEGORICAL_FEATURES),
            free_raw_data=True,
        )
        self.booster_ = lgb.train(self.params.lgb_params(), dataset, num_boost_round=self.params.n_estimators)
        return self

    def predict_log2_ms(self, X: np.ndarray, num_threads: int = 1) -> np.ndarray:
        """Predicted ``log2(time_ms)`` of feature rows (one thread by default: the prediction path; evaluation
        of many rows may use more)."""
        if self.booster_ is None:
            raise RuntimeError("TimeModel is not fitted: call fit_prepared() or load a trained model first")
        if num_threads == 1:  # the prediction path: a few rows, set up once
            return row_predictor(self, self.booster_).predict(X)
        return self.booster_.predict(X, num_threads=num_threads)

    def predict_ms(self, X: np.ndarray) -> np.ndarray:
        """Predicted device time in milliseconds of feature rows."""
        return np.exp2(self.predict_log2_ms(X))

    # ---------------------------------------------------------------------------------------- persistence
    def model_text(self) -> str:
        """The LightGBM text model, as a model directory holds it in :data:`TIME_MODEL_FILE` (saved by
        :meth:`algosel.learn.selector.Selector.save` with the rest of the directory, its hash in the manifest)."""
        if self.booster_ is None:
            raise TimeModelError("cannot save an unfitted time model")
        return self.booster_.model_to_string()

    def save(self, directory: str | Path) -> Path:
        """Write :data:`TIME_MODEL_FILE` into an existing directory (atomically); returns its path. A model
        directory is written whole by :meth:`algosel.learn.selector.Selector.save`, which lists it in the
        manifest's ``files``; a file saved here alone is not listed."""
        return write_text(Path(directory) / TIME_MODEL_FILE, self.model_text())

    @classmethod
    def load(
        cls, directory: str | Path, section: Mapping[str, Any], manifest: Mapping[str, Any] | None = None
    ) -> TimeModel:
        """Read the time model a manifest's ``time_model`` section names, checked against the size and SHA-256
        the manifest's ``files`` records (where ``manifest`` is given: one without ``files`` is refused), by the
        strict parser LightGBM's text passes first (:func:`~algosel.learn.artifact.booster_from_bytes`), and against
        the feature schema."""
        name = str(section.get("file", TIME_MODEL_FILE))
        path = Path(directory) / name
        if Path(name).name != name or name in ("", ".", ".."):  # a name inside the model directory, nothing else
            raise TimeModelError(f"{Path(directory) / 'manifest.json'}: time_model names the file {name!r}")
        if not path.is_file():
            raise TimeModelError(f"{path}: the manifest lists a time model but the file is missing")
        if manifest is not None:
            data = verified_bytes(directory, manifest, name)  # SelectorError naming the file
        else:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise TimeModelError(f"{path}: unreadable ({exc.strerror or exc})") from None
        booster = booster_from_bytes(data, path)  # SelectorError naming the file and line
        if booster.num_feature() != len(FEATURE_NAMES):
            raise TimeModelError(f"{path}: {booster.num_feature()} features, expected {len(FEATURE_NAMES)}")
        known = TimeModelParams.__dataclass_fields__
        chosen = section.get("params", {})
        if not isinstance(chosen, dict):
            raise TimeModelError(f"{Path(directory) / 'manifest.json'}: time_model's params is not an object")
        params = TimeModelParams(**{k: v for k, v in chosen.items() if k in known})
        return cls(params, booster)


def log_error_stats(log2_error: np.ndarray) -> dict[str, float]:
    """Median and 90th percentile of ``|log2 error|``, as ratios (``2**x - 1``), and the number of rows."""
    e = np.abs(np.asarray(log2_error, dtype=np.float64))
    e = e[np.isfinite(e)]
    if not e.size:
        return {"rows": 0, "median": float("nan"), "p90": float("nan")}
    return {
        "rows": int(e.size),
        "median": float(np.exp2(np.median(e)) - 1),
        "p90": float(np.exp2(np.percentile(e, 90)) - 1),
    }


def calibration(data: pd.DataFrame, predicted_log2_ms: np.ndarray, chosen: pd.Series | None = None) -> dict[str, Any]:
    """How far predicted times are from the measured ones on ``data`` (problems the time model never saw).

    Parameters
    ----------
    data : DataFrame
        Records (``problem_key``, ``candidate_id``, ``status``, ``time_ms_median``), one row per candidate.
    predicted_log2_ms : ndarray
        The time model's ``log2(time_ms)`` for each row of ``data``.
    chosen : Series, optional
        The candidate id the selector picks per problem key; adds the ``chosen`` group.

    Returns
    -------
    dict
        ``all``, ``chosen`` (where given) and ``pytorch_default``: each :func:`log_error_stats` of
        ``log2(predicted / measured)`` over the timed rows of that group.
    """
    keep = timed_mask(data)
    error = np.asarray(predicted_log2_ms, dtype=np.float64) - np.log2(
        data["time_ms_median"].to_numpy(dtype=np.float64).clip(min=np.finfo(float).tiny)
    )
    out = {"all": log_error_stats(error[keep])}
    if chosen is not None:
        picked = data["candidate_id"].to_numpy() == data["problem_key"].map(chosen).to_numpy()
        out["chosen"] = log_error_stats(error[keep & picked])
    out["pytorch_default"] = log_error_stats(error[keep & (data["candidate_id"] == DEFAULT_ID).to_numpy()])
    return out


def format_calibration(cal: Mapping[str, Mapping[str, float]]) -> str:
    """A :func:`calibration` as text lines: median and p90 of the error per group (groups without rows left out)."""
    lines = []
    for group, s in cal.items():
        if not isinstance(s, Mapping) or "median" not in s or not s.get("rows"):
            continue  # e.g. PyTorch's default for a legacy-algorithm model: no such candidate
        lines.append(
            f"  {group:16s} median {100 * s['median']:5.1f}%   p90 {100 * s['p90']:6.1f}%   ({s['rows']} candidates)"
        )
    return "\n".join(lines)
