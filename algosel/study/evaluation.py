"""``algosel evaluate``'s text report: the shipped model on its held-out shapes and leave-one-network-out.

The metrics are :mod:`algosel.learn.evaluate`'s; this module runs them and formats the tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.learn.evaluate import (
    SELECTORS,
    Prepared,
    beats_baselines,
    held_out_table,
    leave_one_network_out,
    network_totals,
    report,
    selector_table,
    with_pytorch_fallback,
)
from algosel.learn.ranker import RankerParams, fingerprint
from algosel.learn.selector import Selector
from algosel.measure.suites import load_suites
from algosel.records.store import load_records, main_environment


def format_comparison(comp: pd.DataFrame) -> str:
    """A comparison table (:func:`~algosel.learn.evaluate.report`) as text: ratios to 3 places, shares in %."""
    shown = comp.drop(columns=[c for c in ("model_invalid_top1",) if c in comp]).copy()
    for col in ("geomean", "p95", "worst"):
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    for col in ("within_5pct", "top1"):
        shown[col] = shown[col].map(lambda v: f"{100 * v:.1f}%")
    return shown.to_string(index=False)


def run_evaluation(
    model_dir: str, data: list[str], out: str | None = None, lono: bool = True, progress: bool = True
) -> str:
    """``algosel evaluate``: the shipped model on its held-out shapes, and leave-one-network-out; returns the
    text report and writes ``report.csv``, ``network_totals.csv`` and ``report.json``."""
    sel = Selector.load(model_dir, force=True)
    frame, envs = load_records(*data)
    frame, _ = main_environment(frame, envs)
    lines = [
        f"model {model_dir}: {sel.manifest['params']['objective']}, trained on "
        f"{sel.manifest.get('train_problems')} problems of {sel.environment.get('gpu_name')} "
        f"(cuDNN {sel.environment.get('cudnn')})"
    ]
    if fingerprint(frame) != sel.manifest.get("data_fingerprint"):
        lines.append(
            "note: these records differ from the model's training records; the held-out split is "
            "recomputed on them, and shapes the model was trained on may now be among the test shapes"
        )
    prep = Prepared.build(frame, envs)
    table = held_out_table(sel, frame, prep)
    comp = report(table)
    lines += [
        "",
        f"Held-out shapes ({len(table)} problems, never seen in training or tuning): time of each "
        "selector's pick / best measured candidate",
        format_comparison(comp),
        "",
        f"model's top-scored candidate invalid (fell through to the next): {100 * table['invalid_top1'].mean():.2f}%"
        f", of which silent wrong results: {100 * table['wrong_top1'].mean():.2f}%",
        "",
        "Model beats heuristic A and PyTorch's default (geomean and within 5%):",
        beats_baselines(comp).to_string(index=False),
    ]
    result: dict[str, Any] = {"test": comp.to_dict("records"), "test_problems": len(table)}
    # Not the model directory by default: its committed report must not be overwritten by a partial run.
    out_dir = Path(out) if out else Path("reports") / Path(model_dir).name
    out_dir.mkdir(parents=True, exist_ok=True)
    comp.to_csv(out_dir / "report.csv", index=False)
    if lono:
        suites = load_suites()
        params = RankerParams(
            **{k: v for k, v in sel.manifest["params"].items() if k in RankerParams.__dataclass_fields__}
        )
        picks = leave_one_network_out(prep, frame, suites, params, progress=progress)
        # A shape shared by two networks has a pick from each network's model; the overall table keeps one.
        lono_table = selector_table(frame, picks[~picks.index.duplicated()].drop(columns="network"))
        lono_comp = report(lono_table)
        tables = {}
        for network, part in picks.groupby("network"):
            tables[network] = with_pytorch_fallback(selector_table(frame, part.drop(columns="network")))
        totals = network_totals(tables, suites, sorted(frame["dtype"].unique()))
        totals.to_csv(out_dir / "network_totals.csv", index=False)
        shown = totals[["network", "size", "dtype", "best_ms", *[f"{s}_vs_best" for s in SELECTORS]]].round(3)
        lines += [
            "",
            f"Leave one network out ({len(lono_table)} problems of the suites; each network's shapes held "
            "out of training):",
            format_comparison(lono_comp),
            "",
            "Whole networks, fwd + bwd_data + bwd_filter of every conv call (time / best):",
            shown.to_string(index=False),
        ]
        result.update(lono=lono_comp.to_dict("records"), network_totals=totals.to_dict("records"))
    (out_dir / "report.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    lines += ["", f"wrote {out_dir / 'report.csv'}, {out_dir / 'report.json'}"]
    return "\n".join(lines)
