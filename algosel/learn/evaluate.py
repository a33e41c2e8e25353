"""Honest evaluation of the learned selector against cuDNN's heuristics, PyTorch's default and the best: the metrics.

- Splits are by *shape*, never by row: every direction, dtype and layout of a held-out shape is held out, so
  the model is judged on shapes it never saw. The shipped model is trained on the training shapes only; the
  test shapes (a fixed 20% chosen by hash) are what ``algosel evaluate`` reports on.
- Hyperparameters are tuned by cross-validation grouped by shape on the training shapes alone.
- Leave-one-network-out: for each real network, a model trained without any of its shapes picks for it, and
  the whole network's fwd + bwd time is totalled as its user would see it.

A pick is the highest-scored candidate that ran correctly: a candidate that fails to build or run is
detected by the runtime and falls through to the next, like frameworks do with cuDNN's list. How often the top
pick was not valid is reported (``invalid_top1``; ``wrong_top1`` for silent wrong results).

Besides geomean, p95, worst, share within 5% and top-1 of the time ratio, every table has the *total-time ratio*
(sum of the picked candidates' times over the sum of the best ones': what a user running all those convolutions
once would lose), and :func:`cell_table` breaks them down per direction x dtype x layout. :func:`top_k_curve`
is the measured shortlist: time the model's k best-scored candidates once and keep the fastest.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from algosel.learn.features import frame_features
from algosel.learn.ranker import Ranker, RankerParams, with_ratios
from algosel.learn.rules import SHORTLIST_RANK, shortlist_mask
from algosel.measure.steps import runs_in_training
from algosel.problem import ConvProblem
from algosel.records.analysis import comparison_table, per_problem, selector_stats

if TYPE_CHECKING:  # for annotations only
    from algosel.learn.selector import Selector

SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default", "gemm_else_a")
#: The baselines the model must beat in every cell (:func:`cell_wins`).
BASELINES = ("heuristic_a", "heuristic_b", "pytorch_default")
#: The cells of :func:`cell_table`.
CELL_FIELDS = ("direction", "dtype", "layout")
TEST_FRACTION = 0.2
#: The shortlist sizes of :func:`top_k_curve`.
TOP_K = tuple(range(1, 9))


@dataclass
class Prepared:
    """Records with ratios, their feature rows and shape keys, computed once and sliced by the splits."""

    data: pd.DataFrame
    X: np.ndarray
    shape: np.ndarray  # shape_key per row

    @classmethod
    def build(cls, frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> Prepared:
        data = with_ratios(frame)
        shapes = {k: ConvProblem.from_key(k).shape_key for k in data["problem_key"].unique()}
        return cls(data, frame_features(data, envs), data["problem_key"].map(shapes).to_numpy())

    def rows(self, mask: np.ndarray) -> Prepared:
        return Prepared(self.data[mask].reset_index(drop=True), self.X[mask], self.shape[mask])


def is_test_shape(shape_keys: Iterable[str], fraction: float = TEST_FRACTION) -> np.ndarray:
    """The fixed test split: a shape is held out when the hash of its key falls in the first ``fraction``."""
    return np.array([zlib.crc32(k.encode()) % 1000 < 1000 * fraction for k in shape_keys])


def test_shape_rows(frame: pd.DataFrame) -> np.ndarray:
    """Which records of ``frame`` are of the test shapes (:func:`is_test_shape`, worked out once per problem)."""
    keys = frame["problem_key"].unique()
    held = dict(zip(keys, is_test_shape(ConvProblem.from_key(k).shape_key for k in keys)))
    return frame["problem_key"].map(held).to_numpy(dtype=bool)


def pick_times(data: pd.DataFrame, scores: np.ndarray, shortlist_rank: int | None = SHORTLIST_RANK) -> pd.DataFrame:
    """Per problem: the time of the highest-scored correct candidate of the shortlist and whether the top-scored
    one was invalid."""
    scores = np.where(shortlist_mask(data, shortlist_rank), scores, -np.inf)
    d = data[["problem_key", "candidate_id", "status", "time_ms_median"]].assign(score=scores)
    d = d.sort_values(["problem_key", "score"], ascending=[True, False], kind="stable")
    top = d.groupby("problem_key").head(1).set_index("problem_key")
    ok = d[d["status"] == "ok"].groupby("problem_key").head(1).set_index("problem_key")
    return pd.DataFrame(
        {
            "model": ok["time_ms_median"],
            "model_candidate": ok["candidate_id"],
            "invalid_top1": top["status"] != "ok",
            "wrong_top1": top["status"] == "wrong_result",
        }
    )


def fit_and_pick(train: Prepared, test: Prepared, params: RankerParams) -> pd.DataFrame:
    ranker = Ranker(params).fit_prepared(train.data, train.X)
    return pick_times(test.data, ranker.score(test.X))


def cross_val_picks(prep: Prepared, params: RankerParams, folds: int = 5, progress: bool = False) -> pd.DataFrame:
    """Out-of-fold picks for every problem of ``prep``, folds grouped by shape."""
    uniq = np.unique(prep.shape)
    fold_of = {s: zlib.crc32(s.encode()) % folds for s in uniq}
    fold = np.array([fold_of[s] for s in prep.shape])
    parts = []
    for f in tqdm(range(folds), desc=f"cv {params.objective}", disable=not progress, leave=False):
        parts.append(fit_and_pick(prep.rows(fold != f), prep.rows(fold == f), params))
    return pd.concat(parts)


def selector_table(frame: pd.DataFrame, picks: pd.DataFrame) -> pd.DataFrame:
    """Per problem of ``picks``: best time and the time of every selector in :data:`SELECTORS` (and, as
    ``<selector>_candidate``, the id of the candidate each chose)."""
    table = per_problem(frame[frame["problem_key"].isin(picks.index)], extra={"model": picks["model"]})
    table["model_candidate"] = picks["model_candidate"]
    add_gemm_else_a(table)
    table["invalid_top1"] = picks["invalid_top1"]
    table["wrong_top1"] = picks["wrong_top1"]
    return table


def add_gemm_else_a(table: pd.DataFrame) -> pd.DataFrame:
    """Add the ``gemm_else_a`` selector (time and candidate) to a :func:`~algosel.records.analysis.per_problem`
    table, in place: GEMM lowering where the math allows (it wins most of those), cuDNN's mode A elsewhere."""
    has_gemm = table["gemm"].notna()
    table["gemm_else_a"] = table["gemm"].where(has_gemm, table["heuristic_a"])
    table["gemm_else_a_candidate"] = table["gemm_candidate"].where(has_gemm, table["heuristic_a_candidate"])
    return table


