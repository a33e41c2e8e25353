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
from algosel.problem import SHAPE_FIELDS, ConvProblem
from algosel.records.analysis import comparison_table, per_problem

if TYPE_CHECKING:  # for annotations only
    from algosel.learn.selector import Selector

SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default", "gemm_else_a")
TEST_FRACTION = 0.2


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


def held_out_table(sel: Selector, frame: pd.DataFrame, prep: Prepared) -> pd.DataFrame:
    """:func:`selector_table` of the test shapes (:func:`is_test_shape`), with the model's picks scored by ``sel``
    on its own shortlist: every selector on the same held-out problems."""
    test = prep.rows(is_test_shape(prep.shape))
    return selector_table(frame, pick_times(test.data, sel.ranker.score(test.X), sel.manifest.get("shortlist_rank")))


def with_pytorch_fallback(table: pd.DataFrame, selectors: Iterable[str] = SELECTORS) -> pd.DataFrame:
    """Where a selector had no correct candidate, a framework falls back to PyTorch's own path: use its time."""
    return table.fillna({s: table["pytorch_default"] for s in selectors if s in table})


def geomean_ratio(table: pd.DataFrame, selector: str = "model") -> float:
    r = (table[selector] / table["best"]).dropna()
    return float(np.exp(np.log(r).mean()))


def report(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison of every selector per direction, per dtype and overall (see :mod:`algosel.records.analysis`)."""
    comp = comparison_table(table, list(SELECTORS))
    invalid = {"all": table["invalid_top1"].mean()}
    comp["model_invalid_top1"] = np.where(comp["selector"] == "model", comp["group"].map(invalid), np.nan)
    return comp


def network_totals(
    tables: Mapping[str, pd.DataFrame],
    suites: pd.DataFrame,
    dtypes: Iterable[str],
    selectors: Iterable[str] = SELECTORS,
) -> pd.DataFrame:
    """Whole-network fwd + bwd time per selector: the sum over every conv call of the network.

    ``tables`` maps a network to its :func:`selector_table` (indexed by problem key; with leave-one-network-out,
    each network's own), which must have a column per name of ``selectors``. The first conv of a classification
    network gets no ``bwd_data`` (autograd does not compute the gradient of the input image). Calls whose problem
    is not in the network's table are left out of the sums and counted in ``missing_problems``; ``calls`` counts
    the ones summed (one per conv call and direction).
    """
    selectors = tuple(selectors)
    rows = []
    for (network, size), layers in suites.groupby(["network", "size"], sort=False):
        if network not in tables:
            continue
        table_times = tables[network]
        for dtype in dtypes:
            totals = dict.fromkeys(("best", *selectors), 0.0)
            missing = calls = 0
            for i, layer in enumerate(layers.to_dict("records")):
                fields = {f: int(layer[f]) for f in SHAPE_FIELDS}
                p = ConvProblem(**fields, dtype=dtype, layout="nchw")
                for q in p.directions():
                    if i == 0 and q.direction == "bwd_data" and network != "fpn":
                        continue
                    if q.key not in table_times.index:
                        missing += 1
                        continue
                    calls += 1
                    for sel in totals:
                        totals[sel] += float(table_times.at[q.key, sel])
            rows.append(
                {
                    "network": network,
                    "size": size,
                    "dtype": dtype,
                    "missing_problems": missing,
                    "calls": calls,
                    **{f"{k}_ms": v for k, v in totals.items()},
                }
            )
    out = pd.DataFrame(rows)
    # FPN has 20 input sizes: report their sum as one row, the way the variable-size training loop sees it.
    fpn = out[out["network"] == "fpn"]
    if not fpn.empty:
        summed = fpn.groupby("dtype", as_index=False).sum(numeric_only=True).assign(network="fpn", size="20 sizes")
        out = pd.concat([out[out["network"] != "fpn"], summed], ignore_index=True)
    for sel in selectors:
        out[f"{sel}_vs_best"] = out[f"{sel}_ms"] / out["best_ms"]
    return out


def leave_one_network_out(
    prep: Prepared, frame: pd.DataFrame, suites: pd.DataFrame, params: RankerParams, progress: bool = True
) -> pd.DataFrame:
    """Picks for each network's problems by a model trained without any shape of that network."""
    parts = []
    for network, layers in tqdm(list(suites.groupby("network")), desc="leave one network out", disable=not progress):
        shapes = {
            ConvProblem(**{f: int(row[f]) for f in SHAPE_FIELDS}, dtype="float32").shape_key
            for row in layers.to_dict("records")
        }
        held = np.isin(prep.shape, list(shapes))
        if not held.any():
            continue
        parts.append(fit_and_pick(prep.rows(~held), prep.rows(held), params).assign(network=network))
    return pd.concat(parts) if parts else pd.DataFrame()


def beats_baselines(comp: pd.DataFrame, baselines: Iterable[str] = ("heuristic_a", "pytorch_default")) -> pd.DataFrame:
    """Per group: does the model beat each baseline in geomean ratio (lower) and share within 5% (higher)?"""
    rows = []
    for (group, value), part in comp.groupby(["group", "value"], sort=False):
        s = part.set_index("selector")
        row = {"group": group, "value": value}
        for b in baselines:
            row[f"beats_{b}"] = bool(
                s.at["model", "geomean"] < s.at[b, "geomean"] and s.at["model", "within_5pct"] > s.at[b, "within_5pct"]
            )
        rows.append(row)
    return pd.DataFrame(rows)
