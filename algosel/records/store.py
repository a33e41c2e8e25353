"""Sweep records: one row per (problem, candidate), stored as Parquet with a schema version.

A dataset is a directory of ``part-*.parquet`` files. Each part carries, in its Parquet key-value metadata, the
schema version and the environment records its rows refer to (``env_id``). Parts are written atomically (to a
temporary name, then renamed), so a reader never sees half a file.

While a sweep runs, every finished case (one shape x dtype x layout, all directions) is appended as one JSON
line to a journal and flushed; the journal is compacted into a part at the end of the run, or recovered at the
start of the next one. A killed sweep therefore loses at most the case in flight, and compaction skips the cases a
part already holds, so a kill between writing the part and deleting the journal duplicates nothing.

Records are checked for physical sense as they are read (:func:`read_part`): a known status, times > 0 where the
status is ``ok``, workspace >= -1 (-1: unknown). A row that fails is a one-line :class:`RecordsError` naming the
file and the column.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from algosel.files import atomic_path
from algosel.problem import DIRECTIONS, DTYPES, LAYOUTS, SHAPE_FIELDS
from algosel.records.schema import COLUMNS, SCHEMA, SCHEMA_VERSION
from algosel.spaces import STATUSES

_META_VERSION = b"algosel.schema_version"
_META_ENVS = b"algosel.environments"


class RecordsError(ValueError):
    """A records file or dataset that cannot be read or does not match the schema."""


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if missing:
        raise RecordsError(f"records lack columns: {', '.join(missing)}")
    return pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows], schema=SCHEMA)


def write_part(path: str | Path, rows: list[dict[str, Any]], environments: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` to a Parquet part atomically, with the environments they refer to."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    envs = {e["env_id"]: e for e in environments}
    unknown = {r["env_id"] for r in rows} - set(envs)
    if unknown:
        raise RecordsError(f"rows refer to unknown environments: {', '.join(sorted(unknown))}")
    table = _table(rows).replace_schema_metadata(
        {_META_VERSION: str(SCHEMA_VERSION).encode(), _META_ENVS: json.dumps(list(envs.values())).encode()}
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


#: Time columns that must be positive and finite where the status is ``ok``.
_OK_TIME_COLUMNS = ("time_ms_median", "time_ms_min", "time_ms_p25", "time_ms_p75")


def _first_bad(frame: pd.DataFrame, bad: pd.Series, column: str) -> str:
    row = frame[bad].iloc[0]
    value = row[column].item() if hasattr(row[column], "item") else row[column]  # -5, not np.int64(-5)
    return f"{int(bad.sum())} row(s), the first {row['problem_key']} / {row['candidate_id']} with {value!r}"


#: Problem columns that must be >= 1 (the others, the paddings, >= 0): :class:`~algosel.problem.ConvProblem`'s rules.
_POSITIVE_COLUMNS = ("n", "c", "k", "h", "w", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")


def _problem_key(frame: pd.DataFrame) -> pd.Series:
    """:attr:`~algosel.problem.ConvProblem.key` of every row, from its problem columns (vectorised)."""
    f = {c: frame[c].astype(str) for c in SHAPE_FIELDS}
    return (
        "n" + f["n"] + "_c" + f["c"] + "_k" + f["k"] + "_h" + f["h"] + "_w" + f["w"] + "_r" + f["r"] + "_s" + f["s"]
        + "_p" + f["pad_h"] + "x" + f["pad_w"] + "_u" + f["stride_h"] + "x" + f["stride_w"]
        + "_d" + f["dilation_h"] + "x" + f["dilation_w"] + "_g" + f["groups"]
        + "_" + frame["dtype"] + "_" + frame["layout"] + "_" + frame["direction"]
    )  # fmt: skip


def check_problems(frame: pd.DataFrame, path: str | Path) -> None:
    """Raise :class:`RecordsError` naming ``path``, the column and the first bad value for rows that are no valid
    convolution (the rules of :class:`~algosel.problem.ConvProblem`: sizes >= 1, paddings >= 0, a known dtype,
    layout and direction, channels divisible by the groups, a kernel within the padded input) or whose
    ``problem_key`` is not that of their columns. Vectorised: a dataset of half a million rows takes ~0.1 s."""
    for column in _POSITIVE_COLUMNS:
        bad = ~(frame[column] >= 1)  # a missing value (NaN) too
        if bad.any():
            raise RecordsError(f"{path}: column {column}: below 1 in {_first_bad(frame, bad, column)}")
    for column in ("pad_h", "pad_w"):
        bad = ~(frame[column] >= 0)
        if bad.any():
            raise RecordsError(f"{path}: column {column}: below 0 in {_first_bad(frame, bad, column)}")
    for column, allowed in (("dtype", DTYPES), ("layout", LAYOUTS), ("direction", DIRECTIONS)):
        bad = ~frame[column].isin(allowed)
        if bad.any():
            raise RecordsError(
                f"{path}: column {column}: unknown value in {_first_bad(frame, bad, column)} "
                f"(known: {', '.join(allowed)})"
            )
    for column in ("c", "k"):
        bad = frame[column] % frame["groups"] != 0
        if bad.any():
            raise RecordsError(f"{path}: column {column}: not divisible by groups in {_first_bad(frame, bad, column)}")
    for kernel, size, pad, dilation in (("r", "h", "pad_h", "dilation_h"), ("s", "w", "pad_w", "dilation_w")):
        bad = frame[dilation] * (frame[kernel] - 1) + 1 > frame[size] + 2 * frame[pad]
        if bad.any():
            raise RecordsError(
                f"{path}: column {kernel}: the (dilated) kernel is larger than the padded input in "
                f"{_first_bad(frame, bad, kernel)}"
            )
    keys = frame.drop_duplicates("problem_key")
    bad = keys["problem_key"] != _problem_key(keys)
    if bad.any():
        raise RecordsError(
            f"{path}: column problem_key: not the key of the row's problem columns in "
            f"{_first_bad(keys, bad, 'problem_key')} (its columns say {_problem_key(keys[bad]).iloc[0]!r})"
        )


def check_physical(frame: pd.DataFrame, path: str | Path) -> None:
    """Raise :class:`RecordsError` naming ``path`` and the column for rows that make no physical sense: no valid
    convolution (:func:`check_problems`), an unknown status, a time that is not positive and finite where the
    status is ``ok``, a workspace below -1."""
    check_problems(frame, path)
    unknown = ~frame["status"].isin(STATUSES)
    if unknown.any():
        raise RecordsError(
            f"{path}: column status: unknown status in {_first_bad(frame, unknown, 'status')} "
            f"(known: {', '.join(STATUSES)})"
        )
    ok = frame["status"] == "ok"
    for column in _OK_TIME_COLUMNS:
        t = frame[column]
        bad = ok & ~((t > 0) & (t < math.inf))
        if bad.any():
            raise RecordsError(
                f"{path}: column {column}: a time that is not positive and finite where status is 'ok', in "
                f"{_first_bad(frame, bad, column)}"
            )
    bad = frame["workspace_bytes"] < -1
    if bad.any():
        first = _first_bad(frame, bad, "workspace_bytes")
        raise RecordsError(f"{path}: column workspace_bytes: below -1 (-1 means unknown) in {first}")


def _environments(raw: bytes, path: Path) -> dict[str, dict[str, Any]]:
    """The environment records of a part's metadata by ``env_id``; a one-line :class:`RecordsError` naming the file
    for anything but a JSON list of objects, each with a string ``env_id``."""
    try:
        envs = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordsError(f"{path}: the environments in the file metadata are not JSON ({exc})") from None
    if not isinstance(envs, list):
        raise RecordsError(f"{path}: the environments in the file metadata are a {type(envs).__name__}, not a list")
    for env in envs:
        if not isinstance(env, dict) or not isinstance(env.get("env_id"), str):
            raise RecordsError(
                f"{path}: an environment in the file metadata is {str(env)[:80]!r}, not an object with an env_id"
            )
    return {e["env_id"]: e for e in envs}


def read_part(path: str | Path) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Read one part; validate its schema version and columns.

    Returns
    -------
    frame, environments
        The records, and the environment records by ``env_id``.
    """
    path = Path(path)
    if not path.exists():
        raise RecordsError(f"{path}: no such records file")
    try:
        pf = pq.ParquetFile(path)
        meta = pf.schema_arrow.metadata or {}
        table = pf.read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise RecordsError(f"{path}: not a readable Parquet records file (truncated or corrupt?): {exc}") from exc
    version = meta.get(_META_VERSION)
    if version is None:
        raise RecordsError(f"{path}: no algosel schema version in the file metadata (not a records file?)")
    if not version.strip().isdigit():
        raise RecordsError(f"{path}: schema version {version[:40]!r} in the file metadata is not a number")
    if int(version) != SCHEMA_VERSION:
        raise RecordsError(f"{path}: schema version {int(version)}, this algosel reads version {SCHEMA_VERSION}")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise RecordsError(f"{path}: missing columns {', '.join(missing)}")
    for name in COLUMNS:
        want, got = SCHEMA.field(name).type, table.schema.field(name).type
        if want != got:
            raise RecordsError(f"{path}: column {name} has type {got}, expected {want}")
    envs = _environments(meta.get(_META_ENVS, b"[]"), path)
    frame = table.select(list(COLUMNS)).to_pandas()
    unknown = set(frame["env_id"].unique()) - set(envs)
    if unknown:
        raise RecordsError(f"{path}: rows refer to environments not in the file: {', '.join(sorted(unknown))}")
    check_physical(frame, path)
    return frame, envs


