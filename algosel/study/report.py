"""The analyst's report: an HTML page with plots comparing selectors on sweep records (``algosel report``).

:func:`build_report` writes ``index.html`` and the PNG figures it shows (side by side in one directory, linked by
relative paths, so the directory can be copied or served as it is):

- the distribution (CDF) of each selector's time ratio to the best measured candidate;
- geomean, p95, worst ratio, share within 5% of best and top-1 share, overall, per direction and per dtype
  (:func:`algosel.records.analysis.comparison_table`);
- the worst problems of each selector, with the candidate it chose and the best one;
- whole-network fwd + bwd totals of the network suites in the records (:func:`algosel.learn.evaluate.network_totals`).

With a model directory the model's picks are computed as ``algosel evaluate`` does (:func:`algosel.learn.evaluate.
held_out_table`): on the held-out test shapes only, and every selector is compared on those same problems.
Without one the model is left out and every problem of the records is used.

Heavy modules (pandas, matplotlib, LightGBM) are imported inside the functions that need them, so that the
command line, which imports this module to build its parser, stays quick to start.
"""

from __future__ import annotations

import argparse
import html
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

#: Selectors the report can show: the names of :data:`algosel.learn.evaluate.SELECTORS` (repeated here so that building
#: the command-line parser does not import the evaluation stack; a test checks that both agree).
KNOWN_SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default", "gemm_else_a")
#: Shown by default, in this order (the model first, where a model directory is given).
DEFAULT_SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default")
LABELS = {
    "model": "algosel model",
    "heuristic_a": "cuDNN heuristic mode A",
    "heuristic_b": "cuDNN heuristic mode B",
    "pytorch_default": "PyTorch default",
    "gemm_else_a": "GEMM lowering where it applies, else mode A",
}
#: One colour per selector, the same in every figure.
COLORS = dict(zip(KNOWN_SELECTORS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
DEFAULT_WORST = 10
CDF_PNG, WHOLE_NETWORKS_PNG, HELD_OUT_NETWORKS_PNG = "cdf.png", "network_totals.png", "network_totals_held_out.png"
LEGACY_PNG = "legacy.png"


class ReportError(ValueError):
    """Arguments the report cannot use (an unknown selector, the model without a model directory, ...).

    A ValueError, like :class:`~algosel.records.RecordsError` and :class:`~algosel.learn.selector.SelectorError`, so
    that the command line prints it as one line.
    """


def check_selectors(selectors: Iterable[str] | None, with_model: bool) -> list[str]:
    """The selectors to compare, validated: known names, no duplicates, ``model`` only with a model.

    ``None`` gives :data:`DEFAULT_SELECTORS` (without ``model`` when there is no model).
    """
    if selectors is None:
        return [s for s in DEFAULT_SELECTORS if with_model or s != "model"]
    if isinstance(selectors, str):  # a bare string would be taken apart into letters
        selectors = [selectors]
    chosen: list[str] = []
    for name in selectors:
        if name not in KNOWN_SELECTORS:
            raise ReportError(f"unknown selector {name!r}; choose from {', '.join(KNOWN_SELECTORS)}")
        if name == "model" and not with_model:
            raise ReportError("selector 'model' needs a model directory (--model DIR)")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ReportError("no selector to compare; choose from " + ", ".join(KNOWN_SELECTORS))
    return chosen


def cudnn_version(code: Any) -> str:
    """cuDNN's integer version (91900) as text (9.19.0); anything else as it is."""
    try:
        value = int(code)
    except (TypeError, ValueError):
        return str(code)
    return f"{value // 10000}.{value % 10000 // 100}.{value % 100}" if value >= 10000 else str(value)


# --------------------------------------------------------------------------------------------------- data
@dataclass
class Comparison:
    """What the report shows, computed once (:func:`compare`) and rendered by :func:`build_report`."""

    table: pd.DataFrame  # one row per compared problem: best and each selector's time (ms) and candidate
    selectors: list[str]
    held_out: bool  # True: the model's held-out test problems; False: every problem of the records
    whole_networks: pd.DataFrame  # network totals over every recorded call (selectors other than the model)
    held_out_networks: pd.DataFrame | None  # with a model: totals over the calls of held-out shapes only
    environments: list[dict[str, Any]]
    records: int
    problems: int  # in the records (of the environment compared)
    notes: list[str] = field(default_factory=list)


def compare(
    data_dirs: str | Path | Sequence[str | Path],
    model_dir: str | Path | None = None,
    selectors: Iterable[str] | None = None,
    force: bool = False,
) -> Comparison:
    """Load records (and a model) and compute everything the report shows.

    Raises :class:`~algosel.records.RecordsError` for a missing or unreadable data directory,
    :class:`~algosel.learn.selector.SelectorError` for a missing or corrupt model directory, or one made for another
    GPU or cuDNN than the records' unless ``force`` (as ``algosel evaluate``), and :class:`ReportError` for bad
    ``selectors``.
    """
    from algosel.learn.evaluate import Prepared, add_gemm_else_a, held_out_table
    from algosel.learn.models import check_records_environment
    from algosel.learn.ranker import fingerprint
    from algosel.learn.selector import Selector
    from algosel.records.analysis import per_problem
    from algosel.records.store import load_records, main_environment

    chosen = check_selectors(selectors, with_model=model_dir is not None)
    # The model first: a bad model directory is reported before seconds are spent reading records.
    # force: the report runs anywhere, and the model is judged on the records of its own GPU.
    sel = Selector.load(model_dir, force=True) if model_dir is not None else None
    data = [data_dirs] if isinstance(data_dirs, (str, Path)) else list(data_dirs)
    frame, envs = load_records(*data)
    notes = []
    # One GPU x cuDNN at a time: a problem's candidates are only comparable when measured on the same one.
    kept, records_env = main_environment(frame, envs)
    if sel is not None:  # the model's picks priced on another GPU's records would mean nothing
        other = check_records_environment(sel, model_dir, records_env, force)
        if other:
            notes.append(f"scored on records of another environment (--force): {', '.join(other)}")
    if len(kept) < len(frame):
        notes.append(f"{len(frame) - len(kept):,} records of other environments left out")
    frame = kept
    used_envs = [envs[e] for e in sorted(frame["env_id"].unique())]
    if set(frame["space"]) == {"legacy"}:
        notes.append(
            "these records are of cuDNN's legacy algorithms only: 'cuDNN heuristic mode A' is here the legacy "
            "API's cudnnGet*Algorithm_v7 ranking, and the other baselines do not apply"
        )

    everything = add_gemm_else_a(per_problem(frame))
    if sel is not None:
        if fingerprint(frame) != sel.manifest.get("data_fingerprint"):
            notes.append(
                "these records differ from the model's training records: the held-out split is recomputed on "
                "them, and shapes the model was trained on may be among the test shapes"
            )
        table = held_out_table(sel, frame, Prepared.build(frame, envs))
    else:
        table = everything

    # Baselines are not learned, so every recorded call of a network can be summed for them. The model's total
    # over a whole network would include shapes it was trained on: only held-out calls are summed for it (and for
    # every other selector alike).
    whole = suite_totals(frame, everything, [s for s in chosen if s != "model"])
    return Comparison(
        table=table,
        selectors=chosen,
        held_out=sel is not None,
        whole_networks=whole,
        held_out_networks=suite_totals(frame, table, chosen) if sel is not None else None,
        environments=used_envs,
        records=len(frame),
        problems=int(frame["problem_key"].nunique()),
        notes=notes,
    )


def suite_totals(frame: pd.DataFrame, table: pd.DataFrame, selectors: Sequence[str]) -> pd.DataFrame:
    """fwd + bwd totals per network and dtype (:func:`algosel.learn.evaluate.network_totals`) of the network suites in
    the records (``source`` ``suite:<network>``), summed over the problems of ``table`` only.

    Calls whose problem is not in ``table`` are counted in ``missing_problems``; networks with no call in it are
    left out. Where a selector had no correct candidate, PyTorch's default stands in, as in a framework.
    """
    import pandas as pd

    from algosel.learn.evaluate import network_totals, with_pytorch_fallback
    from algosel.measure.suites import load_suites

    networks = sorted(s.removeprefix("suite:") for s in frame["source"].unique() if s.startswith("suite:"))
    if not networks:
        return pd.DataFrame(columns=["network", "size", "dtype", "missing_problems", "calls", "best_ms"])
    tables = dict.fromkeys(networks, with_pytorch_fallback(table, selectors))
    totals = network_totals(tables, load_suites(), sorted(frame["dtype"].unique()), selectors)
    return totals[totals["calls"] > 0].reset_index(drop=True)


def ratios(table: pd.DataFrame, selectors: Sequence[str]) -> pd.DataFrame:
    """Per problem, each selector's time over the best measured time (1.0 = the best)."""
    return table[list(selectors)].div(table["best"], axis=0)


def worst_cases(table: pd.DataFrame, selector: str, n: int = DEFAULT_WORST) -> pd.DataFrame:
    """The ``n`` problems where ``selector`` is furthest from the best, worst first."""
    ratio = (table[selector] / table["best"]).nlargest(n)
    rows = table.loc[ratio.index]
    return rows.assign(ratio=ratio)[
        ["ratio", "source", f"{selector}_candidate", selector, "best_candidate", "best"]
    ].rename(columns={f"{selector}_candidate": "chosen_candidate", selector: "chosen_time_ms", "best": "best_time_ms"})


# ------------------------------------------------------------------------------------------------ figures
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


# --------------------------------------------------------------------------------------------------- HTML
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1500px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; margin-bottom: 0.3em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f2f2f2; } table.worst td, table.worst th { text-align: left; font-weight: normal; }
table.worst thead th { font-weight: 600; }
/* The worst-case tables hold problem keys and candidate ids of up to ~80 characters: a fixed layout at the width of
   the page, with long ids broken anywhere, keeps every column (the best candidate and its time included) inside a
   1280-px window instead of running off its right edge. */
table.worst { table-layout: fixed; width: 100%; }
table.worst td, table.worst th { word-break: break-all; overflow-wrap: anywhere; white-space: normal; }
.wide { overflow-x: auto; } .note { color: #555; font-size: 0.9em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; font-size: 0.9em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
code { font-size: 0.95em; }
"""


def _ratio(v: float) -> str:
    return "" if math.isnan(v) else f"{v:.3f}"


def _pct(v: float) -> str:
    return "" if math.isnan(v) else f"{100 * v:.1f}%"


def _stats_html(comp: pd.DataFrame, group: str) -> str:
    part = comp[comp["group"] == group].copy()
    part["selector"] = part["selector"].map(LABELS)
    drop = ["group", "model_invalid_top1"] + (["value"] if group == "all" else [])
    part = part.drop(columns=[c for c in drop if c in part]).rename(columns={"value": group})
    formatters = {"geomean": _ratio, "p95": _ratio, "worst": _ratio, "within_5pct": _pct, "top1": _pct}
    return part.to_html(index=False, formatters=formatters, border=0)


def _totals_html(totals: pd.DataFrame, selectors: Sequence[str]) -> str:
    shown = [s for s in selectors if f"{s}_ms" in totals]
    cols = ["network", "size", "dtype", "calls", "missing_problems", "best_ms"]
    cols += [c for s in shown for c in (f"{s}_ms", f"{s}_vs_best")]
    out = totals[cols].rename(columns={"missing_problems": "calls not summed"})
    out = out.rename(columns={f"{s}_ms": f"{LABELS[s]} ms" for s in shown})
    out = out.rename(columns={f"{s}_vs_best": f"{LABELS[s]} / best" for s in shown})
    return out.to_html(index=False, float_format=lambda v: f"{v:.3f}", border=0)


#: Column widths of a worst-case table (:func:`worst_cases` with the problem first), in % of the page width.
WORST_COLUMN_WIDTHS = {"problem": 27, "ratio": 6, "source": 10, "chosen_candidate": 22, "chosen_time_ms": 6.5,
                       "best_candidate": 22, "best_time_ms": 6.5}  # fmt: skip


def _worst_html(cases: pd.DataFrame) -> str:
    """A worst-case table with fixed column widths (see the ``table.worst`` style)."""
    body = cases.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, classes="worst")
    widths = [WORST_COLUMN_WIDTHS.get(c, 100 / len(cases.columns)) for c in cases.columns]
    cols = "".join(f'<col style="width: {w:g}%">' for w in widths)
    head, sep, rest = body.partition(">")  # after the opening <table ...> tag
    return f"{head}{sep}<colgroup>{cols}</colgroup>{rest}"


def _page(cmp: Comparison, data: list[str], model_dir: str | None, worst: int, figures: dict[str, str]) -> str:
    from algosel.problem import ConvProblem
    from algosel.records.analysis import comparison_table

    esc = html.escape
    table, selectors = cmp.table, cmp.selectors
    comp = comparison_table(table, selectors)
    envs = "; ".join(
        f"{e.get('gpu_name')} ({e.get('sm_count')} SMs), cuDNN {cudnn_version(e.get('cudnn'))}, "
        f"torch {e.get('torch')}, driver {e.get('driver')} (environment {e.get('env_id')})"
        for e in cmp.environments
    )
    shapes = len({ConvProblem.from_key(k).shape_key for k in table.index})
    if cmp.held_out:
        scope = (
            f"All selectors are compared on the same {len(table):,} held-out problems ({shapes:,} shapes): the "
            "test shapes of <code>algosel.learn.evaluate.is_test_shape</code>, never seen in training or tuning."
        )
    else:
        scope = (
            f"No model given: the model is omitted, and all selectors are compared on every one of the "
            f"{len(table):,} problems of the records ({shapes:,} shapes)."
        )
    meta = [
        ("data", ", ".join(data)),
        ("model", model_dir or "none"),
        ("environment", envs),
        ("records", f"{cmp.records:,} rows of {cmp.problems:,} problems"),
        ("compared", f"{len(table):,} problems" + (" (held-out shapes)" if cmp.held_out else " (all)")),
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>algosel report</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>algosel: selectors against the best measured candidate</h1>",
        '<dl class="meta">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in meta) + "</dl>",
        f"<p>{scope} The <em>time ratio</em> of a selector on a problem is the median time of the candidate it "
        "chose over that of the fastest correct candidate (1.0 = the best). cuDNN's heuristic modes take the first "
        "config of their list that ran correctly; PyTorch's default is its own convolution with "
        "<code>cudnn.benchmark = False</code>.</p>",
        *(f'<p class="note">Note: {esc(n)}.</p>' for n in cmp.notes),
        "<h2>Distribution of time ratios</h2>",
        f'<img src="{figures["cdf"]}" alt="CDF of time ratio to best per selector">',
        "<p class='note'>Share of problems (y) on which a selector's choice is at most x times slower than the best; "
        "a line further up and left is better. The count of problems is in the legend.</p>",
        "<h2>Summary tables</h2>",
        "<p class='note'>geomean, p95 and worst: time ratio to best; within_5pct: share of problems within 5% of "
        "the best; top1: share on which the selector chose the best.</p>",
    ]
    for group, heading in (("all", "Overall"), ("direction", "Per direction"), ("dtype", "Per dtype")):
        parts += [f"<h3>{heading}</h3>", _stats_html(comp, group)]
    for sel in selectors:
        missing = int(table[sel].isna().sum())
        if missing:
            parts.append(
                f"<p class='note'>{esc(LABELS[sel])} had no correct candidate on {missing} of these problems; "
                "its statistics leave them out (see <em>problems</em>).</p>"
            )
    if cmp.held_out and "invalid_top1" in table:
        parts.append(
            f"<p class='note'>The model's top-scored candidate was invalid (it fell through to the next) on "
            f"{int(table['invalid_top1'].sum())} of {len(table):,} problems.</p>"
        )
    if "legacy" in figures:
        from algosel.records.analysis import legacy_comparison

        legacy = legacy_comparison(table)
        shown = legacy.copy()
        for col in ("geomean", "p95", "worst"):
            shown[col] = shown[col].map(_ratio)
        for col in ("within_5pct", "top1"):
            shown[col] = shown[col].map(_pct)
        parts += [
            "<h2>Legacy API: cudnnConvolution* algorithms against engine configs</h2>",
            "<p class='note'>On the problems measured with both APIs: the legacy heuristic "
            "(<code>cudnnGet*Algorithm_v7</code>, first listed algorithm that ran correctly) against the best legacy "
            "algorithm, and the best legacy algorithm against the best of every candidate (engine configs of the "
            "graph API, GEMM lowering, PyTorch's default). Dashed: the graph API's mode A, for reference.</p>",
            f'<img src="{figures["legacy"]}" alt="CDF of legacy API time ratios">',
            f'<div class="wide">{shown.to_html(index=False, border=0)}</div>',
        ]
    parts.append(f"<h2>Worst cases (top {worst} per selector)</h2>")
    for sel in selectors:
        cases = worst_cases(table, sel, worst)
        cases = cases.rename_axis("problem").reset_index()
        parts += [f"<h3>{esc(LABELS[sel])}</h3>", f'<div class="wide">{_worst_html(cases)}</div>']
    parts.append("<h2>Networks: fwd + bwd_data + bwd_filter of every conv call</h2>")
    baselines = [s for s in selectors if s != "model"]
    parts.append(
        "<p class='note'>Each network's conv calls (<code>data/suites</code>, NCHW) summed per dtype, every "
        "direction of every call; the first conv of a classification network has no bwd_data. Calls whose "
        "problem is not in the records are not summed (<em>calls not summed</em>). Where a selector had no "
        "correct candidate, PyTorch's default time is used, as a framework falls back to it.</p>"
    )
    if baselines:
        parts += [
            "<h3>Whole networks (baselines; every recorded call)</h3>",
            f'<img src="{figures["whole"]}" alt="whole-network totals relative to best">',
            f'<div class="wide">{_totals_html(cmp.whole_networks, baselines)}</div>',
        ]
    if cmp.held_out_networks is not None:
        parts += [
            "<h3>Network calls of held-out shapes (every selector, the model included)</h3>",
            "<p class='note'>The model's total over a whole network would include shapes it was trained on, so "
            "here only the calls of held-out shapes are summed, for every selector alike (<em>calls not "
            "summed</em> counts the others). <code>algosel evaluate</code> gives whole-network totals of a model "
            "retrained without each network (leave-one-network-out).</p>",
            f'<img src="{figures["held"]}" alt="held-out network totals relative to best">',
            f'<div class="wide">{_totals_html(cmp.held_out_networks, selectors)}</div>',
        ]
    parts += ["</body></html>", ""]
    return "\n".join(parts)


#: Every file ``algosel report`` writes into its folder.
REPORT_FILES: tuple[str, ...] = ("index.html", CDF_PNG, WHOLE_NETWORKS_PNG, HELD_OUT_NETWORKS_PNG, LEGACY_PNG)


def build_report(
    data_dir: str | Path | Sequence[str | Path],
    model_dir: str | Path | None,
    out_dir: str | Path,
    selectors: Iterable[str] | None = None,
    worst: int = DEFAULT_WORST,
    overwrite: bool = False,
    force: bool = False,
) -> Path:
    """Write ``out_dir/index.html`` and its PNG figures; return the path of ``index.html``.

    ``data_dir``: a records directory (or several); ``model_dir``: a model directory, or None to compare the
    baselines alone on every problem; ``selectors``: names of :data:`KNOWN_SELECTORS` (default
    :data:`DEFAULT_SELECTORS`); ``worst``: problems listed per selector; ``force``: use a model made for another GPU
    or cuDNN than the records'. Errors are ValueErrors with one-line messages naming the bad value (see
    :func:`compare`).

    The files (:data:`REPORT_FILES`) are written together once all are made (:func:`algosel.files.write_output_dir`):
    a run that fails or is interrupted leaves ``out_dir`` as it was, and no figure of an earlier run stays beside
    the new page. A file of those names that ``algosel report`` did not write there is refused before any work
    (:class:`~algosel.files.OutputError`) unless ``overwrite``; other files of the folder are left alone.
    """
    import io

    from algosel.files import check_output_dir, write_output_dir

    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 1:
        raise ReportError(f"worst must be a positive integer, got {worst!r}")
    check_selectors(selectors, with_model=model_dir is not None)  # before any loading
    out = Path(out_dir)
    check_output_dir(out, "report", REPORT_FILES, overwrite=overwrite)  # before the seconds of loading, not after
    cmp = compare(data_dir, model_dir, selectors, force=force)
    files: dict[str, bytes] = {}

    def save(fig: Figure, name: str) -> None:
        png = io.BytesIO()
        fig.savefig(png, dpi=110, format="png")
        files[name] = png.getvalue()

    scope = "held-out problems" if cmp.held_out else "problems (all of the records)"
    figures = {"cdf": CDF_PNG, "whole": WHOLE_NETWORKS_PNG}
    save(cdf_figure(cmp.table, cmp.selectors, f"{len(cmp.table):,} {scope}"), CDF_PNG)
    baselines = [s for s in cmp.selectors if s != "model"]
    if baselines:
        save(network_figure(cmp.whole_networks, baselines, "whole networks, every recorded call"), WHOLE_NETWORKS_PNG)
    if cmp.held_out_networks is not None:
        figures["held"] = HELD_OUT_NETWORKS_PNG
        figure = network_figure(cmp.held_out_networks, cmp.selectors, "calls of held-out shapes only")
        save(figure, HELD_OUT_NETWORKS_PNG)
    if "best_legacy" in cmp.table:
        figures["legacy"] = LEGACY_PNG
        save(legacy_figure(cmp.table, "problems measured with both APIs"), LEGACY_PNG)
    data = [str(data_dir)] if isinstance(data_dir, (str, Path)) else [str(d) for d in data_dir]
    page = _page(cmp, data, None if model_dir is None else str(model_dir), worst, figures)
    files["index.html"] = page.encode("utf-8")
    write_output_dir(out, files, "report", REPORT_FILES, overwrite=overwrite)
    return out / "index.html"


# ---------------------------------------------------------------------------------------------- command line
def _selector_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``algosel report`` to the command line's subparsers."""
    p = subparsers.add_parser("report", help="write an HTML report with plots comparing the selectors")
    p.add_argument("--data", nargs="+", required=True, help="records: dataset directories or part files")
    p.add_argument("--model", default=None, help="model directory (default: none; the model is left out)")
    p.add_argument(
        "--out",
        required=True,
        help="directory that receives index.html and its PNG figures, written as one unit once all are made; an "
        "earlier report's files there are replaced, other files left alone",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the report's names (index.html, *.png) that algosel report did not write into --out "
        "(a user's, or one changed since; the folder's .algosel-outputs.json records what it wrote): without it, "
        "they are refused before any work",
    )
    p.add_argument("--worst", type=_positive, default=DEFAULT_WORST, help="worst problems listed per selector")
    p.add_argument("--force", action="store_true", help="score a model made for another GPU or cuDNN than the records")
    p.add_argument(
        "--selectors",
        type=_selector_list,
        default=None,
        help=f"comma-separated, of {', '.join(KNOWN_SELECTORS)} (default: {', '.join(DEFAULT_SELECTORS)})",
    )
    p.set_defaults(func=cmd_report)
    return p


def cmd_report(args: argparse.Namespace) -> int:
    """``algosel report``: build the report and print where it is."""
    t0 = time.perf_counter()
    index = build_report(
        args.data,
        args.model,
        args.out,
        selectors=args.selectors,
        worst=args.worst,
        overwrite=args.overwrite,
        force=args.force,
    )
    print(f"wrote {index} ({time.perf_counter() - t0:.1f} s)")
    return 0
