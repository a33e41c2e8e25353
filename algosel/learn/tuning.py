"""Hyperparameter tuning of the ranker: a grid searched by cross-validation grouped by shape.

The score is the geomean time ratio of the pick (time of the model's choice over the best measured candidate) on
out-of-fold problems. Among the settings within :data:`TUNING_TOLERANCE` of the best score, the cheapest to evaluate
is chosen (see :func:`tune`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from algosel.learn.evaluate import Prepared, cross_val_picks, geomean_ratio, selector_table
from algosel.learn.ranker import RankerParams

#: Tuning keeps the smallest trees within this relative distance of the best cross-validated score.
TUNING_TOLERANCE = 0.005


def tune(
    prep: Prepared,
    grid: Mapping[str, Iterable[Any]],
    base: RankerParams,
    folds: int = 3,
    frame: pd.DataFrame | None = None,
    progress: bool = True,
    tolerance: float = TUNING_TOLERANCE,
) -> tuple[RankerParams, pd.DataFrame]:
    """Grid search by grouped cross-validation on ``prep``; the score is the geomean time ratio of the pick.

    Among the settings whose score is within ``tolerance`` (relative) of the best, the cheapest to evaluate is
    kept (trees x log2 leaves: a prediction walks every tree for every candidate), since differences that small
    are within the spread of cross-validation. The returned table is sorted by score, with a ``chosen`` column.
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
        results.append({**dict(zip(keys, values)), "cv_geomean_ratio": score, "cv_within_5pct": within})
    out = pd.DataFrame(results).sort_values("cv_geomean_ratio", kind="stable").reset_index(drop=True)
    close = out[out["cv_geomean_ratio"] <= out["cv_geomean_ratio"].iloc[0] * (1 + tolerance)]
    trees = close["n_estimators"] if "n_estimators" in close else base.n_estimators
    leaves = close["num_leaves"] if "num_leaves" in close else base.num_leaves
    cost = pd.Series(trees * np.log2(leaves), index=close.index)
    chosen = int(cost.sort_values(kind="stable").index[0])
    out["chosen"] = out.index == chosen
    best = replace(base, **{k: _plain(out.at[chosen, k]) for k in keys})
    return best, out


def _plain(value: Any) -> Any:
    """numpy scalars from a DataFrame back to Python values (the manifest is JSON)."""
    return value.item() if hasattr(value, "item") else value