def part_paths(location: str | Path) -> list[Path]:
    """The part files of a dataset directory (or a single file)."""
    location = Path(location)
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise RecordsError(f"{location}: no such dataset directory or records file")
    return sorted(location.glob("part-*.parquet"))


def load_records(*locations: str | Path) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Load and concatenate every part of the given datasets (directories or files).

    Rows measured twice (same problem, candidate and environment, e.g. after a re-run) keep the newest.
    """
    frames, envs = [], {}
    for location in locations:
        for path in part_paths(location):
            frame, part_envs = read_part(path)
            frames.append(frame)
            envs.update(part_envs)
    if not frames:
        raise RecordsError(f"no records under {', '.join(str(p) for p in locations)}")
    frame = pd.concat(frames, ignore_index=True)
    # Oldest first, the newest of a row measured twice kept: one take of every column (sorting the frame and then
    # dropping its duplicates took each column twice, a second of a large dataset).
    order = frame["measured_at"].argsort(kind="stable").to_numpy()
    newest = ~frame[["problem_key", "candidate_id", "env_id"]].take(order).duplicated(keep="last").to_numpy()
    return frame.take(order[newest]).reset_index(drop=True), envs


class Journal:
    """Append-only JSON-lines journal of finished cases (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, case_key: str, rows: list[dict[str, Any]], environment: dict[str, Any]) -> None:
        """Append one finished case and flush it to disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"case_key": case_key, "environment": environment, "rows": rows}, default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
        """Rows, environments and warnings; a truncated or corrupt line (a kill mid-write) is skipped."""
        rows, envs, warnings = [], {}, []
        if not self.path.exists():
            return rows, envs, warnings
        with self.path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    case_rows, env = entry["rows"], entry["environment"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    warnings.append(f"{self.path}:{number}: skipped a damaged journal line ({exc})")
                    continue
                rows.extend(case_rows)
                envs[env["env_id"]] = env
        return rows, envs, warnings

    def compact(self, directory: str | Path, name: str, skip_cases: Collection[str] = ()) -> Path | None:
        """Move the journal's rows into ``directory/part-<name>.parquet`` (atomically; ``part-<name>-2.parquet``
        and so on if that exists) and delete it. Rows of cases in ``skip_cases`` (already in a part: a run killed
        after writing the part, before deleting the journal) are dropped."""
        rows, envs, _ = self.read()
        rows = [r for r in rows if r["case_key"] not in skip_cases]
        if not rows:
            self.path.unlink(missing_ok=True)
            return None
        out, suffix = Path(directory) / f"part-{name}.parquet", 1
        while out.exists():  # never replace an earlier part: two runs within one second get the same name
            suffix += 1
            out = Path(directory) / f"part-{name}-{suffix}.parquet"
        used = {r["env_id"] for r in rows}
        out = write_part(out, rows, [e for e in envs.values() if e["env_id"] in used])
        self.path.unlink()
        return out


def main_environment(frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> tuple[pd.DataFrame, dict]:
    """The records of the most common GPU x cuDNN, and that environment (a model is specific to both)."""
    from algosel.records.environment import gpu_slug  # noqa: PLC0415

    slugs = {e: gpu_slug(envs[e]) for e in envs}
    counts = Counter(frame["env_id"].map(slugs).tolist())  # a list: iterating an Arrow column is slow
    if not counts:
        raise RecordsError("no records to choose an environment from")
    slug = counts.most_common(1)[0][0]
    keep = [e for e, s in slugs.items() if s == slug]
    return frame[frame["env_id"].isin(keep)], dict(envs[keep[0]])


def one_environment(
    frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]], what: str = "a selector", hint: str = ""
) -> tuple[pd.DataFrame, dict]:
    """:func:`main_environment` of records that hold one GPU x cuDNN only: ``what`` (a selector, an evaluation) is
    of one, and another's records dropped or mixed in would change its numbers without a word. ``hint`` ends the
    refusal (another way out).

    Raises
    ------
    RecordsError
        Naming each GPU x cuDNN and its records, and the way out (one GPU's records; a joint model).
    """
    from algosel.records.environment import gpu_slug  # noqa: PLC0415

    counts = Counter(frame["env_id"].map({e: gpu_slug(envs[e]) for e in envs}).tolist())
    if len(counts) > 1:
        held = ", ".join(f"{slug} ({n:,} records)" for slug, n in sorted(counts.items()))
        raise RecordsError(
            f"records of {len(counts)} GPU x cuDNN environments: {held}; {what} is of one: give one GPU's records{hint}"
        )
    return main_environment(frame, envs)
