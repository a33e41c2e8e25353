"""Layer tables: the CSV format of suites and layers files, its one reader, and the problems a table holds.

A layer table has the columns :data:`SUITE_COLUMNS`: the network, the layer's qualified module name, the shape
fields of :class:`~algosel.problem.ConvProblem` and ``size``, the network input size as ``"HxW"``; optionally
:data:`LAYOUT_COLUMN` and :data:`INPUT_GRAD_COLUMN`. Rows are in execution order of the forward pass, one per
convolution call, so summing over rows gives whole-network totals. The suites (:mod:`algosel.measure.suites`) and
the layers files of ``algosel layers`` (:mod:`algosel.measure.layers`) are such tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.problem import SHAPE_FIELDS, ConvProblem

#: Shape fields recorded for each convolution call (the integer fields of :class:`ConvProblem`).
LAYER_FIELDS: tuple[str, ...] = SHAPE_FIELDS
#: Columns of a suite CSV / of :func:`extract_suite`'s frame, in order.
SUITE_COLUMNS: tuple[str, ...] = ("network", "layer", *LAYER_FIELDS, "size")
#: The optional column of a suite or layers file: the memory layout the network ran the call in (``nchw`` or
#: ``nhwc``; empty: not recorded). PyTorch runs a convolution channels_last where its input or its weight is
#: channels_last-strided, which networks do inside themselves whatever their input: torchvision's ConvNeXt permutes
#: each block's output back to NHWC strides, so its depthwise convolutions are NHWC problems.
LAYOUT_COLUMN = "layout"
#: The optional column of a layers file: 1 where the call's input needs a gradient in a training step (autograd
#: computes its ``bwd_data``), 0 where it does not (a network's first convolution over its images), empty where not
#: recorded (:mod:`algosel.measure.steps` then tells it from the call's position).
INPUT_GRAD_COLUMN = "input_grad"
_TEXT_COLUMNS: tuple[str, ...] = ("network", "layer", "size")


def typed_layer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Fix column order and dtypes (int64 shape fields, str text columns), whatever the source."""
    frame = frame.loc[:, list(SUITE_COLUMNS)].copy()
    for column in LAYER_FIELDS:
        try:
            frame[column] = frame[column].astype("int64")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"suite column {column!r} holds non-integer values: {exc}") from exc
    for column in _TEXT_COLUMNS:
        frame[column] = frame[column].astype(str)
    return frame.reset_index(drop=True)


def read_layer_table(
    path: str | Path, label: str = "layers file", extra_int_columns: Sequence[str] = ()
) -> pd.DataFrame:
    """Read and validate a CSV in the suite format (the columns :data:`SUITE_COLUMNS`).

    The one reader of suite and layers files: every row must be a valid convolution shape, so that a bad file is
    reported here, naming the line, before anything is measured.

    Parameters
    ----------
    path : str or Path
        The CSV file.
    label : str
        What the file is, for messages (``"suite file"``, ``"layers file"``).
    extra_int_columns : sequence of str
        Further columns kept when present, each of positive integers (a layers file's ``calls``).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS` in order (int64 shape fields, str text columns), then :data:`LAYOUT_COLUMN`
        where the file has it (``nchw``, ``nhwc`` or empty), then those of ``extra_int_columns`` the file has
        (int64), and :data:`INPUT_GRAD_COLUMN` (``"1"``, ``"0"`` or empty) where the file has it; other columns are
        dropped.

    Raises
    ------
    ValueError
        One line naming the file and, for a bad value, its line and column: a missing file or column, a file
        without rows, a value that is not an integer, an empty network name, or a row that is not a valid
        convolution (the message of :class:`~algosel.problem.ConvProblem` names the field).
    """
    path = Path(path)
    frame = _read_text_csv(path, label)
    int_columns = [*LAYER_FIELDS, *(c for c in extra_int_columns if c in frame.columns)]
    flags = [c for c in (LAYOUT_COLUMN, INPUT_GRAD_COLUMN) if c in frame.columns]
    out = frame.loc[:, [*SUITE_COLUMNS, *flags, *int_columns[len(LAYER_FIELDS) :]]].copy()
    where = f"{label} {path}"
    if INPUT_GRAD_COLUMN in flags:
        out[INPUT_GRAD_COLUMN] = _checked_choice(out[INPUT_GRAD_COLUMN], str.strip, ("", "0", "1"), where,
                                                 INPUT_GRAD_COLUMN, "1, 0 or empty")  # fmt: skip
    if LAYOUT_COLUMN in flags:
        out[LAYOUT_COLUMN] = _checked_choice(out[LAYOUT_COLUMN], lambda v: v.strip().lower(), ("", "nchw", "nhwc"),
                                             where, LAYOUT_COLUMN, "nchw, nhwc or empty")  # fmt: skip
    for column in int_columns:
        out[column] = _checked_ints(out[column], where, column, positive=column in extra_int_columns)
    _check_rows(out, where)
    return out.reset_index(drop=True)


