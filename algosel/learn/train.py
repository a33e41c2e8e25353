"""``algosel train``: tune, fit and save a selector for the GPU whose records are given.

1. Hold out the test shapes (:func:`algosel.learn.evaluate.is_test_shape`); they are never seen by tuning or fitting.
2. On the training shapes, compare the ranking and regression formulations and a few hyperparameters by
   cross-validation grouped by shape; keep the best by geomean time ratio of the pick, unless its first
   prediction of a new problem is slower than the latency budget (:func:`algosel.learn.tuning.within_budget`).
3. Fit the best on all training shapes, and the time model (:mod:`algosel.learn.time_model`) beside it; score the
   test shapes (picks and the calibration of predicted times), and save model, time model, manifest, catalogue and
   the reports (``tuning.csv``, ``test_report.csv``, ``README.md``) as one directory, written as a whole.

An existing model directory is never replaced unless ``force``: the check comes before any tuning, and the
directory is swapped as a whole (no file of the old model survives beside the new one).

LightGBM runs on one thread when the training rows are few (:data:`SMALL_DATA_ROWS`): there each tree is built from
many tiny parallel sections, and on a machine whose cores are busy a thread spinning at OpenMP's barrier while its
partner waits for a core slowed training 7-fold (tiny records: 7 s on one thread, 42-60 s and some runs beyond
300 s on two).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.learn.artifact import SelectorError, new_manifest, replaceable_files, space_of
from algosel.learn.cache_records import check_cache_gpu, held_out, with_cache_records
from algosel.learn.calibration import calibration_files
from algosel.learn.evaluate import TEST_FRACTION, Prepared, pick_times, report, selector_table
from algosel.learn.ranker import Ranker, RankerParams, fingerprint
from algosel.learn.rules import SHORTLIST_RANK
from algosel.learn.selector import Selector
from algosel.learn.speed import (
    LATENCY_LINES,
    PREDICT_BUDGET_US,
    estimated_first_prediction_us,
    first_prediction_nodes,
    new_problems,
)
from algosel.learn.time_model import TIME_MODEL_FILE, TimeModel, TimeModelParams, calibration
from algosel.learn.tuning import tune, within_budget
from algosel.records.catalogue import blocked_engines, build_catalogue
from algosel.records.environment import gpu_slug

# main_environment: imported from here by the notebooks
from algosel.records.store import RecordsError, load_records, main_environment, one_environment  # noqa: F401

#: The tuning grid of ``algosel train``. The regression objective lost to LambdaRank at every tree size in earlier
#: tunings (docs/selector.md) and is left out; min_child_samples 20 beat 100 in cross-validation (1.0657 against
#: 1.0664, 127 leaves x 300 trees). The learning rate is tuned because the latency budget caps the trees: at the
#: budget's 150 trees of 127 leaves, 0.1 beat 0.05 with each of three seeds on the six H200 datasets' held-out
#: problems (docs/selector.md, "Learning rate").
DEFAULT_GRID: dict[str, list[Any]] = {
    "objective": ["lambdarank"],
    "num_leaves": [31, 127, 255],
    "n_estimators": [150, 300, 600],
    "learning_rate": [0.05, 0.1],
    "min_child_samples": [20],
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
    data: list[str | Path], models_root: str | Path = "models", grid: Mapping[str, list[Any]] | None = None,
    base: RankerParams | None = None, folds: int = 3, progress: bool = True, name: str | None = None,
    force: bool = False, time_params: TimeModelParams | None = None, replace_shipped: bool = False,
    predict_budget_us: float = PREDICT_BUDGET_US, command: str | None = None, trees: str = "lightgbm",
    cache_records: Sequence[pd.DataFrame] = (), cache_weight: float = 1.0,
) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    """Train and save a selector on the record datasets ``data``; returns its directory and a summary (also in the
    manifest).

    Tuned over ``grid`` (default :data:`DEFAULT_GRID`; ``base`` the rest, its threads lowered by
    :func:`training_threads`) by ``folds``-fold cross-validation, keeping the best setting whose estimated first
    prediction (on the ``trees`` path: ``lightgbm`` or ``compiled``) is within ``predict_budget_us``; a time model
    (``time_params``) and its calibration beside it. The directory is ``models_root/name`` (default: the records'
    GPU and cuDNN); an existing one is replaced only with ``force``, and then only its own files (a shipped model
    also needs ``replace_shipped``). ``cache_records`` (:func:`algosel.runtime.measured.records_from_cache`) are
    learnt beside ``data`` with ``cache_weight`` each, into a new directory only. ``command`` goes into the manifest.

    Raises
    ------
    ValueError
        Before any tuning: bad ``folds`` or ``trees``, an existing model directory without ``force``, records too
        few to train and test on (:class:`~algosel.records.RecordsError`), unreadable records.
    """
    t0 = time.perf_counter()
    if trees not in LATENCY_LINES:
        raise ValueError(f"trees {trees!r}: one of {', '.join(LATENCY_LINES)}")
    folds = check_folds(folds)
    frame, envs, env, from_cache = _training_records(data, cache_records, cache_weight)
    legacy = space_of(sorted(frame["space"].unique())) == "legacy"
    out = _new_model_dir(Path(models_root) / (name or gpu_slug(env) + ("-legacy" if legacy else "")), from_cache,
                         force, replace_shipped)  # fmt: skip
    prep = Prepared.build(frame, envs)
    test = held_out(prep)
    _check_trainable(prep, test, folds, data)
    train_prep, test_prep = prep.rows(~test), prep.rows(test)
    base = base or RankerParams()
    base = replace(base, num_threads=training_threads(base.num_threads, len(train_prep.data)))
    time_params = time_params or TimeModelParams(num_threads=base.num_threads)
    fitting = _Fitting(train_prep, frame, env, time_params, trees)
    try:
        best, tuning = fitting.run(grid or DEFAULT_GRID, base, folds, progress, predict_budget_us)
    except lgb.basic.LightGBMError as exc:  # e.g. a cross-validation fold left without training shapes
        raise RecordsError(f"{', '.join(map(str, data))}: LightGBM cannot train on these records ({exc})") from None
    ranker, time_model = fitting.ranker, fitting.time_model
    comp = report(table := selector_table(frame, pick_times(test_prep.data, ranker.score(test_prep.X))))
    summary = _summary(data, frame, train_prep, test_prep, folds, tuning, comp, table, fitting, base, command)
    summary["total_seconds"] = round(time.perf_counter() - t0, 1)
    if from_cache is not None:
        summary["cache_records"] = from_cache
    manifest = new_manifest(best, env, summary)
    # The reports travel in the same directory write as the model they describe.
    reports = {"tuning.csv": tuning.to_csv(index=False), "test_report.csv": comp.to_csv(index=False),
               "README.md": _model_readme(out.name, summary, env)}  # fmt: skip
    selector = Selector(ranker, manifest, fitting.catalogue, time_model)
    # The calibration of its predicted times travels with the model: the runtime's rule weighs a switch by it.
    reports |= calibration_files(selector, frame, envs)
    selector.save(out, replace=force, extra_files=reports, replace_shipped=replace_shipped)
    return out, summary


def _training_records(data: list[str | Path], cache_records: Sequence[pd.DataFrame], cache_weight: float):
    """The records of ``data`` (with the caches' rows where given), of one GPU and cuDNN, and that environment."""
    frame, envs = load_records(*data)
    if frame.empty:
        raise RecordsError(f"{', '.join(str(d) for d in data)}: no records (0 rows)")
    from_cache = None
    if cache_records:
        frame, envs, from_cache = with_cache_records(frame, envs, list(cache_records), cache_weight)
        # a cache of another GPU than the records' is refused as such, before the records' own GPU check
        check_cache_gpu(*main_environment(frame, envs), from_cache)
    frame, env = one_environment(frame, envs, "a selector", " (a model of several GPUs: --joint)")
    return frame, envs, env, from_cache


def _new_model_dir(out: Path, from_cache: Any, force: bool, replace_shipped: bool) -> Path:
    """``out``, checked before the minutes of tuning: new, or (``force``) a model whose own files may be replaced."""
    if out.exists() and from_cache is not None:
        raise SelectorError(
            f"{out} exists; a model retrained on a runtime cache is a new model directory, never an edit of one: "
            "choose another --name or --models"
        )
    if out.exists() and not force:
        raise SelectorError(
            f"{out} exists; train never replaces a model directory it did not create: pass --force (force=True) to "
            "replace it, or choose another --name or --models"
        )
    if out.exists():
        replaceable_files(out, replace_shipped)  # before the minutes of tuning, and again when written
    return out


class _Fitting:
    """The tuning and the final fits of one training: the ranker within the latency budget, the time model."""

    def __init__(self, train_prep: Prepared, frame: pd.DataFrame, env: Mapping[str, Any],
                 time_params: TimeModelParams, trees: str):  # fmt: skip
        self.train_prep, self.frame, self.time_params, self.trees = train_prep, frame, time_params, trees
        self.catalogue = build_catalogue(frame)
        spaces, self.blocked = sorted(frame["space"].unique()), blocked_engines(frame)
        # Enough of a manifest to choose as the saved model will (its spaces, shortlist and blocked engines).
        self.partial = {"environment": env, "shortlist_rank": SHORTLIST_RANK, "spaces": spaces,
                        "blocked_engines": self.blocked}  # fmt: skip
        self.spaces = spaces
        self.fit_seconds: dict[int, float] = {}
        self.nodes: dict[int, dict[str, float]] = {}
        self.time_model: TimeModel | None = None
        self.time_fit_s = 0.0
        self.ranker: Ranker | None = None

    def fit(self, params: RankerParams) -> Selector:
        t_fit = time.perf_counter()
        fitted = Ranker(params).fit_prepared(self.train_prep.data, self.train_prep.X)
        self.fit_seconds[id(fitted)] = time.perf_counter() - t_fit
        return Selector(fitted, self.partial, self.catalogue, self.time_model)

    def latency_us(self, sel: Selector) -> float:
        # Estimated from the tree nodes walked, not timed: the same model from the same command on any machine.
        self.nodes[id(sel.ranker)] = first_prediction_nodes(sel, new_problems())
        return estimated_first_prediction_us(self.nodes[id(sel.ranker)], LATENCY_LINES[self.trees])

    def run(self, grid: Mapping[str, list[Any]], base: RankerParams, folds: int, progress: bool,
            budget_us: float) -> tuple[RankerParams, pd.DataFrame]:  # fmt: skip
        _, tuning = tune(self.train_prep, grid, base, folds=folds, frame=self.frame, progress=progress)
        t_time = time.perf_counter()
        self.time_model = TimeModel(self.time_params).fit_prepared(self.train_prep.data, self.train_prep.X)
        self.time_fit_s = time.perf_counter() - t_time
        best, fitted, tuning = within_budget(tuning, base, self.fit, self.latency_us, budget_us,
                                             column="predict_us_estimate")  # fmt: skip
        self.ranker = fitted.ranker
        return best, tuning


def _summary(data, frame, train_prep, test_prep, folds, tuning, comp, table, fitting: _Fitting,
             base: RankerParams, command: str | None) -> dict[str, Any]:  # fmt: skip
    """The manifest's account of a training: data, split, tuning, held-out scores, latency, time model."""
    overall = comp[(comp["group"] == "all")].set_index("selector")
    kept = ("geomean", "p95", "worst", "within_5pct", "top1", "total_time_ratio")
    ranker = fitting.ranker
    return {
        "data_fingerprint": fingerprint(frame),
        "data": [str(d) for d in data],
        "records": int(len(frame)),
        "problems": int(frame["problem_key"].nunique()),
        "train_problems": int(train_prep.data["problem_key"].nunique()),
        "test_problems": int(test_prep.data["problem_key"].nunique()),
        "split": {"method": "crc32(shape_key) % 1000 < 1000 * test_fraction", "test_fraction": TEST_FRACTION},
        "cv_folds": folds,
        "tuning": tuning.to_dict("records"),
        "test_scores": {sel: {k: (None if pd.isna(v) else float(v)) for k, v in row.items() if k in kept}
                        for sel, row in overall.iterrows()},  # fmt: skip
        "test_invalid_top1": float(table["invalid_top1"].mean()),
        "test_wrong_top1": float(table["wrong_top1"].mean()),
        "final_fit_seconds": round(fitting.fit_seconds[id(ranker)], 1),
        # Estimated (algosel.learn.speed); benchmarks/predict_speed.py times it.
        "first_prediction_us_estimate": float(tuning.loc[tuning["chosen"], "predict_us_estimate"].iloc[0]),
        "first_prediction_nodes": fitting.nodes[id(ranker)],
        "first_prediction_trees": fitting.trees,
        "time_model": {
            "file": TIME_MODEL_FILE, "target": "log2(time_ms)", "params": fitting.time_params.__dict__.copy(),
            "fit_seconds": round(fitting.time_fit_s, 1),
            # Problems of the test shapes; `chosen` is the ranker's pick.
            "test_calibration": calibration(
                test_prep.data, fitting.time_model.predict_log2_ms(test_prep.X, num_threads=base.num_threads),
                table["model_candidate"],
            ),
        },  # fmt: skip
        "blocked_engines": fitting.blocked,
        "dtypes": sorted(frame["dtype"].unique()),
        "shortlist_rank": SHORTLIST_RANK,
        # Numerical notes (nondeterministic, tensor_core...) are recorded only when the sweep could read them.
        "numeric_notes_recorded": bool(frame["notes"].str.contains("nondeterministic|tensor_core").any()),
        "spaces": fitting.spaces,
        "command": command,
    }


def _model_readme(name: str, summary: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    scores = json.dumps(summary["test_scores"], indent=2)
    made = f"\n\nMade by:\n\n```\n{summary['command']}\n```" if summary.get("command") else ""
    tm = summary.get("time_model") or {}
    cal = tm.get("test_calibration") or {}
    calibration_text = ""
    if cal:
        parts = [
            f"{group} median {100 * s['median']:.1f}%, p90 {100 * s['p90']:.1f}%"
            for group, s in cal.items()
            if isinstance(s, Mapping) and s.get("rows")
        ]
        calibration_text = (
            "\n\nPredicted device times (`time_model.txt`) on the held-out problems, |predicted / measured - 1| "
            "from the median and p90 of |log2 error|: " + "; ".join(parts) + "."
        )
    latency = summary.get("first_prediction_us_estimate")
    latency_text = (
        f"\n\nFirst prediction of a new problem on one core, as tuning estimates it from the tree nodes walked "
        f"(`algosel.learn.speed`): {latency:.0f} us; `benchmarks/predict_speed.py` times it."
        if latency is not None and not math.isnan(latency)
        else ""
    )
    return (
        f"# {name}\n\nA selector trained by `algosel train` on {summary['train_problems']} problems of "
        f"{env.get('gpu_name')} (cuDNN {env.get('cudnn')}, torch {env.get('torch')}); "
        f"{summary['test_problems']} problems of held-out shapes scored as below (time / best measured candidate)."
        f"{made}\n\n```\n{scores}\n```{calibration_text}{latency_text}\n\n"
        "Files: `model.txt` (LightGBM text model), `time_model.txt` (LightGBM regression of log2 device time), "
        "`manifest.json` (schema, parameters, data fingerprint, environment, scores, library versions, and the size "
        "and SHA-256 of every other file), `catalogue.parquet` (recorded candidates), `tuning.csv` "
        "(cross-validation of the tuning grid, with the estimated first-prediction latency of the settings tried), "
        "`test_report.csv` (the held-out comparison).\n"
    )
