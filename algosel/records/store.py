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
    return f"{int(bad.sum())} row(s), the first {row['problem_key']} / {row['candidate_id']} with {row[column]!r}"


def check_physical(frame: pd.DataFrame, path: str | Path) -> None:
    """Raise :class:`RecordsError` naming ``path`` and the column for rows that make no physical sense: an unknown
    status, a time that is not positive and finite where the status is ``ok``, a workspace below -1."""
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
    if int(version) != SCHEMA_VERSION:
        raise RecordsError(f"{path}: schema version {int(version)}, this algosel reads version {SCHEMA_VERSION}")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise RecordsError(f"{path}: missing columns {', '.join(missing)}")
    for name in COLUMNS:
        want, got = SCHEMA.field(name).type, table.schema.field(name).type
        if want != got:
            raise RecordsError(f"{path}: column {name} has type {got}, expected {want}")
    envs = {e["env_id"]: e for e in json.loads(meta.get(_META_ENVS, b"[]"))}
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
    frame = frame.sort_values("measured_at", kind="stable")
    frame = frame.drop_duplicates(["problem_key", "candidate_id", "env_id"], keep="last")
    return frame.reset_index(drop=True), envs


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
    counts = Counter(frame["env_id"].map(slugs))
    if not counts:
        raise RecordsError("no records to choose an environment from")
    slug = counts.most_common(1)[0][0]
    keep = [e for e, s in slugs.items() if s == slug]
    return frame[frame["env_id"].isin(keep)], dict(envs[keep[0]])
