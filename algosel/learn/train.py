"""``algosel train``: tune, fit and save a selector for the GPU whose records are given.

1. Hold out the test shapes (:func:`algosel.learn.evaluate.is_test_shape`); they are never seen by tuning or fitting.
2. On the training shapes, compare the ranking and regression formulations and a few hyperparameters by
   cross-validation grouped by shape; keep the best by geomean time ratio of the pick.
3. Fit the best on all training shapes, score the test shapes, and save model, manifest, catalogue and the reports
   (``tuning.csv``, ``test_report.csv``, ``README.md``) as one directory, written as a whole.

An existing model directory is never replaced unless ``force``: the check comes before any tuning, and the
directory is swapped as a whole (no file of the old model survives beside the new one).

LightGBM runs on one thread when the training rows are few (:data:`SMALL_DATA_ROWS`): there each tree is built from
many tiny parallel sections, and on a machine whose cores are busy a thread spinning at OpenMP's barrier while its
partner waits for a core slowed training 7-fold (tiny records: 7 s on one thread, 42-60 s and some runs beyond
300 s on two).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.learn.artifact import SelectorError, new_manifest, space_of
from algosel.learn.evaluate import TEST_FRACTION, Prepared, is_test_shape, pick_times, report, selector_table
from algosel.learn.ranker import Ranker, RankerParams, fingerprint
from algosel.learn.rules import SHORTLIST_RANK
from algosel.learn.selector import Selector, blocked_engines, build_catalogue
from algosel.learn.tuning import tune
from algosel.records.environment import gpu_slug
from algosel.records.store import RecordsError, load_records, main_environment

#: The tuning grid of ``algosel train`` (objective first: it is the choice the docs discuss).
DEFAULT_GRID: dict[str, list[Any]] = {
    "objective": ["lambdarank", "regression"],
    "num_leaves": [31, 127],
    "n_estimators": [100, 300],
    "min_child_samples": [100],  # 100 beat 20 at both tree sizes and both objectives in a first tuning run
}
#: Training rows below which LightGBM gets one thread (see the module docstring); the shipped H200 records have
#: 293,243 rows, the committed slice 17,563.
SMALL_DATA_ROWS = 100_000


def training_threads(requested: int, rows: int) -> int:
    """LightGBM threads for ``rows`` training rows: one for small data, else ``requested`` but no more than the
    cores this process may run on."""
    if rows < SMALL_DATA_ROWS:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(requested, cores))


def check_folds(folds: object) -> int:
    """``folds`` as cross-validation needs it: an integer >= 2 (raises ValueError naming the value)."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2 (cross-validation folds), got {folds!r}")
    return int(folds)


def _check_trainable(prep: Prepared, test: np.ndarray, folds: int, data: list[str | Path]) -> None:
    """Refuse, before any tuning, records too few to tune, fit and test a model on (ValueError naming them)."""
    where = ", ".join(str(d) for d in data)
    if prep.data.empty:
        raise RecordsError(f"{where}: no problem has a correct, timed candidate to learn from")
    train_shapes, test_shapes = np.unique(prep.shape[~test]), np.unique(prep.shape[test])
    shapes = len(train_shapes) + len(test_shapes)
    if len(test_shapes) == 0 or len(train_shapes) < folds:
        raise RecordsError(
            f"{where}: {shapes} shape(s), {len(train_shapes)} for training and {len(test_shapes)} held out; train "
            f"needs at least {folds} training shapes (one per cross-validation fold) and one held-out shape "
            f"({100 * TEST_FRACTION:.0f}% of shapes are held out, chosen by hash): give more records"
        )


