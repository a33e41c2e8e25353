"""Read cuDNN's API log and price every convolution it ran: what was chosen, what algosel picks, the time lost.

cuDNN writes its API log under ``CUDNN_LOGLEVEL_DBG=3`` (``CUDNN_LOGDEST_DBG=<file>|stdout|stderr``): one block per
API call, a header ``I! CuDNN (v91900 56) function cudnnConvolutionForward() called:`` and indented field lines
``i!     name: type=...; val=...;`` (a field ending in ``:`` has nested fields). :func:`parse_log` turns blocks into
:class:`LogCall` trees; :func:`conv_calls` keeps the convolutions:

- legacy API: ``cudnnConvolutionForward`` / ``BackwardData`` / ``BackwardFilter`` (tensor, filter and convolution
  descriptors, the ``CUDNN_CONVOLUTION_*_ALGO`` and the descriptor's math type);
- graph API: ``cudnnBackendExecute`` of an execution plan whose graph is one convolution node (its tensors and
  convolution descriptor, the engine id and knob choices, i.e. the engine config).

:func:`analyze` looks each call's problem up in sweep records (or measures it live on a GPU), and reports the time
of the chosen candidate, of algosel's pick (the legacy selector for legacy calls, the engine-config selector for
graph calls), and of the best measured candidate.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.problem import DTYPE_TABLE, ConvProblem
from algosel.spaces.cudnn_graph import engine_config_name, same_engine_config
from algosel.spaces.cudnn_legacy import ALGOS

_HEADER = re.compile(r"^([IWE])! CuDNN \(v(\d+)(?: \d+)?\) function (\w+)\(\) called:\s*$")
_FIELD = re.compile(r"^([iwe])!( +)(\S.*)$")
_VALUE = re.compile(r"^type=([^;:]*)(?:;\s*val=(.*?);?|:)?\s*$")

_LEGACY_FUNCTIONS = {
    "cudnnConvolutionForward": ("fwd", "xDesc", "wDesc", "yDesc"),
    "cudnnConvolutionBackwardData": ("bwd_data", "dxDesc", "wDesc", "dyDesc"),
    "cudnnConvolutionBackwardFilter": ("bwd_filter", "xDesc", "dwDesc", "dyDesc"),
}
_GRAPH_OPERATIONS = {
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR": ("fwd", "xDesc", "wDesc", "yDesc"),
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR": ("bwd_data", "dxDesc", "wDesc", "dyDesc"),
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR": ("bwd_filter", "xDesc", "dwDesc", "dyDesc"),
}
#: cuDNN data types of the log to problem dtypes (float32 with TF32 allowed, as PyTorch's default; the legacy
#: FMA math type makes it strict below).
_DTYPES = {f"CUDNN_DATA_{d.cudnn_data_type}": name for name, d in DTYPE_TABLE.items() if name != "float32_strict"}


class LogError(ValueError):
    """A log that is not a cuDNN API log or is malformed; the message names the file and line."""


@dataclass
class Field:
    """One field of a call: its ``type=`` and ``val=`` (as text) and nested fields."""

    type: str = ""
    val: str | None = None
    children: dict[str, Field] = field(default_factory=dict)

    def get(self, *path: str) -> Field | None:
        node: Field | None = self
        for name in path:
            node = node.children.get(name) if node is not None else None
        return node

    def value(self, *path: str) -> str | None:
        node = self.get(*path)
        return None if node is None else node.val


@dataclass
class LogCall:
    """One API call of the log."""

    line: int  # of the header, 1-based
    function: str
    cudnn_version: int
    fields: Field


def _open(path: Path):
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", errors="replace") if gz else path.open(errors="replace")


def _lines(fh, path: Path) -> Iterator[str]:
    """The lines of an open log; a truncated or corrupt gzip stream is a :class:`LogError` naming the file."""
    lineno = 0
    try:
        for lineno, line in enumerate(fh, 1):  # noqa: B007 - read in the except clause
            yield line
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise LogError(f"{path}: truncated or corrupt gzip file after line {lineno} ({exc})") from None
    except OSError as exc:
        raise LogError(f"{path}: unreadable after line {lineno} ({exc.strerror or exc})") from None


def parse_log(path: str | Path) -> Iterator[LogCall]:
    """The API calls of a cuDNN log (plain or gzipped), in order.

    Raises :class:`LogError` naming the line for anything that is not part of a cuDNN API log.
    """
    path = Path(path)
    if path.is_dir():
        raise LogError(f"{path}: is a directory; give the log file")
    if not path.exists():
        raise LogError(f"{path}: no such log file")
    if not path.is_file():  # /dev/null, a pipe: no log a cuDNN run wrote
        raise LogError(f"{path}: not a regular file; give the log file")
    call: LogCall | None = None
    level = "I"
    stack: list[tuple[int, Field]] = []
    with _open(path) as fh:
        for lineno, raw in enumerate(_lines(fh, path), 1):
            line = raw.rstrip("\n")
            if not line.strip():
                continue  # blocks are separated by blank lines, but warning messages contain them too
            header = _HEADER.match(line)
            if header:
                if call is not None:
                    yield call
                level = header.group(1)
                call = LogCall(lineno, header.group(3), int(header.group(2)), Field())
                stack = [(-1, call.fields)]
                continue
            m = _FIELD.match(line)
            if call is None:
                raise LogError(
                    f"{path}:{lineno}: not a line of a cuDNN API log (expected a header like "
                    f"'I! CuDNN (v91900 56) function ...() called:'): {line[:120]!r}"
                )
            if m is None:
                if level in "WE" or line[0] in " \t":  # a message continued on its own line (" at: ...")
                    continue
                raise LogError(f"{path}:{lineno}: expected a field line 'i!     name: ...' in the call of line "
                               f"{call.line}: {line[:120]!r}")  # fmt: skip
            # Fields are indented by 4 spaces per level; the "Time: ..." and "Process=..." trailer by one.
            depth = max(0, (len(m.group(2)) - 4) // 4)
            content = m.group(3)
            while stack and stack[-1][0] >= depth:
                stack.pop()
            if not stack or depth > stack[-1][0] + 1:
                raise LogError(f"{path}:{lineno}: field indented deeper than its parent: {line[:120]!r}")
            name, sep, rest = content.partition(": ")
            if not sep:  # "Process=583; Thread=583; GPU=0; ..." trailer, or "name:" with nothing after
                name, rest = content.rstrip(":"), ""
            node = _field(rest)
            stack[-1][1].children.setdefault(name, node)
            stack.append((depth, node))
    if call is None:
        raise LogError(
            f"{path}: no cuDNN API call found (expected lines like 'I! CuDNN (v91900 56) function ...() called:'; "
            "produce the log with CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=<file>)"
        )
    yield call


def _field(rest: str) -> Field:
    m = _VALUE.match(rest)
    if m is None:  # "location=dev; addr=0x...;" and the like: keep the text
        return Field(val=rest.rstrip(";"))
    return Field(type=m.group(1), val=m.group(2))


# ----------------------------------------------------------------------------------------- calls to problems
@dataclass
class ConvCall:
    """A convolution the log shows running: its problem and the candidate that ran it."""

    line: int
    api: str  # "legacy" or "graph"
    problem: ConvProblem | None
    chosen: str  # candidate id in algosel's naming: legacy:<ALGO>.<MATH> or cudnn:eng<id>_k<knob>=<v>...
    note: str = ""  # why the problem could not be built, or an assumption made


def _ints(text: str | None, what: str, line: int) -> list[int]:
    if text is None or not re.fullmatch(r"\[-?\d+(,-?\d+)*\]", text.strip()):
        raise LogError(f"line {line}: {what} is {text!r}, expected a list like [8,64,56,56]")
    return [int(v) for v in text.strip()[1:-1].split(",")]


def _enum(text: str | None) -> str:
    """``CUDNN_DATA_FLOAT (0)`` -> ``CUDNN_DATA_FLOAT``."""
    return (text or "").split(" ")[0]


def _layout(dims: list[int], strides: list[int]) -> str | None:
    n, c, h, w = dims
    if strides == [c * h * w, h * w, w, 1]:
        return "nchw"
    if strides == [h * w * c, 1, w * c, c]:
        return "nhwc"
    return None


def _problem(direction: str, x: Field, w: Field, y: Field, conv: Field, dtype_text: str, groups: int | None,
             pads: tuple[list[int], list[int]], line: int) -> tuple[ConvProblem | None, str]:  # fmt: skip
    xd = _ints(x.value("dimA"), "the input's dimA", line)
    wd = _ints(w.value("dimA"), "the filter's dimA", line)
    yd = _ints(y.value("dimA"), "the output's dimA", line)
    if len(xd) != 4 or len(wd) != 4 or len(yd) != 4:
        return None, f"not a 2-D convolution (dims {xd}, {wd})"
    layout = _layout(xd, _ints(x.value("strideA"), "the input's strideA", line))
    if layout is None:
        return None, "input strides are neither NCHW nor NHWC"
    dtype = _DTYPES.get(_enum(dtype_text))
    if dtype is None:
        return None, f"data type {dtype_text} is not covered"
    lower, upper = pads
    if lower != upper:
        return None, f"asymmetric padding {lower} / {upper}"
    stride = _ints(conv.value("strideA"), "the convolution's strideA", line)
    dilation = _ints(conv.value("dilationA"), "the convolution's dilationA", line)
    groups = groups or xd[1] // wd[1]
    try:
        problem = ConvProblem(n=xd[0], c=xd[1], k=wd[0], h=xd[2], w=xd[3], r=wd[2], s=wd[3], pad_h=lower[0],
                              pad_w=lower[1], stride_h=stride[0], stride_w=stride[1], dilation_h=dilation[0],
                              dilation_w=dilation[1], groups=groups, dtype=dtype, layout=layout,
                              direction=direction)  # fmt: skip
    except ValueError as exc:
        return None, str(exc)
    if list(problem.y_shape) != yd:
        return None, f"output dims {yd} do not match the convolution of {xd} by {wd}"
    return problem, ""


def _legacy_call(call: LogCall) -> ConvCall:
    direction, xn, wn, yn = _LEGACY_FUNCTIONS[call.function]
    f = call.fields
    x, w, y, conv = f.get(xn), f.get(wn), f.get(yn), f.get("convDesc")
    if None in (x, w, y, conv) or f.value("algo") is None:
        raise LogError(f"line {call.line}: {call.function} lacks a descriptor or its algo")
    algo_enum = _enum(f.value("algo"))
    algo = algo_enum.split("_ALGO_", 1)[-1]
    algo = algo if algo in ALGOS[direction] else f"ALGO_{algo}"
    math_type = _enum(conv.value("mathType")).removeprefix("CUDNN_")
    dtype_text = x.value("dataType") or ""
    pad = _ints(conv.value("padA"), "padA", call.line)
    groups = int(conv.value("groupCount") or 1)
    problem, note = _problem(direction, x, w, y, conv, dtype_text, groups, (pad, pad), call.line)
    if problem is not None and problem.dtype == "float32" and math_type == "FMA_MATH":
        problem = problem.replace(dtype="float32_strict")  # FMA math forbids TF32
    return ConvCall(call.line, "legacy", problem, f"legacy:{algo}.{math_type}", note)


def _graph_call(call: LogCall) -> ConvCall | None:
    engine = call.fields.get("executionPlan", "engcfg", "engine")
    if engine is None:
        return None
    graph = engine.get("opGraph")
    ops = [(name, node) for name, node in (graph.children.items() if graph else []) if name == "operation"]
    if not ops or ops[0][1].type not in _GRAPH_OPERATIONS:
        return None  # not a convolution graph (normalisation, matmul...)
    op = ops[0][1]
    direction, xn, wn, yn = _GRAPH_OPERATIONS[op.type]
    x, w, y, conv = op.get(xn), op.get(wn), op.get(yn), op.get("convDesc")
    if None in (x, w, y, conv) or engine.value("engine_id") is None:
        raise LogError(f"line {call.line}: convolution graph lacks a tensor, its convolution or the engine id")
    knobs = {name: node.val for name, node in (engine.get("knobDesc") or Field()).children.items()}
    chosen = "cudnn:" + engine_config_name(int(engine.value("engine_id")), knobs)
    pads = (_ints(conv.value("lowerPadA"), "lowerPadA", call.line), _ints(conv.value("upperPadA"), "upperPadA",
                                                                          call.line))  # fmt: skip
    problem, note = _problem(direction, x, w, y, conv, x.value("type") or "", None, pads, call.line)
    if problem is not None and problem.dtype == "float32":
        notes = engine.get("numericalNotes")
        tc = notes is not None and "CUDNN_NUMERICAL_NOTE_TENSOR_CORE" in notes.children
        if not tc:
            note = "float32 without a tensor-core note: taken as TF32-allowed float32, PyTorch's default"
    return ConvCall(call.line, "graph", problem, chosen, note)


def conv_calls(calls: Iterable[LogCall]) -> list[ConvCall]:
    """The convolutions of a log: legacy ``cudnnConvolution*`` calls and graph executions of one conv node."""
    out = []
    for call in calls:
        if call.function in _LEGACY_FUNCTIONS:
            if "convDesc" not in call.fields.children:
                continue  # the same function's warning trace or returned status, logged as a block of its own
            out.append(_legacy_call(call))
        elif call.function == "cudnnBackendExecute":
            conv = _graph_call(call)
            if conv is not None:
                out.append(conv)
    return out


# ---------------------------------------------------------------------------------------------- pricing
def _times(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """problem_key -> candidate_id -> median time (correct, timed rows)."""
    from algosel.records.analysis import ok_rows  # noqa: PLC0415

    ok = ok_rows(frame)
    out: dict[str, dict[str, float]] = {}
    columns = (ok[c].tolist() for c in ("problem_key", "candidate_id", "time_ms_median"))  # not Arrow's row iterator
    for key, cid, t in zip(*columns):
        out.setdefault(key, {})[cid] = float(t)
    return out


def _same_config(a: str, b: str) -> bool:
    """Candidates are equal when their ids are, or when both are engine configs of the same engine and knob values
    (the order of knobs in a name may differ)."""
    if not (a.startswith("cudnn:") and b.startswith("cudnn:")):
        return a == b
    return same_engine_config(a[6:], b[6:])


def _lookup(times: Mapping[str, float], candidate: str) -> float:
    if candidate in times:
        return times[candidate]
    return next((t for cid, t in times.items() if _same_config(cid, candidate)), math.nan)


def analyze(calls: list[ConvCall], records: pd.DataFrame, selectors: Mapping[str, Any],
            measured: pd.DataFrame | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per distinct (api, problem, chosen candidate), with the number of calls and, in ms per call: the
    chosen candidate's time, algosel's pick and its time, the best candidate of the same API (legacy algorithms for
    legacy calls) and the best of every candidate algosel measures, and the time lost (chosen - best).

    ``selectors`` maps ``"legacy"`` / ``"graph"`` to a :class:`~algosel.learn.selector.Selector` (missing: no pick).
    ``measured`` adds records measured live for problems the shipped ones lack.
    """
    frame = records if measured is None else pd.concat([records, measured], ignore_index=True)
    times = _times(frame) if len(frame) else {}
    groups: dict[tuple, dict[str, Any]] = {}
    for c in calls:
        key = (c.api, c.problem.key if c.problem else f"line {c.line}", c.chosen)
        row = groups.get(key)
        if row is None:
            groups[key] = {"first_line": c.line, "calls": 1, "api": c.api, "problem": key[1], "chosen": c.chosen,
                           "note": c.note, "_problem": c.problem}  # fmt: skip
        else:
            row["calls"] += 1
    rows = []
    for row in groups.values():
        problem: ConvProblem | None = row.pop("_problem")
        t = times.get(problem.key, {}) if problem else {}
        legacy = row["api"] == "legacy"
        same_api = {cid: v for cid, v in t.items() if cid.startswith("legacy:") == legacy}
        pick, pick_ms = "", math.nan
        sel = selectors.get(row["api"])
        if problem is not None and sel is not None:
            try:
                pick = sel.choose(problem, top_k=1)[0].candidate_id
                pick_ms = _lookup(same_api, pick)
            except ValueError as exc:
                row["note"] = (row["note"] + "; " if row["note"] else "") + f"no pick: {exc}"
        chosen_ms = _lookup(same_api, row["chosen"])
        best_api = min(same_api.values(), default=math.nan)
        best_all = min(t.values(), default=math.nan)
        best_cid = min(t, key=t.get) if t else ""
        row.update(
            recorded=bool(t),
            chosen_ms=chosen_ms,
            algosel_pick=pick,
            algosel_ms=pick_ms,
            best_same_api_ms=best_api,
            best_ms=best_all,
            best_candidate=best_cid,
            lost_ms=chosen_ms - best_all,
        )
        if problem is not None and not t:
            row["note"] = (row["note"] + "; " if row["note"] else "") + "not in the records (use --measure on a GPU)"
        elif t and math.isnan(chosen_ms):
            row["note"] = (row["note"] + "; " if row["note"] else "") + "chosen candidate not timed in the records"
        rows.append(row)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> str:
    """Totals over all calls (time per call x calls) where the records price them."""
    priced = table.dropna(subset=["chosen_ms", "best_ms"])
    lines = [f"{int(table['calls'].sum())} convolution calls, {len(table)} distinct (problem, choice); "
             f"{int(priced['calls'].sum())} calls priced from records"]  # fmt: skip
    if len(priced):
        chosen = float((priced["chosen_ms"] * priced["calls"]).sum())
        best = float((priced["best_ms"] * priced["calls"]).sum())
        with_pick = priced.dropna(subset=["algosel_ms"])
        lines.append(f"chosen: {chosen:.3f} ms; best measured: {best:.3f} ms ({chosen / best:.2f}x the best)")
        if len(with_pick):
            picked = float((with_pick["algosel_ms"] * with_pick["calls"]).sum())
            base = float((with_pick["chosen_ms"] * with_pick["calls"]).sum())
            lines.append(
                f"on the {int(with_pick['calls'].sum())} calls algosel's pick is priced for: chosen {base:.3f} ms, "
                f"algosel {picked:.3f} ms ({base / picked:.2f}x faster with algosel's pick, within the same API)"
            )
    return "\n".join(lines)
