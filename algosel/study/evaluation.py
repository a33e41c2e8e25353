"""``algosel evaluate``: the shipped model on its held-out shapes and leave-one-network-out, as text and files.

The metrics are :mod:`algosel.learn.evaluate`'s (and the calibration of predicted times,
:mod:`algosel.learn.time_model`'s); this module runs them and returns the text report, whose tables
:mod:`algosel.study.evaluation_text` formats. Its files: ``report.csv`` (per direction and dtype), ``cells.csv``
(per direction x dtype x layout, with whether the model beats each baseline), ``top_k.csv`` and ``top_k.png`` (the
measured shortlist), ``network_totals.csv`` and ``report.json`` (everything), and with layers files the
``layers_*`` tables of :mod:`algosel.study.evaluation_layers`.

The files of one run are written together, as one unit, once everything is computed
(:mod:`algosel.study.evaluation_files`): a run that fails or is interrupted leaves the folder as it was, and a
run never leaves an earlier run's file beside its own. A file of these names that ``algosel evaluate`` did not
write there is replaced only with ``overwrite`` (``--overwrite``); in a model directory, whose manifest lists
every file, that is every one of them.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd

from algosel.learn.artifact import read_manifest
from algosel.learn.evaluate import (
    SELECTORS,
    TEST_FRACTION,
    Prepared,
    beats_baselines,
    cell_table,
    cell_wins,
    is_test_shape,
    mark_runs,
    pick_times,
    report,
    selector_table,
    top_k_curve,
    with_pytorch_fallback,
)
from algosel.learn.evaluate_networks import leave_one_network_out, network_totals
from algosel.learn.models import check_records_environment, check_space, records_space
from algosel.learn.ranker import RankerParams, fingerprint
from algosel.learn.selector import Selector
from algosel.learn.time_model import calibration, format_calibration
from algosel.measure.steps import no_input_grad_shapes, runs_in_training
from algosel.measure.suites import load_suites
from algosel.records.store import load_records, one_environment
from algosel.study.evaluation_files import CELLS_CSV, TOP_K_CSV, TOP_K_PNG, check_out, write_evaluation
from algosel.study.evaluation_layers import layers_evaluation
from algosel.study.evaluation_text import format_cells, format_comparison, top_k_figure


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
    them (:func:`~algosel.study.evaluation_layers.run_layers_evaluation`). Returns the text report and writes
    ``report.csv``, ``cells.csv``, ``top_k.csv``, ``top_k.png``, ``network_totals.csv``, ``report.json`` (and the
    ``layers_*`` files) into ``out`` (default ``reports/<model name>``) as one unit, once everything is computed
    (:func:`~algosel.study.evaluation_files.write_evaluation`).

    A model made for another GPU or cuDNN than the records' is refused (:class:`SelectorError`) unless ``force``:
    its engine configs and their speeds are specific to both, so its scores there would mean nothing. ``out``
    is checked before the records are read (``check_out``): a directory, or a place where one can be made,
    where a file of the evaluation's names that ``algosel evaluate`` did not write is replaced only with
    ``overwrite``.
    """
    check_out(out, model_dir, overwrite, replace_shipped=replace_shipped)
    lines, files = _evaluation(model_dir, data, lono, progress, force, layers or [])
    if layers:
        more, layer_files = layers_evaluation(model_dir, data, layers, compare_model)
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
    from algosel.measure.layers import load_layers

    suites = load_suites()
    never = no_input_grad_shapes([suites, *(load_layers(path) for path in layers)])
    sel, frame, envs, lines = _model_and_records(model_dir, data, force)
    prep = Prepared.build(frame, envs)
    held_lines, result, files = _held_out(sel, frame, prep, never)
    lines += held_lines
    if lono:
        lono_lines, lono_result, lono_files = _leave_one_network_out(sel, frame, prep, suites, progress)
        lines += lono_lines
        result.update(lono_result)
        files |= lono_files
    files["report.json"] = (json.dumps(result, indent=1, default=float) + "\n").encode()
    return lines, files


