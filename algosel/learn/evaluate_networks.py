"""The selector judged on whole networks: each network's convolutions totalled as a training step runs them (forward,
weight gradient, the input gradient where the step computes it), leave-one-network-out (a model trained without any
of a network's shapes picks for it), and several models compared on a user's layers (:mod:`algosel.learn.evaluate`
holds the split and the per-problem metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from algosel.learn.evaluate import (
    SELECTORS,
    Prepared,
    fit_and_pick,
    pick_times,
)
from algosel.learn.ranker import RankerParams
from algosel.measure.steps import call_runs, input_needs_grad
from algosel.problem import SHAPE_FIELDS, ConvProblem
from algosel.records.analysis import per_problem

if TYPE_CHECKING:  # for annotations only
    from algosel.learn.selector import Selector


def network_totals(
    tables: Mapping[str, pd.DataFrame],
    suites: pd.DataFrame,
    dtypes: Iterable[str],
    selectors: Iterable[str] = SELECTORS,
) -> pd.DataFrame:
    """Whole-network fwd + bwd time per selector: the sum over every conv call of the network.

    ``tables`` maps a network to its :func:`selector_table` (indexed by problem key; with leave-one-network-out,
    each network's own), which must have a column per name of ``selectors``. A call whose input needs no gradient
    (the first conv over images; :func:`~algosel.measure.steps.input_needs_grad`) gets no ``bwd_data``: autograd
    does not compute it. Calls whose problem
    is not in the network's table are left out of the sums and counted in ``missing_problems``; ``calls`` counts
    the ones summed (one per conv call and direction). A network and dtype with no call in its table has no row.
    """
    selectors = tuple(selectors)
    rows = []
    by_key: dict[int, dict[str, dict[str, float]]] = {}  # each table's rows by problem key (tables are often shared)
    for (network, size), layers in suites.groupby(["network", "size"], sort=False):
        if network not in tables:
            continue
        table = tables[network]
        if id(table) not in by_key:
            by_key[id(table)] = table[["best", *selectors]].to_dict("index")
        table_times = by_key[id(table)]
        for dtype in dtypes:
            totals, calls, missing = _sums(layers, dtype, table_times, ("best", *selectors))
            if not calls:  # a dtype the records hold elsewhere (the grid's bfloat16) but not for this network
                continue
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
    # Its columns even where no network has a call in the tables (records of other layouts than the suites')
    columns = ["network", "size", "dtype", "missing_problems", "calls", *(f"{k}_ms" for k in ("best", *selectors))]
    out = pd.DataFrame(rows, columns=columns)
    # FPN has 20 input sizes: report their sum as one row, the way the variable-size training loop sees it.
    fpn = out[out["network"] == "fpn"]
    if not fpn.empty:
        summed = fpn.groupby("dtype", as_index=False).sum(numeric_only=True).assign(network="fpn", size="20 sizes")
        out = pd.concat([out[out["network"] != "fpn"], summed], ignore_index=True)
    for sel in selectors:
        out[f"{sel}_vs_best"] = out[f"{sel}_ms"] / out["best_ms"]
    return out


def _sums(
    layers: pd.DataFrame, dtype: str, table_times: Mapping[str, Mapping[str, float]], names: tuple[str, ...]
) -> tuple[dict[str, float], int, int]:
    """The time of each of ``names`` summed over every call of a network's ``layers`` in ``dtype`` that a training
    step runs, from ``table_times`` (a problem key's times by name); and the calls summed and those missing."""
    totals = dict.fromkeys(names, 0.0)
    missing = calls = 0
    for layer, needs_grad in zip(layers.to_dict("records"), input_needs_grad(layers)):
        p = ConvProblem(**{f: int(layer[f]) for f in SHAPE_FIELDS}, dtype=dtype, layout="nchw")
        for q in p.directions():
            if not call_runs(q.direction, needs_grad):
                continue
            times = table_times.get(q.key)
            if times is None:
                missing += 1
                continue
            calls += 1
            for name in totals:
                totals[name] += float(times[name])
    return totals, calls, missing


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


def model_pick_times(sel: Selector, prep: Prepared) -> pd.DataFrame:
    """:func:`pick_times` of ``sel``'s scores on every row of ``prep``, on the model's own shortlist."""
    return pick_times(prep.data, sel.ranker.score(prep.X), sel.manifest.get("shortlist_rank"))


def models_table(frame: pd.DataFrame, prep: Prepared, selectors: Mapping[str, Selector]) -> pd.DataFrame:
    """Per problem of ``prep``: the best time, the baselines of :func:`~algosel.records.analysis.per_problem`, and
    for each named model its pick's time (column ``<name>``) and candidate (``<name>_candidate``).

    Several models are judged on the same problems and records (their feature schema is the same: a model of
    another schema does not load). A model has no time where none of its shortlist ran correctly.
    """
    picks = {name: model_pick_times(sel, prep) for name, sel in selectors.items()}
    subset = frame[frame["problem_key"].isin(prep.data["problem_key"].unique())]
    table = per_problem(subset, extra={name: p["model"] for name, p in picks.items()})
    for name, p in picks.items():
        table[f"{name}_candidate"] = p["model_candidate"]
    return table


def time_totals(table: pd.DataFrame, selectors: Iterable[str]) -> pd.DataFrame:
    """Total time of each selector's picks over the problems of ``table`` (each problem once), overall and per
    direction and dtype, and its ratio to the total of the best candidates.

    Only problems where every selector and the best have a time are summed (``problems`` counts them), so that
    the totals compare the same work.
    """
    selectors = list(selectors)
    complete = table.dropna(subset=["best", *selectors])
    rows = []
    slices = [("all", "all", complete)]
    slices += [(g, str(v), part) for g in ("direction", "dtype") for v, part in complete.groupby(g)]
    for group, value, part in slices:
        best = float(part["best"].sum())
        for sel in selectors:
            total = float(part[sel].sum())
            rows.append({"group": group, "value": value, "selector": sel, "problems": len(part), "total_ms": total,
                         "best_ms": best, "total_vs_best": total / best if best else np.nan})  # fmt: skip
    return pd.DataFrame(rows)


def layers_totals(
    table: pd.DataFrame, layers: Mapping[str, pd.DataFrame], selectors: Iterable[str], unseen_network: str = "unseen"
) -> pd.DataFrame:
    """Whole-network time per layers file, network, input size, dtype and layout: fwd + bwd_data + bwd_filter of
    every row, times its ``calls``.

    Parameters
    ----------
    table : pandas.DataFrame
        Per problem (indexed by problem key): ``best``, ``dtype``, ``layout`` and a column per selector;
        typically :func:`models_table` after :func:`with_pytorch_fallback`.
    layers : mapping of str to DataFrame
        Layers frames (:func:`algosel.measure.layers.load_layers`) by a label (the file name).
    selectors : iterable of str
        Columns of ``table`` to total.
    unseen_network : str
        The network of a recorder's file of unseen problems, whose rows are shapes rather than a network's layers
        in order: every direction of each is counted. Elsewhere a call whose input needs no gradient (the file's
        ``input_grad`` column, else the first row of each (network, size) block: the network's first convolution,
        over its images; :func:`~algosel.measure.steps.input_needs_grad`) has its ``bwd_data`` left out, as
        :func:`network_totals` does.

    Returns
    -------
    pandas.DataFrame
        One row per (file, network, size, dtype, layout) that the table has problems of: ``calls`` summed,
        ``missing_calls`` (calls whose problem has no time for every selector: left out of every sum), and
        ``<selector>_ms``, ``<selector>_vs_best`` and ``best_ms``.
    """
    selectors = list(selectors)
    complete = table.dropna(subset=["best", *selectors])
    times = {key: row for key, row in zip(complete.index, complete[["best", *selectors]].to_numpy())}
    combos = sorted(set(zip(table["dtype"], table["layout"])))
    rows = []
    for label, frame in layers.items():
        for (network, size), block in frame.groupby(["network", "size"], sort=False):
            records = list(zip(block.to_dict("records"), input_needs_grad(block, unseen_network=unseen_network)))
            for dtype, layout in combos:
                sums = np.zeros(1 + len(selectors))
                calls = missing = 0
                for layer, needs_grad in records:
                    p = ConvProblem(**{f: int(layer[f]) for f in SHAPE_FIELDS}, dtype=dtype, layout=layout)
                    for q in p.directions():
                        if not call_runs(q.direction, needs_grad):
                            continue
                        weight = int(layer.get("calls", 1))
                        if q.key in times:
                            sums += weight * times[q.key]
                            calls += weight
                        else:
                            missing += weight
                if not calls:
                    continue
                row = {"file": label, "network": network, "size": size, "dtype": dtype, "layout": layout,
                       "calls": calls, "missing_calls": missing, "best_ms": float(sums[0])}  # fmt: skip
                for j, sel in enumerate(selectors, 1):
                    row[f"{sel}_ms"] = float(sums[j])
                    row[f"{sel}_vs_best"] = float(sums[j] / sums[0]) if sums[0] else np.nan
                rows.append(row)
    return pd.DataFrame(rows)
