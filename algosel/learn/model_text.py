"""A strict reader of LightGBM's text model format, run on a model file before LightGBM parses it.

LightGBM 4.7 parses a text model without checking it: its trees are read in parallel at the byte offsets the header's
``tree_sizes`` gives, and any error there (a size that no longer matches its block, a garbled number, a missing
field) throws inside an OpenMP region, which ends the process (abort); a child index or a feature index out of
range loads, then reads out of bounds when predicting (segmentation fault); a child that points back up the tree
makes prediction loop forever; a garbled number such as ``2x5`` is read as ``2``, silently. A manifest's SHA-256
catches a damaged file; this check catches whatever a file with a matching (or recomputed) hash may still hold, so
that no model file can take the process down, and says which line is wrong.

:func:`check_model_text` accepts what LightGBM 4 writes for the models algosel trains (one output, plain trees,
``lambdarank`` or ``regression``): every header field LightGBM reads, every tree block at its recorded offset with
every field it reads (count and syntax of every number), the tree structure (each node reached once, children
after their parent, leaves and features in range, categorical splits within their bitsets), and the parameters
and ``pandas_categorical`` lines after the trees.
"""

from __future__ import annotations

import json
import re

import numpy as np

#: Header fields LightGBM writes (``average_output`` alone on its line); any other key is refused.
_HEADER_KEYS = {"tree", "version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx",
                "objective", "average_output", "feature_names", "monotone_constraints", "feature_infos",
                "tree_sizes"}  # fmt: skip
#: Objectives of the models algosel trains (:mod:`algosel.learn.ranker`, :mod:`algosel.learn.time_model`).
_OBJECTIVES = {"lambdarank", "regression"}
_INT = r"-?\d{1,10}"
_INTS = re.compile(rf"{_INT}(?: {_INT})*")
#: The characters of a line of integers, of numbers (as LightGBM writes them: ``%.17g``, ``inf``, ``nan``).
_INT_CHARS = re.compile(r"[-0-9 ]*")
_FLOAT_CHARS = re.compile(r"[-+.0-9einfa ]*")
#: A token LightGBM's number reader cannot start on (it aborts): not a digit, '-' and a digit, inf or nan.
_BAD_START = re.compile(r"(?:^| )(?!-?[0-9]|-?inf|nan)")
_PARAMETER = re.compile(r"\[\w+: [^\n]*\]")
#: A tree block's fields: (numbers or integers, how many: "n" leaves, "i" internal nodes, "c" categories + 1, "t"
#: the categories' bitset words, "1" one, and whether LightGBM's prediction or its strict reader uses the values).
#: LightGBM reads up to 22 lines of a block.
_TREE_FIELDS = {
    "num_leaves": (False, "1", True), "num_cat": (False, "1", True), "split_feature": (False, "i", True),
    "split_gain": (True, "i", False), "threshold": (True, "i", True), "decision_type": (False, "i", True),
    "left_child": (False, "i", True), "right_child": (False, "i", True), "leaf_value": (True, "n", True),
    "leaf_weight": (True, "n", False), "leaf_count": (False, "n", False), "internal_value": (True, "i", False),
    "internal_weight": (True, "i", False), "internal_count": (False, "i", False),
    "cat_boundaries": (False, "c", True), "cat_threshold": (False, "t", True), "is_linear": (False, "1", True),
    "shrinkage": (True, "1", True),
}  # fmt: skip
_REQUIRED = ("num_leaves", "num_cat", "leaf_value")
_REQUIRED_SPLIT = ("split_feature", "threshold", "decision_type", "left_child", "right_child")


class ModelTextError(ValueError):
    """A model text LightGBM must not parse; the message names the line (1-based) and the field."""


def check_model_text(data: bytes) -> str:
    """The text of ``data``, a LightGBM text model, once it is shown safe for LightGBM 4 to parse and predict with.

    Raises
    ------
    ModelTextError
        Naming the line and field of the first problem found.
    """
    for byte, name in ((b"\0", "NUL"), (b"\r", "carriage return")):  # LightGBM reads either as a line's end
        if byte in data:
            raise ModelTextError(f"byte {data.index(byte)}: a {name} byte")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelTextError(f"byte {exc.start}: not UTF-8 text") from None
    start = data.find(b"\nTree=") + 1
    if start == 0:
        raise ModelTextError("no tree (no line 'Tree=0')")
    header = _header(data[:start].decode("utf-8"))
    line = data.count(b"\n", 0, start) + 1  # of the block being read
    offset = start
    for i, size in enumerate(header["tree_sizes"]):
        if offset + size > len(data):
            raise ModelTextError(f"line {line}: tree_sizes runs past the end of the file at tree {i} (cut short?)")
        block = data[offset : offset + size].decode("ascii", errors="replace")
        _tree(block, i, line, header["features"])
        line += block.count("\n")
        offset += size
    _tail(data[offset:].decode("utf-8"), line)
    return text


def _fail(line: int, text: str) -> ModelTextError:
    return ModelTextError(f"line {line}: {text}")


