"""The report's figures: CDFs of each selector's time ratio to the best, and network totals as bars.

Each function returns a matplotlib ``Figure`` (imported inside, so that importing this module stays quick); the
report (:func:`algosel.study.report.build_report`) saves them as PNG files beside its page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from algosel.study.report_data import KNOWN_SELECTORS, LABELS, ratios

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

#: One colour per selector, the same in every figure.
COLORS = dict(zip(KNOWN_SELECTORS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))

#: Tick positions of a log ratio axis: decades alone hide the differences near 1 that matter most.
_RATIO_TICKS = (1, 1.05, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def _ratio_axis(ax: Any, largest: float) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    top = max(largest, 1.1) * 1.1
    # Keep ticks at least 5% of the axis apart, so that 1, 1.05 and 1.1 do not overprint on a 1..500 axis.
    ticks: list[float] = []
    for t in _RATIO_TICKS:
        if t <= top and (not ticks or math.log(t / ticks[-1]) >= 0.05 * math.log(top)):
            ticks.append(t)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    ax.set_xlim(1, top)


def _cdf_figure(curves: Sequence[tuple[str, pd.Series, str, str]], xlabel: str, title: str) -> Figure:
    """Empirical CDFs of time ratios on a log-x axis: one (label, ratios, colour, line style) per curve."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    largest = 1.0
    for label, values, color, style in curves:
        r = values.dropna()
        if len(r):
            ax.ecdf(r, label=f"{label} ({len(r):,})", color=color, linestyle=style)
            largest = max(largest, float(r.max()))
    _ratio_axis(ax, largest)
    ax.axvline(1.05, color="0.5", linestyle=":", linewidth=1, label="5% slower than the best")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of problems")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title, fontsize="medium")
    return fig


def cdf_figure(table: pd.DataFrame, selectors: Sequence[str], title: str = "") -> Figure:
    """Empirical CDF of each selector's time ratio to the best, log-x, one line per selector."""
    r = ratios(table, selectors)
    curves = [(LABELS[sel], r[sel], COLORS[sel], "-") for sel in selectors]
    return _cdf_figure(curves, "time of the selector's choice / best measured time (log)", title)


def legacy_figure(table: pd.DataFrame, title: str = "") -> Figure:
    """Empirical CDF of the legacy API's ratios (:data:`algosel.records.analysis.LEGACY_RATIOS`) on the problems
    measured in both APIs; the graph API's mode A dashed, for reference."""
    from algosel.records.analysis import LEGACY_RATIOS

    both = table.dropna(subset=["best_legacy", "heuristic_a"])
    colors = ("tab:orange", "tab:brown", "tab:red", "tab:gray")
    curves = [(label, both[num] / both[den], color, "--" if num == "heuristic_a" else "-")
              for (label, num, den), color in zip(LEGACY_RATIOS, colors)]  # fmt: skip
    return _cdf_figure(curves, "time ratio (log)", title)


def network_figure(totals: pd.DataFrame, selectors: Sequence[str], title: str = "") -> Figure:
    """Horizontal bars: each network's (and dtype's) fwd + bwd total per selector relative to the best's."""
    from matplotlib.figure import Figure

    shown = [s for s in selectors if f"{s}_vs_best" in totals]
    wide = totals.assign(label=totals["network"] + " " + totals["size"].astype(str) + " " + totals["dtype"])
    wide = wide.set_index("label")[[f"{s}_vs_best" for s in shown]].rename(
        columns={f"{s}_vs_best": LABELS[s] for s in shown}
    )
    fig = Figure(figsize=(8, 1.2 + 0.3 * len(wide) * max(1, len(shown)) / 2), layout="constrained")
    ax = fig.subplots()
    if wide.empty:
        ax.text(0.5, 0.5, "no network suite in these records", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    # Reversed so that the first network is on top, as in the table.
    wide.iloc[::-1].plot.barh(ax=ax, width=0.8, color=[COLORS[s] for s in shown])
    # A total can only equal or exceed the best's, so the axis starts at 1: a bar's length is the slowdown.
    _ratio_axis(ax, float(wide.max().max()))
    ax.set_xlabel("network total / total of the best candidates (log)")
    ax.set_ylabel("")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize="small", loc="lower right")
    ax.set_title(title, fontsize="medium")
    return fig