def _model_and_records(
    model_dir: str, data: list[str], force: bool
) -> tuple[Selector, pd.DataFrame, dict[str, dict[str, Any]], list[str]]:
    """The model, the records of their main environment, the environments, and the report's first lines."""
    # The model's manifest first (a missing or damaged model directory is refused before the records load), then
    # what the records and the manifest say of each other, then the model itself (seconds for a large one).
    manifest = read_manifest(model_dir)
    frame, envs = load_records(*data)
    frame, records_env = one_environment(frame, envs, "an evaluation", " (a joint model: one evaluation per GPU)")
    spaces = ", ".join(sorted(frame["space"].unique()))
    check_space(manifest, model_dir, records_space(frame), f"the records ({', '.join(map(str, data))}: {spaces})")
    # Refused unless force; records of any GPU a joint model was trained on are its own.
    other = check_records_environment(manifest, model_dir, records_env, force=force)
    # force: the visible GPU (if any) does not matter here; the records' environment is compared above.
    sel = Selector.load(model_dir, force=True)
    lines = [
        f"model {model_dir}: {sel.manifest['params']['objective']}, trained on "
        f"{sel.manifest.get('train_problems')} problems of {sel.environment.get('gpu_name')} "
        f"(cuDNN {sel.environment.get('cudnn')})"
    ]
    if other:
        lines.append(f"note: scored on records of another environment (--force): {', '.join(other)}")
    if fingerprint(frame) != sel.manifest.get("data_fingerprint"):
        lines.append("note: these records differ from the model's training records; " + _split_note(sel.manifest))
    return sel, frame, envs, lines


def _held_out(
    sel: Selector, frame: pd.DataFrame, prep: Prepared, never: set[str]
) -> tuple[list[str], dict[str, Any], dict[str, bytes]]:
    """The held-out shapes' lines, results (for ``report.json``) and files."""
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
    lines = _held_out_lines(table, rest, comp, cells, wins, curve)
    time_lines, time_cal = _time_calibration(sel, test, table)
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
    return lines + time_lines, result, files


def _held_out_lines(table: pd.DataFrame, rest: pd.DataFrame, comp: pd.DataFrame, cells: pd.DataFrame,
                    wins: pd.DataFrame, curve: pd.DataFrame) -> list[str]:  # fmt: skip
    """The text of the held-out tables: the headline, the problems a step never runs, cells, the shortlist."""
    return [
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


def _time_calibration(sel: Selector, test: Any, table: pd.DataFrame) -> tuple[list[str], Any]:
    """The lines on the predicted device times of the held-out problems, and their calibration (None without a
    time model)."""
    if sel.time_model is None:
        return ["", "This model has no time model (no predicted times)."], None
    threads = int(sel.manifest["params"].get("num_threads", 1))
    time_cal = calibration(test.data, sel.time_model.predict_log2_ms(test.X, num_threads=threads),
                           table["model_candidate"])  # fmt: skip
    lines = [
        "",
        "Predicted device times on the held-out problems: |predicted / measured - 1| as median and p90 of "
        "|log2 error| (2^x - 1); chosen: the model's pick",
        format_calibration(time_cal),
    ]
    return lines, time_cal


def _leave_one_network_out(
    sel: Selector, frame: pd.DataFrame, prep: Prepared, suites: pd.DataFrame, progress: bool
) -> tuple[list[str], dict[str, Any], dict[str, bytes]]:
    """Leave-one-network-out's lines, results and files: each suite network's shapes held out of a retraining."""
    params = RankerParams(**{k: v for k, v in sel.manifest["params"].items() if k in RankerParams.__dataclass_fields__})
    picks = leave_one_network_out(prep, frame, suites, params, progress=progress)
    if picks.empty:  # grid shapes only (e.g. data/sweeps/h200-loss): no network to leave out
        skipped = "Leave one network out: skipped (no shape of these records is a layer of a network suite)."
        return ["", skipped], {"lono": None}, {}
    # A shape shared by two networks has a pick from each network's model; the overall table keeps one.
    lono_table = selector_table(frame, picks[~picks.index.duplicated()].drop(columns="network"))
    lono_comp = report(lono_table)
    tables = {}
    for network, part in picks.groupby("network"):
        tables[network] = with_pytorch_fallback(selector_table(frame, part.drop(columns="network")))
    totals = network_totals(tables, suites, sorted(frame["dtype"].unique()))
    shown = totals[["network", "size", "dtype", "best_ms", *[f"{s}_vs_best" for s in SELECTORS]]].round(3)
    lines = [
        "",
        f"Leave one network out ({len(lono_table)} problems of the suites; each network's shapes held "
        "out of training):",
        format_comparison(lono_comp),
        "",
        "Whole networks, fwd + bwd_data + bwd_filter of every conv call (time / best):",
        shown.to_string(index=False),
    ]
    result = {"lono": lono_comp.to_dict("records"), "network_totals": totals.to_dict("records")}
    return lines, result, {"network_totals.csv": totals.to_csv(index=False).encode()}