def _int(value: str, line: int, key: str, low: int) -> int:
    if not re.fullmatch(_INT, value) or int(value) < low:
        raise _fail(line, f"{key}={value[:40]!r}: expected an integer >= {low}")
    return int(value)


def _header(text: str) -> dict:
    """The header's fields LightGBM reads, checked (lines up to the first tree)."""
    fields: dict[str, tuple[int, str]] = {}
    for number, row in enumerate(text.split("\n"), 1):
        if not row:
            continue
        key, _, value = row.partition("=")
        if key not in _HEADER_KEYS or key in fields:
            raise _fail(number, f"{'repeated' if key in fields else 'unknown'} header field {row[:40]!r}")
        if "=" in value and key not in ("feature_names", "monotone_constraints"):
            raise _fail(number, f"{key}: more than one '=' on the line")
        fields[key] = (number, value)
    for key in ("num_class", "label_index", "max_feature_idx", "objective", "feature_names", "feature_infos",
                "tree_sizes"):  # fmt: skip
        if key not in fields:
            raise ModelTextError(f"the header has no {key}= line")
    ints = {k: _int(fields[k][1], fields[k][0], k, 0) for k in ("num_class", "label_index", "max_feature_idx")}
    per_iteration = fields.get("num_tree_per_iteration", fields["num_class"])
    if ints["num_class"] != 1 or _int(per_iteration[1], per_iteration[0], "num_tree_per_iteration", 0) != 1:
        raise _fail(fields["num_class"][0], "num_class and num_tree_per_iteration must be 1 (one output)")
    number, objective = fields["objective"]
    if objective.split(" ")[0] not in _OBJECTIVES:
        raise _fail(number, f"objective={objective[:40]!r}: not one of {', '.join(sorted(_OBJECTIVES))}")
    features = ints["max_feature_idx"] + 1
    for key in ("feature_names", "feature_infos", "monotone_constraints"):
        if key in fields:
            number, value = fields[key]
            tokens = value.split(" ")
            if len(tokens) != features or not all(tokens):
                raise _fail(number, f"{key}: {len(tokens)} space-separated names, max_feature_idx says {features}")
    number, value = fields["tree_sizes"]
    if not _INTS.fullmatch(value):
        raise _fail(number, f"tree_sizes: not a list of integers ({value[:40]!r})")
    sizes = [int(v) for v in value.split(" ")]
    if min(sizes) < 1:
        raise _fail(number, "tree_sizes: a size below 1")
    return {"tree_sizes": sizes, "features": features}


def _tree(block: str, index: int, first_line: int, features: int) -> None:
    """One tree block (``Tree=<index>``, its fields, a blank line), as LightGBM reads it, and its structure."""
    rows = block.split("\n")
    if rows[0] != f"Tree={index}":
        raise _fail(first_line, f"expected 'Tree={index}' at this tree's tree_sizes offset, got {rows[0][:40]!r} "
                                "(a block cut out, added or resized)")  # fmt: skip
    end = rows.index("", 1) if "" in rows[1:] else len(rows)
    if end > 23 or any(rows[end:]) or len(rows) - end < 2:
        raise _fail(first_line, f"tree {index}: the block is not the {len(block)} bytes tree_sizes records (a line "
                                "changed, added or cut)")  # fmt: skip
    raw: dict[str, tuple[int, str]] = {}
    for k, row in enumerate(rows[1:end], first_line + 1):
        key, sep, value = row.partition("=")
        if not sep or key not in _TREE_FIELDS or key in raw:
            raise _fail(k, f"tree {index}: {'repeated' if key in raw else 'unknown'} field {row[:40]!r}")
        raw[key] = (k, value)
    missing = [f for f in _REQUIRED if f not in raw]
    if missing:
        raise _fail(first_line, f"tree {index}: no {missing[0]}= line")
    leaves = _int(raw["num_leaves"][1], raw["num_leaves"][0], "num_leaves", 1)
    cats = _int(raw["num_cat"][1], raw["num_cat"][0], "num_cat", 0)
    if raw.get("is_linear", (0, "0"))[1] != "0":
        raise _fail(raw["is_linear"][0], f"tree {index}: a linear tree (algosel trains none)")
    if leaves > 1:
        missing = [f for f in _REQUIRED_SPLIT if f not in raw]
        if missing:
            raise _fail(first_line, f"tree {index}: no {missing[0]}= line")
    if cats and ("cat_boundaries" not in raw or "cat_threshold" not in raw):
        raise _fail(first_line, f"tree {index}: num_cat={cats} without cat_boundaries and cat_threshold")
    counts = {"1": 1, "n": leaves, "i": leaves - 1, "c": cats + 1, "t": 0}
    values: dict[str, np.ndarray] = {}
    for key in ("cat_boundaries", *(k for k in raw if k != "cat_boundaries")):  # the bitset words' count first
        if key not in raw:
            continue
        k, value = raw[key]
        is_float, kind, used = _TREE_FIELDS[key]
        parsed = _numbers(value, counts[kind], is_float, used)
        if parsed is None:
            what = "numbers" if is_float else "integers"
            raise _fail(k, f"tree {index}: {key} must be {counts[kind]} space-separated {what} (got {value[:60]!r})")
        values[key] = parsed
        if key == "cat_boundaries":
            if parsed[0] != 0 or np.any(np.diff(parsed) < 0):
                raise _fail(k, f"tree {index}: cat_boundaries must rise from 0")
            counts["t"] = int(parsed[-1])
    words = values.get("cat_threshold")
    if words is not None and (np.any(words < 0) or np.any(words >= 2**32)):
        raise _fail(raw["cat_threshold"][0], f"tree {index}: cat_threshold holds a value outside 32 bits")
    if not np.all(np.isfinite(values["leaf_value"])):
        raise _fail(raw["leaf_value"][0], f"tree {index}: leaf_value holds inf or nan")
    if leaves > 1:
        _structure(values, raw, index, leaves, cats, features)