def train(
    data: list[str | Path],
    models_root: str | Path = "models",
    grid: Mapping[str, list[Any]] | None = None,
    base: RankerParams | None = None,
    folds: int = 3,
    progress: bool = True,
    name: str | None = None,
    force: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Train and save a selector; returns its directory and a summary (also written into the manifest).

    Parameters
    ----------
    data : list of path
        Record datasets (directories or part files).
    models_root : path
        Directory that receives the model directory.
    grid : mapping, optional
        Tuning grid (default :data:`DEFAULT_GRID`).
    base : RankerParams, optional
        Parameters the grid does not set. ``num_threads`` is lowered as :func:`training_threads` says.
    folds : int
        Cross-validation folds for tuning (>= 2).
    progress : bool
        Show progress bars.
    name : str, optional
        Model directory name (default: from the records' GPU and cuDNN).
    force : bool
        Replace an existing model directory of that name (as a whole) instead of refusing.

    Raises
    ------
    ValueError
        Before any tuning: bad ``folds``, an existing model directory without ``force``, records too few to train
        and test on (:class:`~algosel.records.RecordsError`), unreadable records.
    """
    t0 = time.perf_counter()
    folds = check_folds(folds)
    frame, envs = load_records(*data)
    if frame.empty:
        raise RecordsError(f"{', '.join(str(d) for d in data)}: no records (0 rows)")
    frame, env = main_environment(frame, envs)
    legacy = space_of(sorted(frame["space"].unique())) == "legacy"
    out = Path(models_root) / (name or gpu_slug(env) + ("-legacy" if legacy else ""))
    if out.exists() and not force:
        raise SelectorError(
            f"{out} exists; train never replaces a model directory it did not create: pass --force (force=True) to "
            "replace it, or choose another --name or --models"
        )
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    _check_trainable(prep, test, folds, data)
    train_prep, test_prep = prep.rows(~test), prep.rows(test)
    base = base or RankerParams()
    base = replace(base, num_threads=training_threads(base.num_threads, len(train_prep.data)))
    try:
        best, tuning = tune(train_prep, grid or DEFAULT_GRID, base, folds=folds, frame=frame, progress=progress)
        t_fit = time.perf_counter()
        ranker = Ranker(best).fit_prepared(train_prep.data, train_prep.X)
    except lgb.basic.LightGBMError as exc:  # e.g. a cross-validation fold left without training shapes
        raise RecordsError(f"{', '.join(map(str, data))}: LightGBM cannot train on these records ({exc})") from None
    fit_s = time.perf_counter() - t_fit
    table = selector_table(frame, pick_times(test_prep.data, ranker.score(test_prep.X)))
    comp = report(table)
    overall = comp[(comp["group"] == "all")].set_index("selector")
    summary = {
        "data_fingerprint": fingerprint(frame),
        "data": [str(d) for d in data],
        "records": int(len(frame)),
        "problems": int(frame["problem_key"].nunique()),
        "train_problems": int(train_prep.data["problem_key"].nunique()),
        "test_problems": int(test_prep.data["problem_key"].nunique()),
        "split": {"method": "crc32(shape_key) % 1000 < 1000 * test_fraction", "test_fraction": TEST_FRACTION},
        "cv_folds": folds,
        "tuning": tuning.to_dict("records"),
        "test_scores": {
            sel: {
                k: (None if pd.isna(v) else float(v))
                for k, v in row.items()
                if k in ("geomean", "p95", "worst", "within_5pct", "top1")
            }
            for sel, row in overall.iterrows()
        },
        "test_invalid_top1": float(table["invalid_top1"].mean()),
        "test_wrong_top1": float(table["wrong_top1"].mean()),
        "final_fit_seconds": round(fit_s, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "blocked_engines": blocked_engines(frame),
        "dtypes": sorted(frame["dtype"].unique()),
        "shortlist_rank": SHORTLIST_RANK,
        # Numerical notes (nondeterministic, tensor_core...) are recorded only when the sweep could read them.
        "numeric_notes_recorded": bool(frame["notes"].str.contains("nondeterministic|tensor_core").any()),
        "spaces": sorted(frame["space"].unique()),
    }
    manifest = new_manifest(best, env, summary)
    # The reports travel in the same directory write as the model they describe.
    reports = {
        "tuning.csv": tuning.to_csv(index=False),
        "test_report.csv": comp.to_csv(index=False),
        "README.md": _model_readme(out.name, summary, env),
    }
    Selector(ranker, manifest, build_catalogue(frame)).save(out, replace=force, extra_files=reports)
    return out, summary


def _model_readme(name: str, summary: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    scores = json.dumps(summary["test_scores"], indent=2)
    return (
        f"# {name}\n\nA selector trained by `algosel train` on {summary['train_problems']} problems of "
        f"{env.get('gpu_name')} (cuDNN {env.get('cudnn')}, torch {env.get('torch')}); "
        f"{summary['test_problems']} problems of held-out shapes scored as below (time / best measured candidate).\n\n"
        f"```\n{scores}\n```\n\nFiles: `model.txt` (LightGBM text model), `manifest.json` (schema, parameters, "
        "data fingerprint, environment, scores, library versions), `catalogue.parquet` (recorded candidates), "
        "`tuning.csv` (cross-validation of the tuning grid), `test_report.csv` (the held-out comparison).\n"
    )
