"""``algosel evaluate --layers``: a model (and a compare model) on the problems of a user's own layers files.

For every recorded problem of the layers files' shapes: the time of each selector's pick against the best measured
candidate, the total time, each file's whole networks, and with a compare model the problems where the two models'
picks differ most. The metrics are :mod:`algosel.learn.evaluate`'s; the files go out through
:mod:`algosel.study.evaluation_files`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from algosel.learn.evaluate import Prepared, with_pytorch_fallback
from algosel.learn.models import check_space, records_space
from algosel.learn.selector import Selector
from algosel.records.store import load_records, one_environment
from algosel.study.evaluation_files import LAYERS_FILES, check_out, write_evaluation
from algosel.study.evaluation_text import format_comparison, format_model_differences, format_totals

#: The selectors of :func:`run_layers_evaluation`, in the order its tables list them.
LAYERS_SELECTORS: tuple[str, ...] = ("model", "compare_model", "heuristic_a", "heuristic_b", "pytorch_default")


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
    algosel.outputs.OutputError
        Before any work, for an ``out`` the files cannot be written into (:func:`check_out`).
    """
    check_out(out, model_dir, overwrite, names=LAYERS_FILES)
    lines, files = layers_evaluation(model_dir, data, layers, compare_model)
    written = write_evaluation(out, model_dir, files, overwrite, names=LAYERS_FILES)
    lines += ["", "wrote " + ", ".join(str(p) for p in written)]
    return "\n".join(lines)


def layers_evaluation(
    model_dir: str, data: list[str], layers: list[str], compare_model: str | None
) -> tuple[list[str], dict[str, bytes]]:
    """The text lines and the files (name -> content) of :func:`run_layers_evaluation`, unwritten."""
    from algosel.learn.evaluate import is_test_shape
    from algosel.learn.evaluate_networks import layers_totals, models_table, time_totals
    from algosel.measure.layers import UNSEEN_NETWORK, load_layers
    from algosel.records.analysis import comparison_table

    frames = {path: load_layers(path) for path in layers}  # validated before the records are read
    models = _models(model_dir, compare_model)
    subset, envs, shapes, shape_of = _records_of_shapes(data, layers, frames, models["model"], model_dir)
    table = models_table(subset, Prepared.build(subset, envs), models)
    selectors = [s for s in LAYERS_SELECTORS if s in models or s not in ("model", "compare_model")]
    filled = with_pytorch_fallback(table, selectors)
    recorded_shapes = set(subset["problem_key"].map(shape_of).tolist())
    result: dict[str, Any] = {
        "model": model_dir,
        "compare_model": compare_model,
        "layers": layers,
        "shapes": len(shapes),
        "recorded_shapes": len(recorded_shapes),
        "held_out_shapes": int(is_test_shape(sorted(recorded_shapes)).sum()),
        "problems": len(table),
        "comparison": comparison_table(table, selectors),
        "time_totals": time_totals(filled, selectors),
        "network_totals": layers_totals(filled, frames, selectors, unseen_network=UNSEEN_NETWORK),
    }
    lines = _layers_lines(result, subset, table, selectors)
    files = {
        "layers_report.csv": result["comparison"].to_csv(index=False).encode(),
        "layers_problems.csv": table.reset_index().to_csv(index=False).encode(),
        "layers_time_totals.csv": result["time_totals"].to_csv(index=False).encode(),
        "layers_totals.csv": result["network_totals"].to_csv(index=False).encode(),
    }
    for key in ("comparison", "time_totals", "network_totals"):
        result[key] = result[key].to_dict("records")
    files["layers_report.json"] = (json.dumps(result, indent=1, default=float) + "\n").encode()
    return lines, files


def _models(model_dir: str, compare_model: str | None) -> dict[str, Selector]:
    """The model, and the compare model where given, by selector name; two models must select in one space."""
    models = {"model": Selector.load(model_dir, force=True)}
    if compare_model:
        models["compare_model"] = Selector.load(compare_model, force=True)
        if models["compare_model"].space != models["model"].space:
            raise ValueError(
                f"--compare-model {compare_model} selects {models['compare_model'].space} candidates and "
                f"{model_dir} {models['model'].space} ones: compare models of one space"
            )
    return models


def _records_of_shapes(
    data: list[str], layers: list[str], frames: dict[str, pd.DataFrame], model: Selector, model_dir: str
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], set[str], dict[str, str]]:
    """The records (of their main environment) of the layers files' shapes, the environments, the files' shape
    keys, and each recorded problem's shape key; a ValueError naming the files where the records hold none."""
    from algosel.problem import SHAPE_FIELDS, ConvProblem

    frame, envs = load_records(*data)
    frame, _ = one_environment(frame, envs, "an evaluation", " (a joint model: one evaluation per GPU)")
    check_space(model.manifest, model_dir, records_space(frame), f"the records ({', '.join(map(str, data))})")
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
    return subset, envs, shapes, shape_of


def _layers_lines(result: dict[str, Any], subset: pd.DataFrame, table: pd.DataFrame, selectors: list[str]) -> list[str]:
    """The text of :func:`layers_evaluation`'s ``result`` (its tables still frames)."""
    recorded, held_out, layers = result["recorded_shapes"], result["held_out_shapes"], result["layers"]
    compare_model = result["compare_model"]
    legend = f"model = {result['model']}" + (f", compare_model = {compare_model}" if compare_model else "")
    lines = [
        "",
        f"Your layers ({', '.join(layers)}): {result['shapes']} shapes, {recorded} of them in the records "
        f"({len(table)} problems: {', '.join(sorted(subset['dtype'].unique()))}; "
        f"{', '.join(sorted(subset['layout'].unique()))}); {legend}",
        f"{held_out} of these {recorded} shapes are in the held-out split, which a model trained on these "
        f"records never sees; it trains on the other {recorded - held_out}: its picks there are what the "
        "hook will run, not a test of how it generalises",
        "",
        "Time of each selector's pick / best measured candidate, per problem:",
        format_comparison(result["comparison"]),
        "",
        "Total time over these problems (each problem once; where a selector had no correct candidate, PyTorch's "
        "default):",
        format_totals(result["time_totals"]),
        "",
        "Whole networks of the layers files, fwd + bwd_data + bwd_filter of every call (time / best):",
    ]
    networks = result["network_totals"]
    if networks.empty:
        lines.append("(no layer of the files has a recorded problem in every direction)")
    else:
        cols = ["file", "network", "size", "dtype", "layout", "calls", "missing_calls", "best_ms",
                *[f"{s}_vs_best" for s in selectors]]  # fmt: skip
        lines.append(networks[cols].round(3).to_string(index=False))
    if compare_model:
        lines += ["", "Where the two models' picks differ most (time / best; all problems in layers_problems.csv):",
                  format_model_differences(table)]  # fmt: skip
    return lines
