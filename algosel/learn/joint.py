"""``algosel train --joint``: one selector over the records of several GPUs of one cuDNN, with hardware features.

A one-GPU model sees constant hardware columns and cannot learn what changes from one GPU to the next. A joint
model is trained on every GPU's records at once: each problem of each GPU is one ranking (records are grouped per
environment, :func:`algosel.learn.ranker.with_ratios`), and the hardware features (SM count, L2, memory bandwidth,
clocks, memory: :data:`algosel.records.environment.HARDWARE_FIELDS`) tell the GPUs apart. It covers each GPU it was
trained on exactly and, warned, other GPUs of their family (:func:`algosel.records.environment.coverage`).

No tuning: the hyperparameters are a tuned model's (``params_from``); cross-validation across GPUs would rank
settings by a mixture of GPUs' scores. The held-out shapes (:func:`~algosel.learn.evaluate.is_test_shape`) are held
out on every GPU, and the held-out report is per GPU.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algosel.learn.artifact import SelectorError, new_manifest, replaceable_files
from algosel.learn.cache_records import held_out, with_cache_records
from algosel.learn.calibration import calibration_files
from algosel.learn.evaluate import Prepared, pick_times, report, selector_table
from algosel.learn.ranker import Ranker, RankerParams, fingerprint
from algosel.learn.rules import SHORTLIST_RANK
from algosel.learn.selector import Selector
from algosel.learn.time_model import TIME_MODEL_FILE, TimeModel, TimeModelParams
from algosel.records.catalogue import blocked_engines, build_catalogue
from algosel.records.environment import gpu_slug
from algosel.records.store import RecordsError, load_records

#: What a score row keeps of :func:`~algosel.learn.evaluate.report`.
SCORE_FIELDS = ("geomean", "p95", "worst", "within_5pct", "top1", "total_time_ratio")


def joint_environments(
    frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The records of every GPU with the cuDNN of the most recorded one, and one environment per GPU (most
    records first): a model ranks one cuDNN's engine configs."""
    slugs = frame["env_id"].map({e: gpu_slug(env) for e, env in envs.items()})
    counts = slugs.value_counts()
    if counts.empty:
        raise RecordsError("no records to choose environments from")
    cudnn = int(envs[frame.loc[slugs == counts.index[0], "env_id"].iloc[0]].get("cudnn") or 0)
    keep = [e for e, env in envs.items() if int(env.get("cudnn") or 0) == cudnn]
    frame = frame[frame["env_id"].isin(keep)]
    ordered: list[dict[str, Any]] = []
    for slug in counts.index:
        for e in keep:
            if gpu_slug(envs[e]) == slug and not any(gpu_slug(o) == slug for o in ordered):
                ordered.append(dict(envs[e]))
    return frame, ordered


