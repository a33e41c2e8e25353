"""Hyperparameter tuning of the ranker: a grid searched by cross-validation grouped by shape.

The score is the geomean time ratio of the pick (time of the model's choice over the best measured candidate) on
out-of-fold problems. The setting with the best score is kept, unless its first prediction of a new problem is
slower than the latency budget (:data:`algosel.learn.speed.PREDICT_BUDGET_US` on one core, as
:func:`algosel.learn.speed.estimated_first_prediction_us` estimates it): then the next best setting that answers
in time (:func:`within_budget`). Accuracy is not traded for a smaller model otherwise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from algosel.learn.evaluate import Prepared, cross_val_picks, geomean_ratio, selector_table, total_time_ratio
from algosel.learn.ranker import RankerParams

T = TypeVar("T")


def tune(
    prep: Prepared,
    grid: Mapping[str, Iterable[Any]],
    base: RankerParams,
    folds: int = 3,
    frame: pd.DataFrame | None = None,
    progress: bool = True,
) -> tuple[RankerParams, pd.DataFrame]:
    """Grid search by grouped cross-validation on ``prep``; the score is the geomean time ratio of the pick.

    Returns the setting of the best score and the table of every setting sorted by score (best first), with its
    share within 5% of the best and total-time ratio, and a ``chosen`` column (True on the first row; see
    :func:`within_budget` for the latency rule that may move it).
    """
    keys = list(grid)
    results = []
    combos = list(itertools.product(*(grid[k] for k in keys)))
    for values in tqdm(combos, desc="tuning", disable=not progress):
        params = replace(base, **dict(zip(keys, values)))
        picks = cross_val_picks(prep, params, folds)
        table = selector_table(frame if frame is not None else prep.data, picks)
        score = geomean_ratio(table)
        within = float((table["model"] / table["best"] <= 1.05).mean())
        results.append(
            {
                **dict(zip(keys, values)),
                "cv_geomean_ratio": score,
                "cv_within_5pct": within,
                "cv_total_time_ratio": total_time_ratio(table),
            }
        )
    out = pd.DataFrame(results).sort_values("cv_geomean_ratio", kind="stable").reset_index(drop=True)
    out["chosen"] = out.index == 0
    return setting(out, 0, base), out


def setting(table: pd.DataFrame, row: int, base: RankerParams) -> RankerParams:
    """The parameters of row ``row`` of a :func:`tune` table (``base`` for the fields not tuned)."""
    fields = RankerParams.__dataclass_fields__
    return replace(base, **{k: _plain(table.at[row, k]) for k in table.columns if k in fields})


def within_budget(
    table: pd.DataFrame,
    base: RankerParams,
    fit: Callable[[RankerParams], T],
    latency_us: Callable[[T], float],
    budget_us: float,
    column: str = "predict_us",
) -> tuple[RankerParams, T, pd.DataFrame]:
    """The best-scored setting of a :func:`tune` table whose first prediction is within ``budget_us``.

    Settings are tried best score first: each is fitted (``fit``) and its first prediction of a new problem on
    one core is timed or estimated (``latency_us``); the first within budget is kept. Where none is, the fastest of
    those tried is kept. Returns its parameters, what ``fit`` returned for it, and the table with the latencies in
    ``column`` (NaN where not tried) and ``chosen`` updated.
    """
    if table.empty:
        raise ValueError("within_budget needs at least one tuned setting")
    out = table.copy()
    out[column] = np.nan
    tried: list[tuple[float, int, T]] = []
    for row in range(len(out)):
        fitted = fit(setting(out, row, base))
        us = float(latency_us(fitted))
        out.at[row, column] = us
        tried.append((us, row, fitted))
        if us <= budget_us:
            break
    us, row, fitted = tried[-1] if tried[-1][0] <= budget_us else min(tried, key=lambda t: t[0])
    out["chosen"] = out.index == row
    return setting(out, row, base), fitted, out


def _plain(value: Any) -> Any:
    """numpy scalars from a DataFrame back to Python values (the manifest is JSON)."""
    return value.item() if hasattr(value, "item") else value