def held_out_table(sel: Selector, frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """:func:`selector_table` of the test shapes (:func:`is_test_shape`), with the model's picks scored by ``sel``
    on its own shortlist: every selector on the same held-out problems. ``envs``: the records' environments by id.

    Only the test shapes' records are featurised (a fifth of them: a problem's features depend on its own
    candidate list alone)."""
    test = Prepared.build(frame[test_shape_rows(frame)], envs)
    return selector_table(frame, pick_times(test.data, sel.ranker.score(test.X), sel.manifest.get("shortlist_rank")))


def mark_runs(table: pd.DataFrame, never_shapes: set[str]) -> pd.DataFrame:
    """Add the column ``runs`` to a table indexed by problem key, in place: False for the problems a training step
    never executes (the ``bwd_data`` of a shape in ``never_shapes``: every call of it takes an input that needs no
    gradient; :func:`~algosel.measure.steps.no_input_grad_shapes`), True elsewhere."""
    table["runs"] = runs_in_training(table.index, never_shapes)
    return table


def with_pytorch_fallback(table: pd.DataFrame, selectors: Iterable[str] = SELECTORS) -> pd.DataFrame:
    """Where a selector had no correct candidate, a framework falls back to PyTorch's own path: use its time."""
    return table.fillna({s: table["pytorch_default"] for s in selectors if s in table})


def geomean_ratio(table: pd.DataFrame, selector: str = "model") -> float:
    r = (table[selector] / table["best"]).dropna()
    return float(np.exp(np.log(r).mean()))


def total_time_ratio(table: pd.DataFrame, selector: str = "model") -> float:
    """Sum of the selector's times over the sum of the best times, on the problems where the selector has a time."""
    have = table[selector].notna()
    best = float(table.loc[have, "best"].sum())
    return float(table.loc[have, selector].sum()) / best if best > 0 else float("nan")


def summary(table: pd.DataFrame, selector: str = "model") -> dict[str, float]:
    """One selector's headline figures on a :func:`selector_table`, over the problems where it has a time: their
    number, the geomean time ratio, the share within 5% of the best and the total-time ratio."""
    ratio = (table[selector] / table["best"]).dropna()
    return {
        "problems": int(len(ratio)),
        "geomean": geomean_ratio(table, selector),
        "within_5pct": float((ratio <= 1.05).mean()),
        "total_time_ratio": total_time_ratio(table, selector),
    }


def report(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison of every selector per direction, per dtype and overall (see :mod:`algosel.records.analysis`),
    with the total-time ratio of each (:func:`total_time_ratio`)."""
    selectors = [s for s in SELECTORS if s in table]
    comp = comparison_table(table, selectors)
    totals = {("all", "all", sel): total_time_ratio(table, sel) for sel in selectors}
    for group in ("direction", "dtype"):
        for value, part in table.groupby(group):
            totals.update({(group, str(value), sel): total_time_ratio(part, sel) for sel in selectors})
    comp["total_time_ratio"] = [totals[k] for k in zip(comp["group"], comp["value"], comp["selector"])]
    invalid = {"all": table["invalid_top1"].mean()} if "invalid_top1" in table else {}
    comp["model_invalid_top1"] = np.where(comp["selector"] == "model", comp["group"].map(invalid), np.nan)
    return comp


def cell_table(table: pd.DataFrame, selectors: Iterable[str] = SELECTORS) -> pd.DataFrame:
    """Per direction x dtype x layout cell and selector: problems, geomean, p95, worst, share within 5% of the best,
    top-1 and total-time ratio."""
    rows = []
    selectors = [s for s in selectors if s in table]
    for cell, part in table.groupby(list(CELL_FIELDS), sort=True):
        for sel in selectors:
            stats = selector_stats(part[sel] / part["best"])
            rows.append({**dict(zip(CELL_FIELDS, cell)), "selector": sel, **stats,
                         "total_time_ratio": total_time_ratio(part, sel)})  # fmt: skip
    return pd.DataFrame(rows)


def cell_wins(cells: pd.DataFrame, baselines: Iterable[str] = BASELINES) -> pd.DataFrame:
    """Per cell of :func:`cell_table`: does the model beat each baseline? It does where its geomean is lower, its
    share within 5% of the best no lower and its total-time ratio no higher. ``all`` is True where it beats every
    one of them."""
    rows = []
    for cell, part in cells.groupby(list(CELL_FIELDS), sort=True):
        s = part.set_index("selector")
        row: dict[str, Any] = dict(zip(CELL_FIELDS, cell))
        row["problems"] = int(s.at["model", "problems"])
        for b in baselines:
            if b not in s.index or pd.isna(s.at[b, "geomean"]):
                row[f"beats_{b}"] = None  # e.g. mode B of legacy records: no such baseline
                continue
            row[f"beats_{b}"] = bool(
                s.at["model", "geomean"] < s.at[b, "geomean"]
                and s.at["model", "within_5pct"] >= s.at[b, "within_5pct"]
                and s.at["model", "total_time_ratio"] <= s.at[b, "total_time_ratio"]
            )
        row["all"] = all(v for k, v in row.items() if k.startswith("beats_") and v is not None)
        rows.append(row)
    return pd.DataFrame(rows)


def top_k_curve(
    data: pd.DataFrame,
    scores: np.ndarray,
    ks: Iterable[int] = TOP_K,
    shortlist_rank: int | None = SHORTLIST_RANK,
) -> pd.DataFrame:
    """The measured shortlist: per k, the fastest (by recorded time) of the model's k best-scored correct
    candidates over the best of all, as if those k were timed once and the fastest kept.

    Candidates that fail are skipped, as :func:`pick_times` skips them, so k = 1 is the model's own pick.

    Returns
    -------
    DataFrame
        One row per k: ``k``, ``problems``, ``geomean``, ``within_5pct``, ``top1`` and ``total_time_ratio``.
    """
    ok = (data["status"] == "ok").to_numpy() & data["time_ms_median"].notna().to_numpy()
    keep = ok & shortlist_mask(data, shortlist_rank)
    best = data.loc[ok].groupby("problem_key")["time_ms_median"].min()
    d = data.loc[keep, ["problem_key", "time_ms_median"]].assign(score=np.asarray(scores)[keep])
    d = d.sort_values(["problem_key", "score"], ascending=[True, False], kind="stable")
    d["position"] = d.groupby("problem_key").cumcount()
    rows = []
    for k in ks:
        picked = d[d["position"] < k].groupby("problem_key")["time_ms_median"].min()
        b = best.loc[picked.index]
        stats = selector_stats(picked / b)
        rows.append({"k": int(k), **stats, "total_time_ratio": float(picked.sum() / b.sum())})
    return pd.DataFrame(rows)


def beats_baselines(comp: pd.DataFrame, baselines: Iterable[str] = BASELINES) -> pd.DataFrame:
    """Per group: does the model beat each baseline in geomean ratio (lower) and share within 5% (higher)?"""
    rows = []
    for (group, value), part in comp.groupby(["group", "value"], sort=False):
        s = part.set_index("selector")
        row = {"group": group, "value": value}
        for b in baselines:
            if b not in s.index or pd.isna(s.at[b, "geomean"]):
                continue
            row[f"beats_{b}"] = bool(
                s.at["model", "geomean"] < s.at[b, "geomean"] and s.at["model", "within_5pct"] > s.at[b, "within_5pct"]
            )
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- a user's own layers
