"""The text and figure of ``algosel evaluate``'s report: comparison tables, per-cell verdicts, the shortlist curve.

The numbers come from :mod:`algosel.learn.evaluate` (the metrics); :mod:`algosel.study.evaluation` and
:mod:`algosel.study.evaluation_layers` run them and show them with these functions.
"""

from __future__ import annotations

import pandas as pd


def format_comparison(comp: pd.DataFrame) -> str:
    """A comparison table (:func:`~algosel.learn.evaluate.report`, :func:`~algosel.learn.evaluate.cell_table` or
    :func:`~algosel.learn.evaluate.top_k_curve`) as text: ratios to 3 places, shares in %."""
    shown = comp.drop(columns=[c for c in ("model_invalid_top1",) if c in comp]).copy()
    for col in ("geomean", "p95", "worst", "total_time_ratio"):
        if col in shown:
            shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    for col in ("within_5pct", "top1"):
        if col in shown:
            shown[col] = shown[col].map(lambda v: f"{100 * v:.1f}%")
    return shown.rename(columns={"total_time_ratio": "total"}).to_string(index=False)


def format_cells(cells: pd.DataFrame, wins: pd.DataFrame) -> str:
    """Per cell: the model's geomean, share within 5% and total-time ratio beside each baseline's, and the verdict."""
    wide = cells.pivot_table(
        index=["direction", "dtype", "layout"],
        columns="selector",
        values=["geomean", "within_5pct", "total_time_ratio"],
    )
    rows = []
    for cell, w in zip(wins[["direction", "dtype", "layout"]].itertuples(index=False), wins.to_dict("records")):
        key = tuple(cell)
        row = {"cell": " ".join(key), "problems": w["problems"]}
        for sel in ("model", "heuristic_a", "heuristic_b", "pytorch_default"):
            if ("geomean", sel) not in wide.columns or pd.isna(wide.at[key, ("geomean", sel)]):
                continue
            row[sel] = (
                f"{wide.at[key, ('geomean', sel)]:.3f} {100 * wide.at[key, ('within_5pct', sel)]:.0f}% "
                f"{wide.at[key, ('total_time_ratio', sel)]:.2f}"
            )
        row["beats all"] = "yes" if w["all"] else "no"
        rows.append(row)
    return pd.DataFrame(rows).to_string(index=False)


def top_k_figure(curve: pd.DataFrame, title: str):
    """The measured-shortlist curve: geomean (left axis) and share within 5% (right axis) against k."""
    from matplotlib.figure import Figure  # heavy, and only needed here

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(curve["k"], curve["geomean"], "o-", color="tab:blue", label="geomean time / best")
    ax.set_xlabel("k (the model's k best-scored candidates, each timed once; the fastest kept)")
    ax.set_ylabel("geomean time / best", color="tab:blue")
    ax.set_xticks(list(curve["k"]))
    right = ax.twinx()
    right.plot(curve["k"], 100 * curve["within_5pct"], "s--", color="tab:red", label="within 5% of best")
    right.set_ylabel("% of problems within 5% of best", color="tab:red")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig


def format_totals(totals: pd.DataFrame) -> str:
    """Time totals (:func:`~algosel.learn.evaluate.time_totals`) as text, milliseconds and ratios to 3 places."""
    shown = totals.copy()
    shown["total_ms"] = shown["total_ms"].map(lambda v: f"{v:.3f}")
    shown["best_ms"] = shown["best_ms"].map(lambda v: f"{v:.3f}")
    shown["total_vs_best"] = shown["total_vs_best"].map(lambda v: f"{v:.3f}")
    return shown.to_string(index=False)


def format_model_differences(table: pd.DataFrame, most: int = 10) -> str:
    """The ``most`` problems of a :func:`~algosel.learn.evaluate.models_table` where the model's and the compare
    model's picks are furthest apart in time (at least 5%), each with both picks and PyTorch's default."""
    ratio = (table["model"] / table["compare_model"]).astype(float)
    apart = ratio.where(ratio >= 1, 1 / ratio)
    rows = table.assign(apart=apart)  # before filtering: a column set on an empty frame would bring its index
    rows = rows[rows["apart"] >= 1.05].sort_values("apart", ascending=False).head(most)
    if rows.empty:
        return "(none: every pick within 5% of the other's time)"

    def pick(name: str) -> pd.Series:
        return rows[f"{name}_candidate"] + " " + (rows[name] / rows["best"]).map("{:.2f}x".format)

    names = ("model", "compare_model", "pytorch_default")
    out = pd.DataFrame({"problem": rows.index, "best_ms": rows["best"].round(4), **{n: pick(n) for n in names}})
    return out.to_string(index=False)