def _read_text_csv(path: Path, label: str) -> pd.DataFrame:
    """The file's cells as str, verbatim, with :data:`SUITE_COLUMNS` present and at least one row."""
    if path.is_dir():
        raise ValueError(f"{label} {path} is a directory; give the CSV file")
    if not path.is_file():
        raise ValueError(f"{label} {path} does not exist")
    # Text columns read as str, verbatim: a layer named "0" must not become a number, nor the root module's
    # empty name (a bare Conv2d) NaN.
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{label} {path} is not a readable CSV file: {' '.join(str(exc).split())}") from None
    missing = [column for column in SUITE_COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"{label} {path} is missing column(s): {', '.join(missing)}")
    if frame.empty:
        raise ValueError(f"{label} {path} holds no rows")
    return frame


def _first_bad_line(bad: pd.Series) -> tuple[int, int]:
    """The first flagged row's index and its line as an editor shows it (the header is line 1)."""
    i = int(bad.to_numpy().nonzero()[0][0])
    return i, i + 2


def _checked_choice(
    text: pd.Series, normalise: Callable[[str], str], allowed: tuple[str, ...], where: str, column: str, what: str
) -> pd.Series:
    """``text`` normalised, or a ValueError naming the first line (and its value as written) not in ``allowed``."""
    values = text.map(normalise)
    bad = ~values.isin(allowed)
    if bad.any():
        i, line = _first_bad_line(bad)
        raise ValueError(f"{where}, line {line}, column {column!r}: {text.iloc[i]!r} is not {what}")
    return values


def _checked_ints(text: pd.Series, where: str, column: str, positive: bool) -> pd.Series:
    """A text column as int64, or a ValueError naming the first line that is no integer (or not positive)."""
    values = pd.to_numeric(text.str.strip(), errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        i, line = _first_bad_line(bad)
        raise ValueError(f"{where}, line {line}, column {column!r}: {text.iloc[i]!r} is not an integer")
    values = values.astype("int64")
    if positive and (values <= 0).any():
        i, line = _first_bad_line(values <= 0)
        raise ValueError(f"{where}, line {line}, column {column!r}: must be positive, got {values.iloc[i]}")
    return values


def _check_rows(table: pd.DataFrame, where: str) -> None:
    """A ValueError naming the first line with an empty network name or a shape that is no valid convolution."""
    empty = table["network"].str.strip() == ""
    if empty.any():
        raise ValueError(f"{where}, line {_first_bad_line(empty)[1]}, column 'network' is empty")
    for i, row in enumerate(table[list(LAYER_FIELDS)].to_dict("records")):
        try:
            ConvProblem(**row)
        except ValueError as exc:
            raise ValueError(f"{where}, line {i + 2}: not a valid convolution: {exc}") from None


# ----------------------------------------------------------------------------------------------- problems
def suite_layer_problems(
    frame: pd.DataFrame, dtype: str, layout: str = "nchw"
) -> list[tuple[dict[str, Any], ConvProblem]]:
    """Each row of a suite frame with its forward problem.

    Keeps the per-row (network, layer, size) identity, duplicates included, so that per-layer costs can be
    summed into whole-network totals.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows with (at least) :data:`LAYER_FIELDS`; typically from :func:`load_suite` / :func:`load_suites`.
    dtype, layout : str
        Numeric type and memory layout of the problems (see :data:`~algosel.problem.DTYPES`, ``LAYOUTS``).

    Returns
    -------
    list of (dict, ConvProblem)
        ``(row as a dict, problem with direction "fwd")`` in row order.

    Raises
    ------
    ValueError
        If a shape column is missing, or a row is not a valid problem.
    """
    missing = [column for column in LAYER_FIELDS if column not in frame.columns]
    if missing:
        raise ValueError(f"suite frame is missing column(s): {', '.join(missing)}")
    pairs = []
    for row in frame.to_dict("records"):
        fields = {field: int(row[field]) for field in LAYER_FIELDS}
        pairs.append((row, ConvProblem(**fields, dtype=dtype, layout=layout, direction="fwd")))
    return pairs


def suite_problems(frame: pd.DataFrame, dtype: str, layout: str = "nchw") -> list[ConvProblem]:
    """The distinct forward problems of a suite frame, in order of first appearance.

    Many layers share a shape (e.g. repeated ResNet blocks, or the same layer at several FPN sizes that
    coincide), and each shape needs measuring only once; deduplication is by :attr:`ConvProblem.shape_key`.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows with (at least) :data:`LAYER_FIELDS`.
    dtype, layout : str
        Numeric type and memory layout of the problems.

    Returns
    -------
    list of ConvProblem
        With direction ``"fwd"``.
    """
    seen: set[str] = set()
    problems = []
    for _, problem in suite_layer_problems(frame, dtype, layout):
        if problem.shape_key not in seen:
            seen.add(problem.shape_key)
            problems.append(problem)
    return problems
