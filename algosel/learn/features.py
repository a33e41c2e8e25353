"""Features of (problem, candidate, hardware) rows for the ranker, with a versioned schema.

One code path builds features for training (from records) and for prediction (from a problem and its
candidates), so the two cannot drift apart. Everything is numeric; categorical columns (dtype, layout, direction,
candidate space, engine) are small non-negative integer codes that LightGBM treats as categories.

The candidate columns come from the candidate's space (:mod:`algosel.spaces`): its registry position
(``space_code``), its ``engine_code`` and ``knob_values``; the rank and note columns are common to every space.
The list columns describe the candidate list the candidate came from (cuDNN's heuristic lists, as the records
or a live enumeration give them): the engines of mode A's and mode B's first configs, the lengths of the three
lists, and whether the candidate shares those engines. They are computed from the list alone, so a live list or
the list of the nearest recorded problem gets them exactly as the training records did. The tile columns
describe how the implicit GEMM of the problem's direction falls into tiles and waves on the GPU's SMs.

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
FEATURE_SCHEMA_VERSION = 2

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
#: Columns of the candidate's list (:func:`list_context`, :func:`list_columns`).
LIST_FEATURES: tuple[str, ...] = (
    "list_engine_a0",
    "list_engine_b0",
    "list_len_a",
    "list_len_b",
    "list_len_fallback",
    "shares_engine_a0",
    "shares_engine_b0",
)
#: Square output tiles (M x N) of the implicit GEMM that get tile and wave columns (:func:`tile_vector`).
TILE_SIZES: tuple[int, ...] = (64, 128, 256)
#: The K step whose padding :func:`tile_vector` measures.
K_STEP = 32
TILE_FEATURES: tuple[str, ...] = tuple(
    f"{name}_{t}" for t in TILE_SIZES for name in ("log2_tiles", "waves", "wave_occupancy", "tile_fill")
) + ("k_fill",)
HARDWARE_FEATURES: tuple[str, ...] = tuple(f"hw_{f}" for f in HARDWARE_FIELDS)
FEATURE_NAMES: tuple[str, ...] = (
    PROBLEM_FEATURES + CANDIDATE_FEATURES + LIST_FEATURES + TILE_FEATURES + HARDWARE_FEATURES
)
CATEGORICAL_FEATURES: tuple[str, ...] = (
    "dtype_code",
    "layout_code",
    "direction_code",
    "space_code",
    "engine_code",
    "list_engine_a0",
    "list_engine_b0",
)


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


def list_context(cands: Sequence[Mapping[str, Any]]) -> tuple[float, float, float, float, float]:
    """What a whole candidate list says about cuDNN's heuristics for its problem: the engine code of mode A's
    first config, of mode B's first config (NaN where the list has no such config), and the lengths of the A, B and
    FALLBACK lists. Ranks are read whatever the candidate's status, since a live list has no status yet."""
    engine_a0 = engine_b0 = math.nan
    len_a = len_b = len_fallback = 0
    for c in cands:
        ra, rb = c["rank_a"], c["rank_b"]
        len_a += ra >= 0
        len_b += rb >= 0
        len_fallback += c["rank_fallback"] >= 0
        if ra == 0 or rb == 0:
            engine = _candidate_values(c)[1]
            engine_a0 = engine if ra == 0 else engine_a0
            engine_b0 = engine if rb == 0 else engine_b0
    return engine_a0, engine_b0, float(len_a), float(len_b), float(len_fallback)


def list_columns(engine_codes: np.ndarray, context: Sequence[float]) -> np.ndarray:
    """The :data:`LIST_FEATURES` of candidates with these engine codes in a list of :func:`list_context`
    ``context``: the context itself, and whether each candidate shares the engine of A's and of B's first config."""
    engine_codes = np.asarray(engine_codes, dtype=np.float64)
    n = len(engine_codes)
    out = np.empty((n, len(LIST_FEATURES)), dtype=np.float64)
    out[:, :5] = np.asarray(context, dtype=np.float64)
    out[:, 5] = engine_codes == context[0]
    out[:, 6] = engine_codes == context[1]
    return out


_ENGINE_COLUMN = CANDIDATE_FEATURES.index("engine_code")


def listed_candidate_matrix(
    cands: Sequence[Mapping[str, Any]], list_rows: Sequence[Mapping[str, Any]] | None = None
) -> np.ndarray:
    """:data:`CANDIDATE_FEATURES` + :data:`LIST_FEATURES` of candidates taken from the list ``list_rows`` (default:
    ``cands`` is the whole list). The selector scores a shortlist of a list: its list columns describe the list."""
    cm = candidate_matrix(cands)
    context = list_context(cands if list_rows is None else list_rows)
    return np.hstack([cm, list_columns(cm[:, _ENGINE_COLUMN], context)])


