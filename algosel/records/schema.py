"""The record schema: one :class:`Record` per (problem, candidate) measurement, the one definition of its columns.

The Parquet schema (:data:`SCHEMA`), the column list (:data:`COLUMNS`), the candidate columns the selector reads
(:data:`CANDIDATE_COLUMNS`) and the sweeper's rows all derive from the dataclass below.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from algosel.problem import ConvProblem
from algosel.spaces.base import Candidate

#: Bump when a column is added, removed or changes meaning.
SCHEMA_VERSION = 1


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Record:
    """One measured (problem, candidate): what was run, how it went, how long it took, where."""

    # the problem (ConvProblem's fields, in order)
    n: int
    c: int
    k: int
    h: int
    w: int
    r: int
    s: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    groups: int
    dtype: str
    layout: str
    direction: str
    problem_key: str
    case_key: str
    source: str  # "grid", "suite:<network>", "layers:<file>" or "log"
    # the candidate (Candidate's fields)
    candidate_id: str
    space: str
    engine_id: int
    knobs: str
    rank_a: int
    rank_b: int
    rank_fallback: int
    notes: str  # comma-separated
    # the outcome
    status: str = "ok"  # one of algosel.spaces.STATUSES
    reason: str = ""
    time_ms_median: float = math.nan
    time_ms_p25: float = math.nan
    time_ms_p75: float = math.nan
    time_ms_min: float = math.nan
    repeats: int = 0
    starved: bool = False
    host_overhead_us: float = math.nan
    workspace_bytes: int = -1  # -1: unknown (not built)
    max_rel_error: float = math.nan
    env_id: str = ""
    measured_at: str = dataclasses.field(default_factory=_now)  # ISO 8601, UTC

    @classmethod
    def of(cls, problem: ConvProblem, source: str, candidate: Candidate, env_id: str, **outcome: Any) -> Record:
        """The record of ``candidate`` on ``problem``; ``outcome`` sets the status, times and the like."""
        return cls(
            **problem.to_dict(),
            problem_key=problem.key,
            case_key=problem.case_key,
            source=source,
            candidate_id=candidate.candidate_id,
            space=candidate.space,
            engine_id=candidate.engine_id,
            knobs=candidate.knobs,
            rank_a=candidate.rank_a,
            rank_b=candidate.rank_b,
            rank_fallback=candidate.rank_fallback,
            notes=",".join(candidate.notes),
            env_id=env_id,
            **outcome,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_ARROW_TYPES = {int: pa.int64(), str: pa.string(), float: pa.float64(), bool: pa.bool_()}
_FIELDS = dataclasses.fields(Record)
_PY_TYPES = {"int": int, "str": str, "float": float, "bool": bool}
#: The Parquet schema of a records part.
SCHEMA = pa.schema([pa.field(f.name, _ARROW_TYPES[_PY_TYPES[str(f.type)]]) for f in _FIELDS])
#: Every column, in order.
COLUMNS: tuple[str, ...] = tuple(f.name for f in _FIELDS)
#: The columns that describe a candidate (what the selector's candidate features read).
CANDIDATE_COLUMNS: tuple[str, ...] = (
    "candidate_id",
    "space",
    "engine_id",
    "knobs",
    "rank_a",
    "rank_b",
    "rank_fallback",
    "notes",
)
