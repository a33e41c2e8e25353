"""Features of (problem, candidate, hardware) rows for the ranker, with a versioned schema.

One code path builds features for training (from records) and for prediction (from a problem and its
candidates), so the two cannot drift apart. Everything is numeric; categorical columns (dtype, layout, direction,
candidate space, engine) are small non-negative integer codes that LightGBM treats as categories.

The candidate columns come from the candidate's space (:mod:`algosel.spaces`): its registry position
(``space_code``), its ``engine_code`` and ``knob_values``; the rank and note columns are common to every space.

Not a feature: a candidate's workspace size. It is known only once its plan is built, and building every plan
is what a selector exists to avoid; ``predict`` filters by workspace where the records know it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from algosel.problem import DIRECTIONS, DTYPES, LAYOUTS, SHAPE_FIELDS, ConvProblem
from algosel.records.environment import HARDWARE_FIELDS
from algosel.records.schema import CANDIDATE_COLUMNS
from algosel.spaces import get_space, space_code, space_names

#: Bump when the meaning or order of any column changes: a model is only valid for the schema it was trained on.
FEATURE_SCHEMA_VERSION = 1

#: Knob ids (cuDNN's ``CUDNN_KNOB_TYPE_*`` values, for engine configs) that get a column each; absent knobs are NaN.
KNOB_IDS: tuple[int, ...] = tuple(range(30))
#: The engine code of a candidate whose space is not registered in this process.
_UNKNOWN_ENGINE = 1003
BEHAVIOUR_NOTES: tuple[str, ...] = ("runtime_compilation", "supports_cuda_graph_native_api")

PROBLEM_FEATURES: tuple[str, ...] = SHAPE_FIELDS + (
    "c_per_group",
    "k_per_group",
    "out_h",
    "out_w",
    "dtype_code",
    "layout_code",
    "direction_code",
    "log2_flops",
    "log2_bytes",
    "arithmetic_intensity",
    "log2_gemm_m",
    "log2_gemm_n",
    "log2_gemm_k",
    "c_align",
    "k_align",
    "n_align",
    "is_fully_connected",
    "is_pointwise",
    "is_depthwise",
    "log2_npq",
    "log2_hw",
)
CANDIDATE_FEATURES: tuple[str, ...] = (
    ("space_code", "engine_code", "rank_a", "rank_b", "rank_fallback", "in_list_a", "in_list_b")
    + tuple(f"knob_{i}" for i in KNOB_IDS)
    + tuple(f"note_{n}" for n in BEHAVIOUR_NOTES)
)
HARDWARE_FEATURES: tuple[str, ...] = tuple(f"hw_{f}" for f in HARDWARE_FIELDS)
FEATURE_NAMES: tuple[str, ...] = PROBLEM_FEATURES + CANDIDATE_FEATURES + HARDWARE_FEATURES
CATEGORICAL_FEATURES: tuple[str, ...] = ("dtype_code", "layout_code", "direction_code", "space_code", "engine_code")


def _align(value: int) -> int:
    """Largest power of two up to 64 dividing ``value`` (tensor-core kernels want channels aligned to 8..64)."""
    for a in (64, 32, 16, 8, 4, 2):
        if value % a == 0:
            return a
    return 1


def problem_vector(p: ConvProblem) -> np.ndarray:
    """The :data:`PROBLEM_FEATURES` of one problem."""
    m, n_, k_ = p.gemm_mnk()
    return np.array(
        [
            p.n,
            p.c,
            p.k,
            p.h,
            p.w,
            p.r,
            p.s,
            p.pad_h,
            p.pad_w,
            p.stride_h,
            p.stride_w,
            p.dilation_h,
            p.dilation_w,
            p.groups,
            p.c // p.groups,
            p.k // p.groups,
            p.out_h,
            p.out_w,
            DTYPES.index(p.dtype),
            LAYOUTS.index(p.layout),
            DIRECTIONS.index(p.direction),
            math.log2(p.flops),
            math.log2(p.bytes_moved),
            p.arithmetic_intensity,
            math.log2(m),
            math.log2(n_),
            math.log2(k_),
            _align(p.c // p.groups),
            _align(p.k // p.groups),
            _align(p.n),
            p.is_fully_connected,
            p.is_pointwise,
            p.is_depthwise,
            math.log2(p.n * p.out_h * p.out_w),
            math.log2(p.h * p.w),
        ],
        dtype=np.float64,
    )


@functools.lru_cache(maxsize=16384)
def _space_values(space: str, engine_id: int, knobs: str, name: str) -> tuple[float, ...]:
    """space_code, engine_code and the knob columns of a candidate, as its space defines them."""
    if space not in space_names():
        return (float(space_code(space)), float(_UNKNOWN_ENGINE)) + (math.nan,) * len(KNOB_IDS)
    sp = get_space(space)
    values = sp.knob_values(knobs)
    return (float(space_code(space)), float(sp.engine_code(engine_id, knobs, name))) + tuple(
        float(values[i]) if i in values else math.nan for i in KNOB_IDS
    )


@functools.lru_cache(maxsize=1024)
def _note_flags(notes: str) -> tuple[float, ...]:
    present = set(notes.split(","))
    return tuple(float(n in present) for n in BEHAVIOUR_NOTES)


def _candidate_values(cand: Mapping[str, Any]) -> tuple[float, ...]:
    space = cand["space"]
    name = cand["candidate_id"].partition(":")[2]
    code, engine, *knobs = _space_values(space, int(cand["engine_id"]), cand.get("knobs") or "", name)
    ra, rb, rf = cand["rank_a"], cand["rank_b"], cand["rank_fallback"]
    return (
        (code, engine,
         float(ra) if ra >= 0 else math.nan, float(rb) if rb >= 0 else math.nan, float(rf) if rf >= 0 else math.nan,
         float(ra >= 0), float(rb >= 0))
        + tuple(knobs)
        + _note_flags(cand.get("notes") or "")
    )  # fmt: skip


def candidate_vector(cand: Mapping[str, Any]) -> np.ndarray:
    """The :data:`CANDIDATE_FEATURES` of one candidate (a record row or a mapping with the same keys:
    candidate_id, space, engine_id, knobs, rank_a, rank_b, rank_fallback, notes)."""
    return np.array(_candidate_values(cand), dtype=np.float64)


def candidate_matrix(cands: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """:func:`candidate_vector` of many candidates, as one array (one allocation: the prediction path)."""
    return np.array([_candidate_values(c) for c in cands], dtype=np.float64).reshape(len(cands), -1)


def hardware_vector(env: Mapping[str, Any]) -> np.ndarray:
    """The :data:`HARDWARE_FEATURES` of an environment record (NaN where it lacks a field)."""
    return np.array([float(env.get(f, math.nan) or math.nan) for f in HARDWARE_FIELDS], dtype=np.float64)


def feature_matrix(problem: ConvProblem, candidates: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> np.ndarray:
    """Rows of :data:`FEATURE_NAMES` for one problem and its candidates (the prediction path)."""
    pv, hv = problem_vector(problem), hardware_vector(env)
    cm = candidate_matrix(candidates)
    return np.hstack([np.tile(pv, (len(candidates), 1)), cm, np.tile(hv, (len(candidates), 1))])


def frame_features(frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """Rows of :data:`FEATURE_NAMES` for every record of ``frame`` (the training path; same functions)."""
    problems = {key: problem_vector(ConvProblem.from_key(key)) for key in frame["problem_key"].unique()}
    hardware = {e: hardware_vector(envs[e]) for e in frame["env_id"].unique()}
    cols = list(CANDIDATE_COLUMNS)
    cand_cache: dict[tuple, np.ndarray] = {}
    rows = []
    for key, env, *cand in frame[["problem_key", "env_id", *cols]].itertuples(index=False, name=None):
        ck = tuple(cand)
        cv = cand_cache.get(ck)
        if cv is None:
            cv = cand_cache[ck] = candidate_vector(dict(zip(cols, cand)))
        rows.append(np.concatenate([problems[key], cv, hardware[env]]))
    return np.vstack(rows) if rows else np.empty((0, len(FEATURE_NAMES)))