def _numbers(value: str, want: int, is_float: bool, used: bool) -> np.ndarray | None:
    """``want`` numbers (or integers) separated by single spaces, parsed where ``used``; ``None`` if not so.

    LightGBM reads the statistics of a tree (gains, leaf weights, internal values, counts) for nothing a prediction
    needs: their count and characters are checked, and that each number starts as one (its reader of leaf weights
    aborts on a token it cannot start on). Every value a prediction uses is parsed here in full, with Python's float
    (which refuses any token LightGBM would read only a part of).
    """
    if want == 0:
        return np.empty(0) if value == "" else None
    if value.count(" ") + 1 != want or "  " in value or value[0] == " " or value[-1] == " ":
        return None
    if not (_FLOAT_CHARS if is_float else _INT_CHARS).fullmatch(value):
        return None
    if not used:
        return None if is_float and _BAD_START.search(value) else np.empty(0)
    if is_float:
        try:
            return np.array(value.split(" "), dtype=np.float64)
        except ValueError:
            return None
    # A '-' only at the start of a token: then every token is a plain integer, which fromstring reads whole.
    rest = (" " + value).replace(" -", " ")
    if "-" in rest or "  " in rest or rest[-1] == " ":
        return None
    return np.fromstring(value, dtype=np.int64, sep=" ")


def _structure(values: dict[str, np.ndarray], raw: dict, index: int, leaves: int, cats: int, features: int) -> None:
    """Every index a prediction follows is in range, and the nodes form one tree (no loop, nothing unreached)."""
    feature = values["split_feature"]
    if np.any(feature < 0) or np.any(feature >= features):
        raise _fail(raw["split_feature"][0], f"tree {index}: split_feature outside 0..{features - 1}")
    decision = values["decision_type"]
    if np.any(decision < 0) or np.any(decision > 11):  # bits: categorical, default left, missing type 0..2
        raise _fail(raw["decision_type"][0], f"tree {index}: decision_type outside 0..11")
    threshold = values["threshold"]
    categorical = (decision & 1) == 1
    if np.any(np.isnan(threshold)):
        raise _fail(raw["threshold"][0], f"tree {index}: threshold holds nan")
    t = threshold[categorical]
    if t.size and (np.any(t != np.floor(t)) or np.any(t < 0) or np.any(t >= cats)):
        raise _fail(raw["threshold"][0], f"tree {index}: a categorical threshold is not a category 0..{cats - 1}")
    parents = np.arange(leaves - 1)
    for key in ("left_child", "right_child"):
        child = values[key]
        inner, leaf = child >= 0, child < 0
        out = np.any(child[inner] <= parents[inner]) or np.any(child[inner] > leaves - 2)
        if out or np.any(~child[leaf] >= leaves):
            raise _fail(raw[key][0], f"tree {index}: {key} points outside the tree or back up it")
    child = np.concatenate([values["left_child"], values["right_child"]])
    reached_inner = np.bincount(child[child >= 0], minlength=leaves - 1)
    reached_leaf = np.bincount(~child[child < 0], minlength=leaves)
    if reached_inner[0] != 0 or np.any(reached_inner[1:] != 1) or np.any(reached_leaf != 1):
        raise _fail(raw["left_child"][0], f"tree {index}: left_child and right_child do not reach every node once")


def _tail(text: str, line: int) -> None:
    """After the trees: ``end of trees``, the parameters LightGBM reads back, ``pandas_categorical``."""
    rows = text.split("\n")
    if rows[0] != "end of trees":
        raise _fail(line, f"expected 'end of trees' after the last tree, got {rows[0][:40]!r}")
    if "parameters:" in rows:
        first = rows.index("parameters:")
        if "end of parameters" not in rows[first:]:
            raise _fail(line + first, "parameters: without 'end of parameters' (cut short?)")
        last = rows.index("end of parameters", first)
        for k in range(first + 1, last):
            if rows[k] and not _PARAMETER.fullmatch(rows[k]):
                raise _fail(line + k, f"not a parameter line '[name: value]': {rows[k][:40]!r}")
    tail = [r for r in rows if r]
    if tail[-1].startswith("pandas_categorical:"):
        try:
            value = json.loads(tail[-1][len("pandas_categorical:") :])
        except ValueError:
            value = ""
        if value is not None and not isinstance(value, list):
            raise _fail(line + len(rows) - 1 - rows[::-1].index(tail[-1]), "pandas_categorical: not null or a list")
