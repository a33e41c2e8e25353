"""Tests of algosel.records: Parquet parts, dataset loading, schema checks and the journal."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.records import (
    COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    Journal,
    RecordsError,
    load_records,
    part_paths,
    read_part,
    write_part,
)

ENV = {"env_id": "env-a", "gpu_name": "Test GPU", "cudnn": 90000}
ENV_B = {"env_id": "env-b", "gpu_name": "Other GPU", "cudnn": 90100}


def make_row(
    problem: ConvProblem,
    candidate_id: str = "gemm:fc",
    time_ms: float = 1.0,
    status: str = "ok",
    env_id: str = "env-a",
    measured_at: str = "2026-01-01T00:00:00+00:00",
) -> dict[str, Any]:
    space, name = candidate_id.split(":")
    ok = status == "ok"
    row = {
        **problem.to_dict(),
        "problem_key": problem.key,
        "case_key": problem.case_key,
        "source": "grid",
        "candidate_id": candidate_id,
        "space": space,
        "engine_id": 7 if space == "cudnn" else -1,
        "knobs": "k=1" if space == "cudnn" else "",
        "rank_a": 0,
        "rank_b": 2,
        "rank_fallback": -1,
        "notes": "tensor_core,runtime" if space == "cudnn" else "",
        "status": status,
        "reason": "" if ok else f"{status} because",
        "time_ms_median": time_ms if ok else math.nan,
        "time_ms_p25": 0.9 * time_ms if ok else math.nan,
        "time_ms_p75": 1.1 * time_ms if ok else math.nan,
        "time_ms_min": 0.8 * time_ms if ok else math.nan,
        "repeats": 5 if ok else 0,
        "starved": name == "starved",
        "host_overhead_us": 12.5 if ok else math.nan,
        "workspace_bytes": 1024,
        "max_rel_error": 1e-6 if ok else math.nan,
        "env_id": env_id,
        "measured_at": measured_at,
    }
    assert set(row) == set(COLUMNS)
    return row


P1 = ConvProblem(n=2, c=3, k=4, h=5, w=5, r=5, s=5)
P2 = ConvProblem(
    n=1,
    c=8,
    k=8,
    h=6,
    w=6,
    r=3,
    s=3,
    pad_h=1,
    pad_w=1,
    groups=8,
    dtype="float16",
    layout="nhwc",
    direction="bwd_filter",
)


def sample_rows() -> list[dict[str, Any]]:
    return [
        make_row(P1, "gemm:fc", 0.25),
        make_row(P1, "cudnn:e7", 0.5),
        make_row(P1, "pytorch:starved", 0.75),
        make_row(P2, "cudnn:e7", status="wrong_result"),
        make_row(P2, DEFAULT_ID, 2.0),
    ]


def _rewrite(path: Path, table: pa.Table, version: str | None = str(SCHEMA_VERSION), envs=(ENV,)) -> None:
    meta = {b"algosel.environments": json.dumps(list(envs)).encode()}
    if version is not None:
        meta[b"algosel.schema_version"] = version.encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


# ------------------------------------------------------------------------------------------------- parts
def test_write_read_round_trip_keeps_values_and_types(tmp_path: Path) -> None:
    rows = sample_rows()
    path = write_part(tmp_path / "sub" / "part-a.parquet", rows, [ENV])
    assert path == tmp_path / "sub" / "part-a.parquet" and path.is_file()
    assert [p.name for p in tmp_path.joinpath("sub").iterdir()] == ["part-a.parquet"], "no temporary file left"
    frame, envs = read_part(path)
    assert envs == {"env-a": ENV}
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == len(rows)
    for column in COLUMNS:
        kind = SCHEMA.field(column).type
        series = frame[column]
        if kind == pa.int64():
            assert series.dtype == "int64", column
        elif kind == pa.float64():
            assert series.dtype == "float64", column
        elif kind == pa.bool_():
            assert series.dtype == bool, column
        else:
            assert pd.api.types.is_string_dtype(series), column
        for got, row in zip(series.tolist(), rows):
            want = row[column]
            if isinstance(want, float) and math.isnan(want):
                assert math.isnan(got), column
            else:
                assert got == want, column
    assert ConvProblem.from_dict(frame.iloc[-1]) == P2


def test_write_part_rejects_rows_of_an_unknown_environment(tmp_path: Path) -> None:
    rows = [*sample_rows(), make_row(P1, "gemm:fc", env_id="env-zzz")]
    with pytest.raises(RecordsError, match="unknown environments: env-zzz"):
        write_part(tmp_path / "part-a.parquet", rows, [ENV])
    assert not list(tmp_path.iterdir())


def test_write_part_rejects_rows_missing_a_column(tmp_path: Path) -> None:
    rows = sample_rows()
    for row in rows:
        del row["max_rel_error"]
    with pytest.raises(RecordsError, match="records lack columns: max_rel_error"):
        write_part(tmp_path / "part-a.parquet", rows, [ENV])


def test_read_part_rejects_rows_of_an_environment_not_in_the_file(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    _rewrite(path, pq.read_table(path), envs=(ENV_B,))
    message = f"{path}: rows refer to environments not in the file: env-a"
    with pytest.raises(RecordsError, match=f"^{re.escape(message)}$"):
        read_part(path)


def test_read_part_rejects_another_schema_version(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    _rewrite(path, pq.read_table(path), version=str(SCHEMA_VERSION + 1))
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: schema version {SCHEMA_VERSION + 1}, "):
        read_part(path)


def test_read_part_rejects_a_parquet_file_without_schema_version(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    _rewrite(path, pq.read_table(path), version=None)
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: no algosel schema version"):
        read_part(path)


def test_read_part_rejects_a_missing_column(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    table = pq.read_table(path)
    _rewrite(path, table.drop_columns(["repeats"]))
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: missing columns repeats$"):
        read_part(path)


def test_read_part_rejects_a_column_of_the_wrong_type(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    table = pq.read_table(path)
    i = table.schema.get_field_index("time_ms_median")
    _rewrite(path, table.set_column(i, "time_ms_median", table.column(i).cast(pa.float32())))
    message = f"{path}: column time_ms_median has type float, expected double"
    with pytest.raises(RecordsError, match=f"^{re.escape(message)}$"):
        read_part(path)


def test_read_part_rejects_a_truncated_file(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: not a readable Parquet records file"):
        read_part(path)
    with pytest.raises(RecordsError, match=re.escape(str(path))):
        load_records(tmp_path)


def test_read_part_rejects_a_file_cut_just_before_its_footer(tmp_path: Path) -> None:
    path = write_part(tmp_path / "part-a.parquet", sample_rows(), [ENV])
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RecordsError, match=re.escape(str(path))):
        read_part(path)


def test_read_part_rejects_a_non_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "part-x.parquet"
    path.write_text("n,c,k\n1,2,3\n")
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: not a readable Parquet records file"):
        read_part(path)


def test_read_part_of_a_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "part-nothing.parquet"
    with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}: no such records file$"):
        read_part(path)


def test_records_error_is_a_value_error() -> None:
    assert issubclass(RecordsError, ValueError)


# ----------------------------------------------------------------------------------------------- datasets
def test_part_paths_lists_parts_only_in_sorted_order(tmp_path: Path) -> None:
    for name in ("part-b.parquet", "part-a.parquet", "journal-0of1.jsonl", "other.parquet"):
        (tmp_path / name).write_text("")
    assert [p.name for p in part_paths(tmp_path)] == ["part-a.parquet", "part-b.parquet"]
    assert part_paths(tmp_path / "other.parquet") == [tmp_path / "other.parquet"]
    with pytest.raises(RecordsError, match="no such dataset directory"):
        part_paths(tmp_path / "missing")


def test_load_records_concatenates_parts_and_environments(tmp_path: Path) -> None:
    write_part(tmp_path / "d1" / "part-1.parquet", sample_rows()[:2], [ENV])
    write_part(tmp_path / "d2" / "part-1.parquet", [make_row(P2, "gemm:fc", env_id="env-b")], [ENV_B])
    frame, envs = load_records(tmp_path / "d1", tmp_path / "d2" / "part-1.parquet")
    assert set(envs) == {"env-a", "env-b"}
    assert sorted(frame["candidate_id"]) == ["cudnn:e7", "gemm:fc", "gemm:fc"]


def test_load_records_keeps_the_newest_measurement_of_a_duplicate(tmp_path: Path) -> None:
    newer = make_row(P1, "gemm:fc", 2.0, measured_at="2026-03-01T00:00:00+00:00")
    older = make_row(P1, "gemm:fc", 1.0, measured_at="2026-02-01T00:00:00+00:00")
    other_env = make_row(P1, "gemm:fc", 3.0, env_id="env-b", measured_at="2026-01-01T00:00:00+00:00")
    # The newer row is in the part that sorts (and is read) first.
    write_part(tmp_path / "part-a.parquet", [newer], [ENV])
    write_part(tmp_path / "part-b.parquet", [older, other_env], [ENV, ENV_B])
    frame, _ = load_records(tmp_path)
    assert len(frame) == 2
    by_env = frame.set_index("env_id")["time_ms_median"].to_dict()
    assert by_env == {"env-a": 2.0, "env-b": 3.0}


def test_load_records_of_an_empty_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(RecordsError, match=f"no records under {re.escape(str(tmp_path))}"):
        load_records(tmp_path)


def test_load_records_of_a_missing_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(RecordsError, match=re.escape(str(tmp_path / "nope"))):
        load_records(tmp_path / "nope")


# ------------------------------------------------------------------------------------------------ journal
def test_journal_append_and_read(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j" / "journal-0of1.jsonl")
    rows = sample_rows()
    journal.append(P1.case_key, rows[:3], ENV)
    journal.append(P2.case_key, rows[3:], ENV)
    got, envs, warnings = journal.read()
    assert warnings == []
    assert envs == {"env-a": ENV}
    assert [r["candidate_id"] for r in got] == [r["candidate_id"] for r in rows]
    assert math.isnan(got[3]["time_ms_median"]) and got[0]["time_ms_median"] == 0.25
    lines = journal.path.read_text().splitlines()
    assert [json.loads(line)["case_key"] for line in lines] == [P1.case_key, P2.case_key]


def test_journal_read_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert Journal(tmp_path / "none.jsonl").read() == ([], {}, [])


def test_journal_skips_a_truncated_last_line_with_a_warning(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal-0of1.jsonl")
    rows = sample_rows()
    journal.append(P1.case_key, rows[:3], ENV)
    journal.append(P2.case_key, rows[3:], ENV)
    text = journal.path.read_text()
    journal.path.write_text(text[: len(text) - 40])  # killed in the middle of writing the second case
    got, _, warnings = journal.read()
    assert [r["problem_key"] for r in got] == [P1.key] * 3
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{journal.path}:2: skipped a damaged journal line")


def test_journal_skips_a_line_without_rows(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal-0of1.jsonl")
    journal.path.write_text('{"case_key": "x"}\n\n')
    journal.append(P1.case_key, sample_rows()[:1], ENV)
    got, _, warnings = journal.read()
    assert len(got) == 1 and len(warnings) == 1 and f"{journal.path}:1:" in warnings[0]


def test_journal_compact_writes_a_part_and_deletes_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal-0of1.jsonl")
    rows = sample_rows()
    journal.append(P1.case_key, rows[:3], ENV)
    journal.append(P2.case_key, rows[3:], ENV)
    part = journal.compact(tmp_path / "out", "20260101T000000-0of1")
    assert part == tmp_path / "out" / "part-20260101T000000-0of1.parquet"
    assert not journal.path.exists()
    frame, envs = read_part(part)
    assert envs == {"env-a": ENV}
    assert frame["candidate_id"].tolist() == [r["candidate_id"] for r in rows]
    assert frame["time_ms_median"].tolist()[:3] == [0.25, 0.5, 0.75]


def test_journal_compact_never_replaces_an_earlier_part(tmp_path: Path) -> None:
    # Two runs of a shard within one second compact under the same name; both parts must survive.
    rows = sample_rows()
    first = Journal(tmp_path / "journal-0of1.jsonl")
    first.append(P1.case_key, rows[:3], ENV)
    part1 = first.compact(tmp_path, "20260101T000000-0of1")
    second = Journal(tmp_path / "journal-0of1.jsonl")
    second.append(P2.case_key, rows[3:], ENV)
    part2 = second.compact(tmp_path, "20260101T000000-0of1")
    assert part1 != part2 and part1.exists() and part2.exists()
    assert part2.name.startswith("part-") and part2.suffix == ".parquet"
    frame, _ = load_records(tmp_path)
    assert len(frame) == len(rows)


def test_journal_compact_of_an_empty_journal_writes_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal-0of1.jsonl")
    journal.path.write_text("")
    assert journal.compact(tmp_path, "x") is None
    assert not journal.path.exists()
    assert not list(tmp_path.glob("part-*"))
