"""The report's page: the HTML of a :class:`~algosel.study.report_data.Comparison`, its figures linked by name.

:func:`render_page` returns the text of ``index.html``; tables are pandas' HTML with formatted ratios and shares,
the worst cases at fixed column widths so that long candidate ids stay inside the page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from algosel.study.report_data import LABELS, Comparison, cudnn_version, worst_cases

if TYPE_CHECKING:
    import pandas as pd

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


def render_page(cmp: Comparison, data: list[str], model_dir: str | None, worst: int, figures: dict[str, str]) -> str:
    """The text of the report's ``index.html``.

    ``data`` and ``model_dir`` are shown as given; ``worst``: problems listed per selector; ``figures``: the file
    name of each figure shown, by role (``cdf``, ``whole``, and where drawn ``held`` and ``legacy``).
    """
    parts = [
        *_head_parts(cmp, data, model_dir, figures),
        *_summary_parts(cmp),
        *(_legacy_parts(cmp, figures["legacy"]) if "legacy" in figures else []),
        f"<h2>Worst cases (top {worst} per selector)</h2>",
    ]
    for sel in cmp.selectors:
        cases = worst_cases(cmp.table, sel, worst).rename_axis("problem").reset_index()
        parts += [f"<h3>{html.escape(LABELS[sel])}</h3>", f'<div class="wide">{_worst_html(cases)}</div>']
    parts += [*_network_parts(cmp, figures), "</body></html>", ""]
    return "\n".join(parts)


def _scope(cmp: Comparison) -> str:
    """Which problems the page compares, in a sentence."""
    from algosel.problem import ConvProblem

    table = cmp.table
    shapes = len({ConvProblem.from_key(k).shape_key for k in table.index})
    if cmp.held_out:
        return (
            f"All selectors are compared on the same {len(table):,} held-out problems ({shapes:,} shapes): the "
            "test shapes of <code>algosel.learn.evaluate.is_test_shape</code>, never seen in training or tuning."
        )
    return (
        f"No model given: the model is omitted, and all selectors are compared on every one of the "
        f"{len(table):,} problems of the records ({shapes:,} shapes)."
    )


def _head_parts(cmp: Comparison, data: list[str], model_dir: str | None, figures: dict[str, str]) -> list[str]:
    """The page's head, what it compares (data, model, environment) and the CDF figure."""
    esc, table = html.escape, cmp.table
    envs = "; ".join(
        f"{e.get('gpu_name')} ({e.get('sm_count')} SMs), cuDNN {cudnn_version(e.get('cudnn'))}, "
        f"torch {e.get('torch')}, driver {e.get('driver')} (environment {e.get('env_id')})"
        for e in cmp.environments
    )
    meta = [
        ("data", ", ".join(data)),
        ("model", model_dir or "none"),
        ("environment", envs),
        ("records", f"{cmp.records:,} rows of {cmp.problems:,} problems"),
        ("compared", f"{len(table):,} problems" + (" (held-out shapes)" if cmp.held_out else " (all)")),
    ]
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>algosel report</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>algosel: selectors against the best measured candidate</h1>",
        '<dl class="meta">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in meta) + "</dl>",
        f"<p>{_scope(cmp)} The <em>time ratio</em> of a selector on a problem is the median time of the candidate it "
        "chose over that of the fastest correct candidate (1.0 = the best). cuDNN's heuristic modes take the first "
        "config of their list that ran correctly; PyTorch's default is its own convolution with "
        "<code>cudnn.benchmark = False</code>.</p>",
        *(f'<p class="note">Note: {esc(n)}.</p>' for n in cmp.notes),
        "<h2>Distribution of time ratios</h2>",
        f'<img src="{figures["cdf"]}" alt="CDF of time ratio to best per selector">',
        "<p class='note'>Share of problems (y) on which a selector's choice is at most x times slower than the best; "
        "a line further up and left is better. The count of problems is in the legend.</p>",
    ]


def _summary_parts(cmp: Comparison) -> list[str]:
    """The summary tables (overall, per direction, per dtype) and what their statistics leave out."""
    from algosel.records.analysis import comparison_table

    table, selectors = cmp.table, cmp.selectors
    comp = comparison_table(table, selectors)
    parts = [
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
                f"<p class='note'>{html.escape(LABELS[sel])} had no correct candidate on {missing} of these problems; "
                "its statistics leave them out (see <em>problems</em>).</p>"
            )
    if cmp.held_out and "invalid_top1" in table:
        parts.append(
            f"<p class='note'>The model's top-scored candidate was invalid (it fell through to the next) on "
            f"{int(table['invalid_top1'].sum())} of {len(table):,} problems.</p>"
        )
    return parts


def _legacy_parts(cmp: Comparison, figure: str) -> list[str]:
    """The legacy API's section: its figure and its table of ratios."""
    from algosel.records.analysis import legacy_comparison

    shown = legacy_comparison(cmp.table).copy()
    for col in ("geomean", "p95", "worst"):
        shown[col] = shown[col].map(_ratio)
    for col in ("within_5pct", "top1"):
        shown[col] = shown[col].map(_pct)
    return [
        "<h2>Legacy API: cudnnConvolution* algorithms against engine configs</h2>",
        "<p class='note'>On the problems measured with both APIs: the legacy heuristic "
        "(<code>cudnnGet*Algorithm_v7</code>, first listed algorithm that ran correctly) against the best legacy "
        "algorithm, and the best legacy algorithm against the best of every candidate (engine configs of the "
        "graph API, GEMM lowering, PyTorch's default). Dashed: the graph API's mode A, for reference.</p>",
        f'<img src="{figure}" alt="CDF of legacy API time ratios">',
        f'<div class="wide">{shown.to_html(index=False, border=0)}</div>',
    ]


def _network_parts(cmp: Comparison, figures: dict[str, str]) -> list[str]:
    """The networks' section: whole-network totals of the baselines, and with a model the held-out calls' totals."""
    selectors = cmp.selectors
    baselines = [s for s in selectors if s != "model"]
    parts = [
        "<h2>Networks: fwd + bwd_data + bwd_filter of every conv call</h2>",
        "<p class='note'>Each network's conv calls (<code>data/suites</code>, NCHW) summed per dtype, every "
        "direction of every call; the first conv of a classification network has no bwd_data. Calls whose "
        "problem is not in the records are not summed (<em>calls not summed</em>). Where a selector had no "
        "correct candidate, PyTorch's default time is used, as a framework falls back to it.</p>",
    ]
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
    return parts
