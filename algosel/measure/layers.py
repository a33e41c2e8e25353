"""Layers files: the convolution calls of any model, in the suite format, for a user's own networks.

``algosel layers --model torchvision.models:resnet50 --input 32,3,224,224 --out layers.csv`` imports a model,
runs it once on meta tensors (as the suites are extracted: :func:`algosel.measure.conv_calls.extract_conv_calls`) and
writes one row per 2-D convolution call. ``algosel sweep --layers layers.csv`` measures the shapes of such a file
and ``algosel evaluate --layers layers.csv`` judges a model on them.

A layers file is a layer table (:mod:`algosel.measure.layer_table`): the columns of a suite
(:data:`~algosel.measure.layer_table.SUITE_COLUMNS`: network, layer, the shape fields, size), optionally
:data:`~algosel.measure.layer_table.LAYOUT_COLUMN`, the layout the network ran the call in (``algosel layers``
records it from the call's strides; ``algosel sweep --layers`` measures each row in it as well as in the layouts
asked), and optionally :data:`CALLS_COLUMN`, how many calls a row stands for (one when absent: the rows of ``algosel
layers`` are single calls in execution order), and optionally :data:`~algosel.measure.layer_table.INPUT_GRAD_COLUMN`,
whether the call's input needs a gradient in training (``algosel layers`` records it from autograd; where absent,
:mod:`algosel.measure.steps` tells it from the call's position: a network's first call takes its images). The runtime
hook's record of the problems it met without records (:mod:`algosel.runtime.unseen`) is a layers file of network
:data:`UNSEEN_NETWORK` with one row per shape and its call count.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from algosel.files import write_text
from algosel.measure.conv_calls import extract_conv_calls
from algosel.measure.layer_table import (
    INPUT_GRAD_COLUMN,
    LAYER_FIELDS,
    LAYOUT_COLUMN,
    SUITE_COLUMNS,
    read_layer_table,
    suite_problems,
)
from algosel.problem import ConvProblem

#: The optional column of a layers file: calls per row.
CALLS_COLUMN = "calls"
#: Columns of a layers file as :func:`load_layers` returns it.
LAYERS_COLUMNS: tuple[str, ...] = (*SUITE_COLUMNS, LAYOUT_COLUMN, CALLS_COLUMN)
#: The network name of the runtime hook's record of problems it met without records.
UNSEEN_NETWORK = "unseen"


class LayersError(ValueError):
    """A model that cannot be loaded or run, or an input it rejects: one line naming the model and the input."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------------------------------------ inputs
def parse_input(text: str) -> tuple[tuple[int, ...], ...]:
    """Input shapes from ``"32,3,224,224"``; several tensors (``model(a, b)``) separated by ``;``.

    Raises
    ------
    LayersError
        For anything but positive integers.
    """
    shapes = []
    for part in text.split(";"):
        try:
            shape = tuple(int(v) for v in part.split(","))
        except ValueError:
            shape = ()
        if not shape or any(v <= 0 for v in shape):
            raise LayersError(
                f"--input {text!r}: expected positive integers separated by commas (e.g. 32,3,224,224), "
                "several tensors separated by ';'"
            )
        shapes.append(shape)
    return tuple(shapes)


def format_input(shapes: Sequence[Sequence[int]]) -> str:
    """The ``--input`` text of ``shapes`` (the inverse of :func:`parse_input`)."""
    return ";".join(",".join(str(v) for v in shape) for shape in shapes)


def size_labels(inputs: Sequence[Sequence[Sequence[int]]]) -> list[str]:
    """The ``size`` column of each input: ``"HxW"`` of its first tensor, as the suites have it; where two inputs
    share that (say two batch sizes), every input is labelled by all its shapes (``"16x3x128x128"``)."""
    short = ["x".join(str(v) for v in shapes[0][-2:]) if len(shapes[0]) >= 3 else "" for shapes in inputs]
    if len(set(short)) == len(short) and all(short):
        return short
    return [";".join("x".join(str(v) for v in shape) for shape in shapes) for shapes in inputs]


