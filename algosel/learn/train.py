"""``algosel train``: tune, fit and save a selector for the GPU whose records are given.

1. Hold out the test shapes (:func:`algosel.learn.evaluate.is_test_shape`); they are never seen by tuning or fitting.
2. On the training shapes, compare the ranking and regression formulations and a few hyperparameters by
   cross-validation grouped by shape; keep the best by geomean time ratio of the pick.
3. Fit the best on all training shapes, score the test shapes, and save model, manifest and catalogue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.learn.artifact import new_manifest, space_of
from algosel.learn.evaluate import TEST_FRACTION, Prepared, is_test_shape, pick_times, report, selector_table
from algosel.learn.ranker import Ranker, RankerParams, fingerprint
from algosel.learn.rules import SHORTLIST_RANK
from algosel.learn.selector import Selector, blocked_engines, build_catalogue
from algosel.learn.tuning import tune
from algosel.records.environment import gpu_slug
from algosel.records.store import load_records, main_environment

#: The tuning grid of ``algosel train`` (objective first: it is the choice the docs discuss).
DEFAULT_GRID: dict[str, list[Any]] = {
    "objective": ["lambdarank", "regression"],
    "num_leaves": [31, 127],
    "n_estimators": [100, 300],
    "min_child_samples": [100],  # 100 beat 20 at both tree sizes and both objectives in a first tuning run
}


def train(
    data: list[str | Path],
    models_root: str | Path = "models",
    grid: Mapping[str, list[Any]] | None = None,
    base: RankerParams | None = None,
    folds: int = 3,
    progress: bool = True,
    name: str | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Train and save a selector; returns its directory and a summary (also written into the manifest)."""
    t0 = time.perf_counter()
    frame, envs = load_records(*data)
    frame, env = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    train_prep, test_prep = prep.rows(~test), prep.rows(test)
    base = base or RankerParams()
    best, tuning = tune(train_prep, grid or DEFAULT_GRID, base, folds=folds, frame=frame, progress=progress)
    t_fit = time.perf_counter()
    ranker = Ranker(best).fit_prepared(train_prep.data, train_prep.X)
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
    legacy = space_of(summary["spaces"]) == "legacy"
    out = Path(models_root) / (name or gpu_slug(env) + ("-legacy" if legacy else ""))
    Selector(ranker, manifest, build_catalogue(frame)).save(out)
    tuning.to_csv(out / "tuning.csv", index=False)
    comp.to_csv(out / "test_report.csv", index=False)
    (out / "README.md").write_text(_model_readme(out.name, summary, env))
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
