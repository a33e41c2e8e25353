"""The catalogue: the recorded candidates of every problem of one environment, queried by problem.

A selector ships with the catalogue of its training records (``catalogue.parquet``): for a recorded problem it
gives the candidate list cuDNN offered (with heuristic ranks, notes, workspace, status, median time and host time
per call); for a
problem never recorded, the list of the *nearest* recorded problem of the same kind (direction, dtype, layout,
fully-connected / pointwise / depthwise), nearest in log2 of the shape fields. How near that problem is
(:meth:`Catalogue.distance`) says how far a model's predictions for the problem stretch beyond its records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from algosel.problem import ConvProblem
from algosel.records.schema import CANDIDATE_COLUMNS

#: The record columns a catalogue keeps (``host_overhead_us``: catalogues written before it lack it).
CATALOGUE_COLUMNS: tuple[str, ...] = ("time_ms_median", "problem_key", *CANDIDATE_COLUMNS, "workspace_bytes", "status",
                                      "host_overhead_us")  # fmt: skip
#: Log-scaled fields that define "nearest" between problems of one kind.
_NEAREST_FIELDS = ("n", "c", "k", "h", "w", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")
#: The sizes whose recorded range :meth:`Catalogue.extent` gives (``flops`` is the problem's, not a field).
EXTENT_FIELDS = ("n", "c", "k", "h", "w", "r", "s", "groups", "flops")


def problem_kind(p: ConvProblem) -> tuple:
    """Problems of one kind share their candidate lists closely enough for a nearest-problem lookup."""
    return (p.direction, p.dtype, p.layout, p.is_fully_connected, p.is_pointwise and not p.is_fully_connected,
            p.is_depthwise)  # fmt: skip


def _position(p: ConvProblem) -> np.ndarray:
    return np.log2(np.array([getattr(p, f) for f in _NEAREST_FIELDS], dtype=np.float64))


class Catalogue:
    """Recorded candidate rows by problem (see the module docstring)."""

    def __init__(self, frame: pd.DataFrame, environment: Mapping[str, Any] | None = None):
        self.environment = dict(environment or {})
        # a model's catalogue is written sorted (learn.artifact): sorting it again, a take of every column, was a
        # third of its load
        keys_in_order = frame["problem_key"].is_monotonic_increasing
        cat = (frame if keys_in_order else frame.sort_values("problem_key", kind="stable")).reset_index(drop=True)
        cat["notes"] = cat["notes"].fillna("")
        cat["knobs"] = cat["knobs"].fillna("")
        self.frame = cat
        # Rows of one problem are turned into dicts on first use: converting all of them costs seconds at load.
        self._columns = list(cat.columns)
        self._arrays = [cat[c].to_numpy(dtype=object) for c in self._columns]
        # Sorted by key, so a problem's rows are a run: its start is where the key changes (np.unique would sort the
        # strings again, a third of the load of a large catalogue).
        all_keys = self._arrays[self._columns.index("problem_key")]
        starts = (
            np.flatnonzero(np.concatenate(([True], all_keys[1:] != all_keys[:-1]))) if len(cat) else np.array([], int)
        )
        keys = all_keys[starts]
        ends = np.append(starts[1:], len(cat))
        self._spans = {k: (int(a), int(b)) for k, a, b in zip(keys, starts, ends)}
        self._rows: dict[str, list[dict[str, Any]]] = {}
        buckets: dict[tuple, list[tuple[np.ndarray, str]]] = {}
        sizes = []
        for key in self._spans:
            p = ConvProblem.from_key(key)
            buckets.setdefault(problem_kind(p), []).append((_position(p), key))
            sizes.append([getattr(p, f) for f in EXTENT_FIELDS])
        table = np.array(sizes, dtype=np.float64).reshape(-1, len(EXTENT_FIELDS))
        lows, highs = (table.min(axis=0), table.max(axis=0)) if len(table) else ((), ())
        self._extent = {f: (float(lo), float(hi)) for f, lo, hi in zip(EXTENT_FIELDS, lows, highs)}
        #: The dtypes and layouts of the recorded problems.
        self.dtypes = frozenset(kind[1] for kind in buckets)
        self.layouts = frozenset(kind[2] for kind in buckets)
        self._nearest = {
            kind: (np.vstack([v for v, _ in items]), [k for _, k in items]) for kind, items in buckets.items()
        }

    @classmethod
    def from_records(cls, frame: pd.DataFrame, environment: Mapping[str, Any] | None = None) -> Catalogue:
        return cls(frame[[c for c in CATALOGUE_COLUMNS if c in frame]].copy(), environment)

    def extent(self) -> dict[str, tuple[float, float]]:
        """The smallest and largest recorded value of each of :data:`EXTENT_FIELDS` over every recorded problem
        (empty for an empty catalogue)."""
        return dict(self._extent)

    def __len__(self) -> int:
        return len(self._spans)

    def is_recorded(self, problem: ConvProblem) -> bool:
        return problem.key in self._spans

    def rows(self, key: str) -> list[dict[str, Any]] | None:
        """The recorded candidate rows of a problem key (``None``: not recorded)."""
        rows = self._rows.get(key)
        if rows is None:
            span = self._spans.get(key)
            if span is None:
                return None
            a, b = span
            rows = [dict(zip(self._columns, values)) for values in zip(*(arr[a:b] for arr in self._arrays))]
            self._rows[key] = rows
        return rows

    def nearest(self, problem: ConvProblem) -> str | None:
        """The key of the nearest recorded problem of the same kind (``None``: nothing of its kind recorded)."""
        bucket = self._nearest.get(problem_kind(problem))
        if bucket is None:
            return None
        positions, keys = bucket
        return keys[int(np.argmin(((positions - _position(problem)) ** 2).sum(axis=1)))]

    def distance(self, problem: ConvProblem) -> float:
        """How far ``problem`` lies from the records: the least sum over the shape fields of |log2 ratio| to a
        recorded problem of its kind (0: recorded; 1: one field twice or half a recorded problem's; ``inf``:
        nothing of its kind recorded)."""
        bucket = self._nearest.get(problem_kind(problem))
        if bucket is None:
            return math.inf
        return float(np.abs(bucket[0] - _position(problem)).sum(axis=1).min())

    def host_us(self, key: str, candidate_ids) -> dict[str, float]:
        """The recorded host time per call (``host_overhead_us``) of each of ``candidate_ids`` that has one on the
        problem ``key`` (empty where the catalogue predates the column)."""
        wanted = set(candidate_ids)
        out = {}
        for row in self.rows(key) or ():
            t = row.get("host_overhead_us")
            if row["candidate_id"] in wanted and t is not None and not (isinstance(t, float) and math.isnan(t)):
                out[row["candidate_id"]] = float(t)
        return out

    def time_ms(self, key: str, candidate_id: str) -> float | None:
        """The recorded median time of a candidate on a problem; ``None`` when not timed there."""
        for row in self.rows(key) or ():
            if row["candidate_id"] == candidate_id:
                t = row.get("time_ms_median")
                return None if t is None or (isinstance(t, float) and math.isnan(t)) else float(t)
        return None


def build_catalogue(frame: pd.DataFrame) -> pd.DataFrame:
    """The catalogue of a model trained on ``frame``."""
    return Catalogue.from_records(frame).frame


def blocked_engines(frame: pd.DataFrame) -> list[list[Any]]:
    """(engine id, direction, dtype) of cuDNN engines that ever gave a wrong result: never chosen there."""
    bad = frame[(frame["status"] == "wrong_result") & (frame["space"] == "cudnn")]
    return sorted({(int(e), d, t) for e, d, t in bad[["engine_id", "direction", "dtype"]].itertuples(index=False)})