def tile_vector(p: ConvProblem, sm_count: float) -> np.ndarray:
    """The :data:`TILE_FEATURES` of a problem on a GPU of ``sm_count`` SMs (NaN where it is unknown).

    For each square output tile of :data:`TILE_SIZES`: log2 of the number of tiles of the implicit GEMM's M x N
    (:meth:`ConvProblem.gemm_mnk`, over all groups), the waves they take with one tile per SM per wave, the
    occupancy of those waves (tiles / (waves x SMs): a last wave of few tiles leaves SMs idle) and the share of
    the tiles' area inside M x N (the rest is padding); then the share of K inside K padded to :data:`K_STEP`.
    Which tile a kernel uses is not known, so every common size gets its columns and the trees pick.
    """
    m, n, k = p.gemm_mnk()
    out = []
    for t in TILE_SIZES:
        tm, tn = -(-m // t), -(-n // t)
        tiles = tm * tn * p.groups
        if sm_count > 0:
            waves = -(-tiles // int(sm_count))
            occupancy = tiles / (waves * sm_count)
        else:
            waves = occupancy = math.nan
        out += [math.log2(tiles), waves, occupancy, (m * n) / (tm * t * tn * t)]
    out.append(k / (-(-k // K_STEP) * K_STEP))
    return np.array(out, dtype=np.float64)


def hardware_vector(env: Mapping[str, Any]) -> np.ndarray:
    """The :data:`HARDWARE_FEATURES` of an environment record (NaN where it lacks a field)."""
    return np.array([float(env.get(f, math.nan) or math.nan) for f in HARDWARE_FIELDS], dtype=np.float64)


def _sm_count(env: Mapping[str, Any]) -> float:
    return float(env.get("sm_count") or math.nan)


def assemble(problem: ConvProblem, listed: np.ndarray, env: Mapping[str, Any], hardware: np.ndarray | None = None):
    """Rows of :data:`FEATURE_NAMES` from a problem, the :func:`listed_candidate_matrix` of its candidates and the
    environment (``hardware``: its :func:`hardware_vector`, where the caller has it already)."""
    # One allocation, columns filled by broadcasting: this runs on every first prediction.
    out = np.empty((len(listed), len(FEATURE_NAMES)), dtype=np.float64)
    out[:, _PROBLEM_COLS] = problem_vector(problem)
    out[:, _LISTED_COLS] = listed
    out[:, _TILE_COLS] = tile_vector(problem, _sm_count(env))
    out[:, _TILE_COLS.stop :] = hardware_vector(env) if hardware is None else hardware
    return out


_PROBLEM_COLS = slice(0, len(PROBLEM_FEATURES))
_LISTED_COLS = slice(_PROBLEM_COLS.stop, _PROBLEM_COLS.stop + len(CANDIDATE_FEATURES) + len(LIST_FEATURES))
_TILE_COLS = slice(_LISTED_COLS.stop, _LISTED_COLS.stop + len(TILE_FEATURES))


def feature_matrix(
    problem: ConvProblem,
    candidates: Sequence[Mapping[str, Any]],
    env: Mapping[str, Any],
    list_rows: Sequence[Mapping[str, Any]] | None = None,
) -> np.ndarray:
    """Rows of :data:`FEATURE_NAMES` for one problem and its candidates (the prediction path); ``list_rows``: the
    whole candidate list they were taken from (default: ``candidates``)."""
    return assemble(problem, listed_candidate_matrix(candidates, list_rows), env)


def frame_features(frame: pd.DataFrame, envs: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """Rows of :data:`FEATURE_NAMES` for every record of ``frame`` (the training path; same functions). The
    candidate list of a record is every record of its problem and environment in ``frame``."""
    if frame.empty:
        return np.empty((0, len(FEATURE_NAMES)))
    cols = list(CANDIDATE_COLUMNS)
    lists: dict[tuple[str, str], list[dict[str, Any]]] = {}
    order: list[tuple[str, str]] = []
    # Columns as Python lists first: iterating the rows of Arrow-backed columns costs ten times as much.
    for key, env, *cand in zip(*(frame[c].tolist() for c in ("problem_key", "env_id", *cols))):
        group = (key, env)
        order.append(group)
        lists.setdefault(group, []).append(dict(zip(cols, cand)))
    blocks = {
        (key, env): assemble(ConvProblem.from_key(key), listed_candidate_matrix(rows), envs[env])
        for (key, env), rows in lists.items()
    }
    # Each group's block holds its rows in frame order; hand them out in that order.
    taken = dict.fromkeys(blocks, 0)
    out = np.empty((len(frame), len(FEATURE_NAMES)), dtype=np.float64)
    for i, group in enumerate(order):
        out[i] = blocks[group][taken[group]]
        taken[group] += 1
    return out