def joint_catalogue(frame: pd.DataFrame, environments: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Every GPU's catalogue, marked by ``env_id``: a joint model loaded on one of its GPUs looks up that GPU's
    records (its candidate lists and measured times), on another GPU of the family its main GPU's."""
    return pd.concat(
        [build_catalogue(frame[frame["env_id"] == e["env_id"]]).assign(env_id=e["env_id"]) for e in environments],
        ignore_index=True,
    )


def fit_selector(
    train: Prepared,
    params: RankerParams,
    time_params: TimeModelParams | None,
    frame: pd.DataFrame,
    environments: Sequence[Mapping[str, Any]],
) -> Selector:
    """A selector fitted on ``train`` (records of any GPUs), its catalogue from ``frame``'s main GPU."""
    ranker = Ranker(params).fit_prepared(train.data, train.X)
    time_model = TimeModel(time_params).fit_prepared(train.data, train.X) if time_params is not None else None
    main = environments[0]
    catalogue = joint_catalogue(frame, environments)
    manifest = {
        "environment": dict(main),
        "environments": [dict(e) for e in environments],
        "shortlist_rank": SHORTLIST_RANK,
        "spaces": sorted(frame["space"].unique()),
        "blocked_engines": blocked_engines(frame),
    }
    return Selector(ranker, manifest, catalogue, time_model)


def scores(ranker: Ranker, records: pd.DataFrame, rows: Prepared) -> dict[str, dict[str, float]]:
    """Every selector's :data:`SCORE_FIELDS` (the model's picks by ``ranker``, cuDNN's heuristics, PyTorch's
    default...) on the problems of ``rows``, records of one GPU, against the best of ``records``."""
    table = selector_table(records, pick_times(rows.data, ranker.score(rows.X)))
    overall = report(table)
    overall = overall[overall["group"] == "all"].set_index("selector")
    return {
        s: {k: (None if pd.isna(v) else float(v)) for k, v in row.items() if k in SCORE_FIELDS}
        for s, row in overall.iterrows()
    }


def held_out_scores(sel: Selector, frame: pd.DataFrame, test: Prepared) -> dict[str, dict[str, dict[str, float]]]:
    """Per GPU (its slug): :func:`scores` on that GPU's held-out problems."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for env_id in pd.unique(test.data["env_id"]):
        rows = test.rows((test.data["env_id"] == env_id).to_numpy())
        slug = gpu_slug(next(e for e in sel.manifest["environments"] if e["env_id"] == env_id))
        out[slug] = scores(sel.ranker, frame[frame["env_id"] == env_id], rows)
    return out


def train_joint(data: Sequence[str | Path], params: RankerParams, models_root: str | Path = "models",
                name: str | None = None, force: bool = False, command: str | None = None,
                cache_records: Sequence[pd.DataFrame] = (), cache_weight: float = 1.0,
                replace_shipped: bool = False) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    """Fit and save a joint model on ``data`` (records of several GPUs) with ``params``; see the module docstring.
    ``cache_records`` and ``cache_weight``: runtime caches' records learnt beside them, as
    :func:`algosel.learn.train.train` says (a new model directory, even with ``force``).

    Raises
    ------
    RecordsError
        Records of one GPU only (train it with ``algosel train``), or no held-out shape.
    SelectorError
        An existing model directory without ``force``, or one that holds other files than its model's, or a
        shipped model without ``replace_shipped`` (:func:`~algosel.learn.artifact.replaceable_files`).
    """
    t0 = time.perf_counter()
    frame, envs = load_records(*data)
    from_cache = None
    if cache_records:
        frame, envs, from_cache = with_cache_records(frame, envs, list(cache_records), cache_weight)
    frame, environments = joint_environments(frame, envs)
    if len(environments) < 2:
        raise RecordsError(
            f"{', '.join(map(str, data))}: records of one GPU ({environments[0].get('gpu_name')}); a joint model needs "
            "two or more: train this one without --joint"
        )
    out = _joint_dir(models_root, name, environments, force, from_cache, replace_shipped)
    prep = Prepared.build(frame, envs)
    test = held_out(prep)
    if not test.any() or test.all():
        raise RecordsError(f"{', '.join(map(str, data))}: too few shapes to hold some out and train on the rest")
    train_prep, test_prep = prep.rows(~test), prep.rows(test)
    t_fit = time.perf_counter()
    sel = fit_selector(train_prep, params, TimeModelParams(num_threads=params.num_threads), frame, environments)
    fit_s = time.perf_counter() - t_fit
    scores = held_out_scores(sel, frame, test_prep)
    per_gpu = {gpu_slug(e): int(np.sum(frame["env_id"] == e["env_id"])) for e in environments}
    summary = _joint_summary(data, frame, train_prep, test_prep, params, scores, sel, environments, per_gpu, fit_s,
                             command)  # fmt: skip
    summary["total_seconds"] = round(time.perf_counter() - t0, 1)
    if from_cache is not None:
        summary["cache_records"] = from_cache
    manifest = new_manifest(params, environments[0], {**summary, "environments": environments})
    lines = _joint_readme(out.name, environments, per_gpu, scores, command)
    joint = Selector(sel.ranker, manifest, joint_catalogue(frame, environments), sel.time_model)
    files = {"README.md": "\n".join(lines), **calibration_files(joint, frame, envs)}  # the runtime's rule reads it
    joint.save(out, replace=force, extra_files=files, replace_shipped=replace_shipped)
    return out, summary


def _joint_dir(models_root: str | Path, name: str | None, environments: Sequence[Mapping[str, Any]], force: bool,
               from_cache: Any, replace_shipped: bool) -> Path:  # fmt: skip
    """The joint model's directory (default: its GPUs and cuDNN), checked before the fit."""
    out = Path(models_root) / (name or "joint-" + "-".join(gpu_slug(e).rsplit("-cudnn", 1)[0] for e in environments)
                               + f"-cudnn{environments[0].get('cudnn')}")  # fmt: skip
    if out.exists() and (not force or from_cache is not None):
        if from_cache is not None:
            raise SelectorError(f"{out} exists; a model retrained on a runtime cache is a new model directory, never "
                                "an edit of one: choose another --name or --models")  # fmt: skip
        raise SelectorError(f"{out} exists; pass --force to replace it, or choose another --name or --models")
    if out.exists():
        replaceable_files(out, replace_shipped)
    return out


def _joint_readme(name: str, environments: Sequence[Mapping[str, Any]], per_gpu: Mapping[str, int],
                  scores: Mapping[str, Mapping[str, Mapping[str, Any]]], command: str | None) -> list[str]:  # fmt: skip
    """The joint model's README lines: its GPUs and records, and its held-out scores per GPU."""
    lines = [f"# {name}", "", "A joint selector (`algosel train --joint`) of " + ", ".join(
        f"{e.get('gpu_name')} ({per_gpu[gpu_slug(e)]:,} records)" for e in environments) + f", cuDNN "
        f"{environments[0].get('cudnn')}. Held-out problems, time / best measured candidate:", ""]  # fmt: skip
    for slug, rows in scores.items():
        lines += [f"## {slug}", "", "| selector | geomean | within 5% | total |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {s} | {r['geomean']:.3f} | {100 * r['within_5pct']:.1f}% | {r['total_time_ratio']:.3f} |"
            for s, r in rows.items()
            if r.get("geomean") is not None
        ]
        lines.append("")
    if command:
        lines += ["Made by:", "", "```", command, "```", ""]
    return lines

def _joint_summary(data, frame, train_prep, test_prep, params, scores, sel, environments, per_gpu, fit_s,
                   command) -> dict[str, Any]:  # fmt: skip
    """The manifest's account of a joint training: data per GPU, split, held-out scores per GPU."""
    return {
        "data_fingerprint": fingerprint(frame),
        "data": [str(d) for d in data],
        "records": int(len(frame)),
        "records_per_gpu": per_gpu,
        "train_problems": int(train_prep.data.groupby(["problem_key", "env_id"]).ngroups),
        "test_problems": int(test_prep.data.groupby(["problem_key", "env_id"]).ngroups),
        "split": {"method": "crc32(shape_key) % 1000 < 1000 * test_fraction", "held out on": "every GPU"},
        "tuning": [{**params.__dict__, "chosen": True}],
        "test_scores": scores[gpu_slug(environments[0])],
        "test_scores_per_gpu": scores,
        "final_fit_seconds": round(fit_s, 1),
        "blocked_engines": sel.manifest["blocked_engines"],
        "dtypes": sorted(frame["dtype"].unique()),
        "shortlist_rank": SHORTLIST_RANK,
        "spaces": sel.manifest["spaces"],
        "time_model": {"file": TIME_MODEL_FILE, "target": "log2(time_ms)"},
        "command": command,
    }
