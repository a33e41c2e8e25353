"""``algosel evaluate``'s text report: the shipped model on its held-out shapes and leave-one-network-out.

The metrics are :mod:`algosel.learn.evaluate`'s (and the calibration of predicted times,
:mod:`algosel.learn.time_model`'s); this module runs them, formats the tables and writes the report files:
``report.csv`` (per direction and dtype), ``cells.csv`` (per direction x dtype x layout, with whether the model
beats each baseline), ``top_k.csv`` and ``top_k.png`` (the measured shortlist), ``network_totals.csv`` and
``report.json`` (everything), and with layers files the ``layers_*`` tables.

The files of one run are written together, as one unit, once everything is computed
(:func:`algosel.files.write_output_dir`): a run that fails or is interrupted leaves the folder as it was, and a
run never leaves an earlier run's file beside its own. A file of these names that ``algosel evaluate`` did not
write there is replaced only with ``overwrite`` (``--overwrite``); in a model directory, whose manifest lists
every file, that is every one of them.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd

from algosel.learn.evaluate import (
    SELECTORS,
    TEST_FRACTION,
    Prepared,
    beats_baselines,
    cell_table,
    cell_wins,
    is_test_shape,
    leave_one_network_out,
    mark_runs,
    network_totals,
    pick_times,
    report,
    selector_table,
    top_k_curve,
    with_pytorch_fallback,
)
from algosel.learn.models import check_records_environment, check_space, records_space
from algosel.learn.ranker import RankerParams, fingerprint
from algosel.learn.selector import Selector
from algosel.learn.time_model import calibration, format_calibration
from algosel.measure.steps import no_input_grad_shapes, runs_in_training
from algosel.measure.suites import load_suites
from algosel.records.store import load_records, one_environment
from algosel.study.evaluation_out import (  # noqa: F401 - the file names, public here as before
    CELLS_CSV,
    EVALUATE_FILES,
    EVALUATION_FILES,
    LAYERS_FILES,
    TOP_K_CSV,
    TOP_K_PNG,
    check_out,
    write_evaluation,
)


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
    from matplotlib.figure import Figure  # noqa: PLC0415 - heavy, and only needed here

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


def _split_note(manifest: dict[str, Any]) -> str:
    """Whether the held-out shapes of other records than the model's were held out of its training too: yes where
    it was trained with this split (a hash of the shape key, the same fraction), whatever records each side held."""
    split = manifest.get("split") if isinstance(manifest.get("split"), dict) else {}
    if str(split.get("method", "")).startswith("crc32(shape_key)") and split.get("test_fraction", TEST_FRACTION) == (
        TEST_FRACTION
    ):
        return "its held-out shapes are those of the split it was trained with (a hash of the shape): none trained on"
    return "the held-out split is recomputed on them, and shapes the model was trained on may be among the test shapes"


def run_evaluation(
    model_dir: str,
    data: list[str],
    out: str | None = None,
    lono: bool = True,
    progress: bool = True,
    force: bool = False,
    layers: list[str] | None = None,
    compare_model: str | None = None,
    overwrite: bool = False,
    replace_shipped: bool = False,
) -> str:
    """``algosel evaluate``: the shipped model on its held-out shapes, and leave-one-network-out (skipped, with a
    note, for records that hold no layer of the network suites); with ``layers`` files, also the evaluation on
    them (:func:`run_layers_evaluation`). Returns the text report and writes ``report.csv``, ``cells.csv``,
    ``top_k.csv``, ``top_k.png``, ``network_totals.csv``, ``report.json`` (and the ``layers_*`` files) into
    ``out`` (default ``reports/<model name>``) as one unit, once everything is computed
    (:func:`write_evaluation`).

    A model made for another GPU or cuDNN than the records' is refused (:class:`SelectorError`) unless ``force``:
    its engine configs and their speeds are specific to both, so its scores there would mean nothing. ``out``
    is checked before the records are read (:func:`check_out`): a directory, or a place where one can be made,
    where a file of the evaluation's names that ``algosel evaluate`` did not write is replaced only with
    ``overwrite``; a shipped model's folder is written into only with ``replace_shipped``.
    """
    check_out(out, model_dir, overwrite, replace_shipped=replace_shipped)
    lines, files = _evaluation(model_dir, data, lono, progress, force, layers or [])
    if layers:
        more, layer_files = _layers_evaluation(model_dir, data, layers, compare_model)
        lines += more
        files |= layer_files
    written = write_evaluation(out, model_dir, files, overwrite, replace_shipped=replace_shipped)
    lines += ["", "wrote " + ", ".join(str(p) for p in written)]
    return "\n".join(lines)


def _evaluation(model_dir: str, data: list[str], lono: bool, progress: bool, force: bool, layers: list[str]
                ) -> tuple[list[str], dict[str, bytes]]:  # fmt: skip
    """The text lines and the files (name -> content) of :func:`run_evaluation`, less the layers' tables.

    The held-out headline is on the problems a training step runs: the input gradient of a shape that the suites and
    ``layers`` files call only on inputs that need no gradient (a network's first convolution, over its images) is
    reported beside it, not in it (:mod:`algosel.measure.steps`)."""
    from algosel.measure.layers import load_layers  # noqa: PLC0415

    suites = load_suites()
    never = no_input_grad_shapes([suites, *(load_layers(path) for path in layers)])
    # force: the visible GPU (if any) does not matter here; the records' environment is compared below.
    sel = Selector.load(model_dir, force=True)
    frame, envs = load_records(*data)
    frame, records_env = one_environment(frame, envs, "an evaluation", " (a joint model: one evaluation per GPU)")
    spaces = ", ".join(sorted(frame["space"].unique()))
    check_space(sel, model_dir, records_space(frame), f"the records ({', '.join(map(str, data))}: {spaces})")
    # Refused unless force; records of any GPU a joint model was trained on are its own.
    other = check_records_environment(sel, model_dir, records_env, force=force)
    lines = [
        f"model {model_dir}: {sel.manifest['params']['objective']}, trained on "
        f"{sel.manifest.get('train_problems')} problems of {sel.environment.get('gpu_name')} "
        f"(cuDNN {sel.environment.get('cudnn')})"
    ]
    if other:
        lines.append(f"note: scored on records of another environment (--force): {', '.join(other)}")
    if fingerprint(frame) != sel.manifest.get("data_fingerprint"):
        lines.append("note: these records differ from the model's training records; " + _split_note(sel.manifest))
    prep = Prepared.build(frame, envs)
    test = prep.rows(is_test_shape(prep.shape))
    shortlist = sel.manifest.get("shortlist_rank")
    scores = sel.ranker.score(test.X)
    every = mark_runs(selector_table(frame, pick_times(test.data, scores, shortlist)), never)
    table, rest = every[every["runs"]], every[~every["runs"]]
    comp = report(table)
    cells = cell_table(table)
    wins = cell_wins(cells)
    run_rows = runs_in_training(test.data["problem_key"], never)
    curve = top_k_curve(test.data[run_rows].reset_index(drop=True), scores[run_rows], shortlist_rank=shortlist)
    lines += [
        "",
        f"Held-out shapes ({len(table)} problems that a training step runs, never seen in training or tuning): time "
        "of each selector's pick / best measured candidate (total: sum of picked times / sum of best times)",
        format_comparison(comp),
        "",
        f"Beside it, {len(rest)} held-out problems a training step never runs (the input gradient of a network's "
        "first convolution, over its images):",
        format_comparison(report(rest)) if len(rest) else "(none)",
        "",
        f"model's top-scored candidate invalid (fell through to the next): {100 * table['invalid_top1'].mean():.2f}%"
        f", of which silent wrong results: {100 * table['wrong_top1'].mean():.2f}%",
        "",
        "Model beats heuristic A, heuristic B and PyTorch's default (geomean and within 5%):",
        beats_baselines(comp).to_string(index=False),
        "",
        "Per direction x dtype x layout (geomean, within 5%, total time); the model beats a baseline in a cell when "
        "its geomean is lower, its share within 5% no lower and its total no higher:",
        format_cells(cells, wins),
        f"cells where the model beats mode A, mode B and PyTorch's default: {int(wins['all'].sum())} of {len(wins)}",
        "",
        "Measured shortlist: the model's k best-scored candidates timed once, the fastest kept (time / best):",
        format_comparison(curve),
    ]
    time_cal = None
    if sel.time_model is not None:
        predicted = sel.time_model.predict_log2_ms(
            test.X, num_threads=int(sel.manifest["params"].get("num_threads", 1))
        )
        time_cal = calibration(test.data, predicted, table["model_candidate"])
        lines += [
            "",
            "Predicted device times on the held-out problems: |predicted / measured - 1| as median and p90 of "
            "|log2 error| (2^x - 1); chosen: the model's pick",
            format_calibration(time_cal),
        ]
    else:
        lines += ["", "This model has no time model (no predicted times)."]
    result: dict[str, Any] = {
        "test": comp.to_dict("records"),
        "test_problems": len(table),
        "test_never_run": report(rest).to_dict("records") if len(rest) else [],
        "test_problems_never_run": len(rest),
        "test_all": report(every).to_dict("records"),
        "cells": cells.to_dict("records"),
        "cell_wins": wins.to_dict("records"),
        "top_k": curve.to_dict("records"),
        "time_calibration": time_cal,
    }
    png = io.BytesIO()
    top_k_figure(curve, f"Measured shortlist, {len(table):,} held-out problems").savefig(png, format="png", dpi=110)
    files = {
        "report.csv": comp.to_csv(index=False).encode(),
        CELLS_CSV: cells.merge(wins, on=["direction", "dtype", "layout"]).to_csv(index=False).encode(),
        TOP_K_CSV: curve.to_csv(index=False).encode(),
        TOP_K_PNG: png.getvalue(),
    }
    picks = None
    if lono:
        params = RankerParams(
            **{k: v for k, v in sel.manifest["params"].items() if k in RankerParams.__dataclass_fields__}
        )
        picks = leave_one_network_out(prep, frame, suites, params, progress=progress)
        if picks.empty:  # grid shapes only (e.g. data/sweeps/h200-loss): no network to leave out
            lines += ["", "Leave one network out: skipped (no shape of these records is a layer of a network suite)."]
            result["lono"] = None
    if picks is not None and not picks.empty:
        # A shape shared by two networks has a pick from each network's model; the overall table keeps one.
        lono_table = selector_table(frame, picks[~picks.index.duplicated()].drop(columns="network"))
        lono_comp = report(lono_table)
        tables = {}
        for network, part in picks.groupby("network"):
            tables[network] = with_pytorch_fallback(selector_table(frame, part.drop(columns="network")))
        totals = network_totals(tables, suites, sorted(frame["dtype"].unique()))
        files["network_totals.csv"] = totals.to_csv(index=False).encode()
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
    files["report.json"] = (json.dumps(result, indent=1, default=float) + "\n").encode()
    return lines, files


#: The selectors of :func:`run_layers_evaluation`, in the order its tables list them.
LAYERS_SELECTORS: tuple[str, ...] = ("model", "compare_model", "heuristic_a", "heuristic_b", "pytorch_default")


def _format_totals(totals: pd.DataFrame) -> str:
    shown = totals.copy()
    shown["total_ms"] = shown["total_ms"].map(lambda v: f"{v:.3f}")
    shown["best_ms"] = shown["best_ms"].map(lambda v: f"{v:.3f}")
    shown["total_vs_best"] = shown["total_vs_best"].map(lambda v: f"{v:.3f}")
    return shown.to_string(index=False)


def _format_model_differences(table: pd.DataFrame, most: int = 10) -> str:
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


def run_layers_evaluation(
    model_dir: str,
    data: list[str],
    layers: list[str],
    compare_model: str | None = None,
    out: str | None = None,
    overwrite: bool = False,
) -> str:
    """``algosel evaluate --layers FILE [--compare-model DIR]``: a model on the problems of a user's own layers.

    For every recorded problem of the layers files' shapes (any dtype and layout in ``data``): the time of the
    model's pick, of the compare model's, of cuDNN's heuristics and of PyTorch's default, against the best
    measured candidate (geomean, within 5%, total time), and each file's whole networks (every call, forward and
    both gradients); with a compare model, the problems where the two models' picks differ most. Writes
    ``layers_report.csv``, ``layers_problems.csv`` (per problem: the best and every selector's time and candidate),
    ``layers_time_totals.csv``, ``layers_totals.csv`` and ``layers_report.json`` into ``out`` (default
    ``reports/<model name>``) as one unit, under the rules of :func:`write_evaluation` (``overwrite``); the
    evaluation's other files there are left as they are. Returns the text.

    Raises
    ------
    ValueError
        For a bad layers file (its line and column named) or when the records hold none of its shapes.
    algosel.files.OutputError
        Before any work, for an ``out`` the files cannot be written into (:func:`check_out`).
    """
    check_out(out, model_dir, overwrite, names=LAYERS_FILES)
    lines, files = _layers_evaluation(model_dir, data, layers, compare_model)
    written = write_evaluation(out, model_dir, files, overwrite, names=LAYERS_FILES)
    lines += ["", "wrote " + ", ".join(str(p) for p in written)]
    return "\n".join(lines)


def _layers_evaluation(model_dir: str, data: list[str], layers: list[str], compare_model: str | None
                       ) -> tuple[list[str], dict[str, bytes]]:  # fmt: skip
    """The text lines and the files (name -> content) of :func:`run_layers_evaluation`."""
    from algosel.learn.evaluate import (  # noqa: PLC0415
        is_test_shape,
        layers_totals,
        models_table,
        time_totals,
    )
    from algosel.measure.layers import UNSEEN_NETWORK, load_layers  # noqa: PLC0415
    from algosel.problem import SHAPE_FIELDS, ConvProblem  # noqa: PLC0415
    from algosel.records.analysis import comparison_table  # noqa: PLC0415

    frames = {path: load_layers(path) for path in layers}  # validated before the records are read
    models = {"model": Selector.load(model_dir, force=True)}
    if compare_model:
        models["compare_model"] = Selector.load(compare_model, force=True)
        if models["compare_model"].space != models["model"].space:
            raise ValueError(
                f"--compare-model {compare_model} selects {models['compare_model'].space} candidates and "
                f"{model_dir} {models['model'].space} ones: compare models of one space"
            )
    frame, envs = load_records(*data)
    frame, _ = one_environment(frame, envs, "an evaluation", " (a joint model: one evaluation per GPU)")
    check_space(models["model"], model_dir, records_space(frame), f"the records ({', '.join(map(str, data))})")
    shapes = {
        ConvProblem(**{f: int(row[f]) for f in SHAPE_FIELDS}).shape_key
        for layers_frame in frames.values()
        for row in layers_frame.to_dict("records")
    }
    shape_of = {k: ConvProblem.from_key(k).shape_key for k in frame["problem_key"].unique()}
    subset = frame[frame["problem_key"].map(shape_of).isin(shapes)]
    if subset.empty:
        raise ValueError(
            f"the records of {', '.join(data)} hold none of the {len(shapes)} shapes of {', '.join(layers)}; "
            f"sweep them first: algosel sweep --layers {' --layers '.join(layers)} --out DIR"
        )
    prep = Prepared.build(subset, envs)
    table = models_table(subset, prep, models)
    selectors = [s for s in LAYERS_SELECTORS if s in models or s not in ("model", "compare_model")]
    comp = comparison_table(table, selectors)
    filled = with_pytorch_fallback(table, selectors)
    totals = time_totals(filled, selectors)
    networks = layers_totals(filled, frames, selectors, unseen_network=UNSEEN_NETWORK)
    recorded_shapes = set(subset["problem_key"].map(shape_of))
    held_out = int(is_test_shape(sorted(recorded_shapes)).sum())
    legend = f"model = {model_dir}" + (f", compare_model = {compare_model}" if compare_model else "")
    lines = [
        "",
        f"Your layers ({', '.join(layers)}): {len(shapes)} shapes, {len(recorded_shapes)} of them in the records "
        f"({len(table)} problems: {', '.join(sorted(subset['dtype'].unique()))}; "
        f"{', '.join(sorted(subset['layout'].unique()))}); {legend}",
        f"{held_out} of these {len(recorded_shapes)} shapes are in the held-out split, which a model trained on these "
        f"records never sees; it trains on the other {len(recorded_shapes) - held_out}: its picks there are what the "
        "hook will run, not a test of how it generalises",
        "",
        "Time of each selector's pick / best measured candidate, per problem:",
        format_comparison(comp),
        "",
        "Total time over these problems (each problem once; where a selector had no correct candidate, PyTorch's "
        "default):",
        _format_totals(totals),
        "",
        "Whole networks of the layers files, fwd + bwd_data + bwd_filter of every call (time / best):",
    ]
    if networks.empty:
        lines.append("(no layer of the files has a recorded problem in every direction)")
    else:
        cols = ["file", "network", "size", "dtype", "layout", "calls", "missing_calls", "best_ms",
                *[f"{s}_vs_best" for s in selectors]]  # fmt: skip
        lines.append(networks[cols].round(3).to_string(index=False))
    if compare_model:
        lines += ["", "Where the two models' picks differ most (time / best; all problems in layers_problems.csv):",
                  _format_model_differences(table)]  # fmt: skip
    result = {
        "model": model_dir,
        "compare_model": compare_model,
        "layers": layers,
        "shapes": len(shapes),
        "recorded_shapes": len(recorded_shapes),
        "held_out_shapes": held_out,
        "problems": len(table),
        "comparison": comp.to_dict("records"),
        "time_totals": totals.to_dict("records"),
        "network_totals": networks.to_dict("records"),
    }
    files = {
        "layers_report.csv": comp.to_csv(index=False).encode(),
        "layers_problems.csv": table.reset_index().to_csv(index=False).encode(),
        "layers_time_totals.csv": totals.to_csv(index=False).encode(),
        "layers_totals.csv": networks.to_csv(index=False).encode(),
        "layers_report.json": (json.dumps(result, indent=1, default=float) + "\n").encode(),
    }
    return lines, files