# ------------------------------------------------------------------------------------------------ models
@contextlib.contextmanager
def _importable(*directories: str) -> Iterator[None]:
    """Put ``directories`` first on ``sys.path`` while a user's model is imported and built (so that its file
    can import its neighbours, and ``package.module`` resolves from the working directory as ``python -m``)."""
    added = [d for d in directories if d not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(d)


def _split_spec(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise LayersError(
            f"--model {spec!r}: expected module:callable (torchvision.models:resnet50) or path/to/file.py:callable"
        )
    return target, attr


def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def default_network_name(spec: str) -> str:
    """The network name of a model spec: the file's stem for ``path/to/file.py:make_model``, the callable's name
    for ``package.module:callable``."""
    target, attr = _split_spec(spec)
    return Path(target).stem if _is_file_spec(target) else attr


def _import_target(spec: str, target: str) -> Any:
    if _is_file_spec(target):
        path = Path(target)
        if not path.is_file():
            raise LayersError(f"model {spec}: no such file {target}")
        module_name = f"_algosel_model_{path.stem}"
        try:
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"{path} is not a Python module")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
            module_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - any error of the user's file is reported as one line
            sys.modules.pop(module_name, None)
            raise LayersError(f"model {spec}: importing {target} failed: {_one_line(exc)}") from None
        return module
    try:
        return importlib.import_module(target)
    except Exception as exc:  # noqa: BLE001 - any error of the user's module is reported as one line
        raise LayersError(f"model {spec}: importing {target} failed: {_one_line(exc)}") from None


def load_model(spec: str) -> nn.Module:
    """Import and build the model of ``spec``: ``package.module:callable`` or ``path/to/file.py:callable``.

    The callable (a function or an ``nn.Module`` class; or the attribute may be a module instance) is called
    without arguments under ``torch.device("meta")``, so that no memory is allocated for parameters; a model whose
    construction needs real tensors is built again on the CPU.

    Raises
    ------
    LayersError
        One line naming the model: a malformed spec, a file or module that does not import, a missing attribute,
        a callable that raises or returns something other than an ``nn.Module``.
    """
    target, attr = _split_spec(spec)
    directories = [str(Path(target).resolve().parent)] if _is_file_spec(target) else []
    with _importable(*directories, os.getcwd()):
        module = _import_target(spec, target)
        try:
            obj = getattr(module, attr)
        except AttributeError:
            raise LayersError(f"model {spec}: {target} has no attribute {attr!r}") from None
        if isinstance(obj, nn.Module):
            return obj
        if not callable(obj):
            raise LayersError(f"model {spec}: {attr} is a {type(obj).__name__}, not a callable returning a model")
        try:
            with torch.device("meta"):
                model = obj()
        except Exception:  # noqa: BLE001 - built again on the CPU, whose error (if any) is the one reported
            try:
                model = obj()
            except Exception as exc:  # noqa: BLE001 - any error of the user's code is reported as one line
                raise LayersError(f"model {spec}: {attr}() raised {_one_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise LayersError(f"model {spec}: {attr}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


# ------------------------------------------------------------------------------------------------ layers
def model_layers(
    model: nn.Module,
    inputs: Sequence[Sequence[Sequence[int]]],
    network: str,
    name: str | None = None,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The layers frame of ``model`` run once per input (one block of rows per input, in execution order).

    Parameters
    ----------
    model : nn.Module
        The network (parameters may be on the meta device).
    inputs : sequence of shapes
        Per forward pass, the shapes of its tensors (:func:`parse_input`); float32 meta tensors are made.
    network : str
        The ``network`` column.
    name : str, optional
        How the model is named in messages (default: ``network``).

    Returns
    -------
    (pandas.DataFrame, dict)
        Columns :data:`~algosel.measure.layer_table.SUITE_COLUMNS`, ``layout`` and ``input_grad`` (1 where the
        call's input requires a gradient, so that a training step computes its ``bwd_data``); and the
        convolutions algosel does not cover (1-D, 3-D, transposed), calls per function name summed over the
        inputs.

    Raises
    ------
    LayersError
        One line naming the model, the input and PyTorch's message, where the model rejects an input; or where an
        input leads to no 2-D convolution at all.
    """
    name = name or network
    if not network.strip():
        raise LayersError("--network: the network name must not be empty")
    if not inputs:
        raise LayersError(f"model {name}: give at least one --input")
    rows: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for shapes, size in zip(inputs, size_labels(inputs)):
        text = format_input(shapes)
        tensors = tuple(torch.empty(shape, device="meta") for shape in shapes)
        try:
            calls = extract_conv_calls(model, tensors)
        except Exception as exc:  # noqa: BLE001 - a model rejecting an input: PyTorch's message, on one line
            raise LayersError(f"model {name} rejected input {text}: {_one_line(exc)}") from None
        if not calls.records:
            other = f" (it called {', '.join(f'{f} x{n}' for f, n in calls.skipped.items())})" if calls.skipped else ""
            raise LayersError(f"model {name} on input {text}: no 2-D convolution was called{other}")
        for record in calls.records:
            try:
                ConvProblem(**{f: record[f] for f in LAYER_FIELDS})
            except ValueError as exc:
                raise LayersError(f"model {name} on input {text}, layer {record['layer']!r}: {exc}") from None
            rows.append({"network": network, **record, "size": size})
        for function, count in calls.skipped.items():
            skipped[function] = skipped.get(function, 0) + count
    return pd.DataFrame(rows, columns=[*SUITE_COLUMNS, LAYOUT_COLUMN, INPUT_GRAD_COLUMN]), skipped


def write_layers(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a layers frame as CSV (columns :data:`SUITE_COLUMNS`, then ``layout``, ``calls`` and ``input_grad`` where
    the frame has them), atomically (:func:`algosel.files.write_text`): an interrupted write leaves no half file."""
    columns = [*SUITE_COLUMNS, *(c for c in (LAYOUT_COLUMN, CALLS_COLUMN, INPUT_GRAD_COLUMN) if c in frame)]
    # Explicit "\n", as the suites: the same bytes whatever platform writes them.
    return write_text(path, frame.loc[:, columns].to_csv(index=False, lineterminator="\n"))


def load_layers(path: str | Path) -> pd.DataFrame:
    """Read and validate a layers file (or a suite CSV: the same format).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`LAYERS_COLUMNS`, then ``input_grad`` where the file has it; ``layout`` is empty (not recorded)
        and ``calls`` 1 where the file has no such column.

    Raises
    ------
    ValueError
        One line naming the file and, for a bad value, its line and column
        (:func:`~algosel.measure.layer_table.read_layer_table`).
    """
    frame = read_layer_table(path, "layers file", extra_int_columns=(CALLS_COLUMN,))
    if LAYOUT_COLUMN not in frame:
        frame[LAYOUT_COLUMN] = ""
    if CALLS_COLUMN not in frame:
        frame[CALLS_COLUMN] = 1
    return frame.loc[:, [*LAYERS_COLUMNS, *(c for c in (INPUT_GRAD_COLUMN,) if c in frame)]]


def layers_problems(frame: pd.DataFrame, dtype: str, layout: str = "nchw") -> list[ConvProblem]:
    """The distinct forward problems of a layers frame, in order of first appearance."""
    return suite_problems(frame, dtype=dtype, layout=layout)


def write_model_layers(spec: str, input_texts: Sequence[str], network: str | None, out: str | Path,
                       overwrite: bool = False) -> list[str]:  # fmt: skip
    """``algosel layers``: the conv layers of the model ``spec`` called on each input of ``input_texts``
    (:func:`parse_input`) written to the layers file ``out`` (refused if it exists, unless ``overwrite``); returns
    the lines that say what was written and which calls were not recorded.

    Raises
    ------
    LayersError
        A bad input text, a model that cannot be imported or called.
    OutputError
        ``out`` exists and ``overwrite`` is not given, or is not a plain file.
    """
    from algosel.outputs import check_output_file  # noqa: PLC0415

    inputs = [parse_input(text) for text in input_texts]
    network = network if network is not None else default_network_name(spec)
    frame, skipped = model_layers(load_model(spec), inputs, network, name=spec)
    path = write_layers(frame, check_output_file(out, overwrite=overwrite))  # checked again: time has passed
    shapes = frame.drop_duplicates(subset=[c for c in frame.columns if c not in ("network", "layer", "size")])
    lines = [
        f"wrote {path}: network {network}, {len(frame)} conv calls, {len(shapes)} distinct shapes, "
        f"{len(inputs)} input size(s)"
    ]
    if skipped:
        others = ", ".join(f"{name} x{count}" for name, count in sorted(skipped.items()))
        lines.append(f"not recorded (algosel covers 2-D convolutions): {others}")
    return lines
