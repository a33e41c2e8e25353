"""Features of known problems and candidates, exactly; and one code path for training and prediction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algosel.candidates import DEFAULT_ID
from algosel.learn.features import (
    CANDIDATE_FEATURES,
    CATEGORICAL_FEATURES,
    FEATURE_NAMES,
    KNOB_IDS,
    LIST_FEATURES,
    PROBLEM_FEATURES,
    TILE_FEATURES,
    candidate_vector,
    feature_matrix,
    frame_features,
    hardware_vector,
    list_context,
    problem_vector,
    tile_vector,
)
from algosel.problem import ConvProblem
from algosel.spaces.cudnn_graph import parse_knobs

P = ConvProblem(
    n=32,
    c=64,
    k=128,
    h=56,
    w=56,
    r=3,
    s=3,
    pad_h=1,
    pad_w=1,
    stride_h=2,
    stride_w=2,
    dtype="float16",
    layout="nhwc",
    direction="bwd_filter",
)


def named(vector, names):
    return dict(zip(names, vector.tolist()))


def test_problem_features_of_a_known_problem():
    f = named(problem_vector(P), PROBLEM_FEATURES)
    assert (f["out_h"], f["out_w"]) == (28, 28)
    assert f["log2_gemm_m"] == 7.0  # bwd_filter: M = K = 128
    assert f["log2_gemm_n"] == pytest.approx(math.log2(64 * 9))  # N = C*R*S
    assert f["log2_gemm_k"] == pytest.approx(math.log2(32 * 28 * 28))  # K = N*P*Q
    assert f["log2_flops"] == pytest.approx(math.log2(2 * 32 * 128 * 28 * 28 * 64 * 9))
    assert f["log2_bytes"] == pytest.approx(math.log2(2 * (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 28 * 28)))
    assert (f["c_align"], f["k_align"], f["n_align"]) == (64, 64, 32)
    assert (f["dtype_code"], f["layout_code"], f["direction_code"]) == (2, 1, 2)
    assert (f["is_fully_connected"], f["is_pointwise"], f["is_depthwise"]) == (0, 0, 0)


def test_alignment_and_mode_flags():
    fc = named(problem_vector(ConvProblem(n=1600, c=255, k=4096, h=6, w=6, r=6, s=6)), PROBLEM_FEATURES)
    assert fc["is_fully_connected"] == 1 and fc["c_align"] == 1 and fc["n_align"] == 64
    dw = named(problem_vector(ConvProblem(n=8, c=96, k=96, h=14, w=14, r=3, s=3, groups=96)), PROBLEM_FEATURES)
    assert dw["is_depthwise"] == 1 and dw["c_per_group"] == 1


def test_candidate_features_of_an_engine_config():
    cand = {
        "candidate_id": "cudnn:eng67_k2=5_k13=0",
        "space": "cudnn",
        "engine_id": 67,
        "knobs": "k2=5_k13=0",
        "rank_a": 0,
        "rank_b": -1,
        "rank_fallback": 3,
        "notes": "runtime_compilation",
    }
    f = named(candidate_vector(cand), CANDIDATE_FEATURES)
    assert (f["space_code"], f["engine_code"], f["rank_a"], f["rank_fallback"]) == (0, 67, 0, 3)
    assert math.isnan(f["rank_b"]) and (f["in_list_a"], f["in_list_b"]) == (1, 0)
    assert (f["knob_2"], f["knob_13"]) == (5, 0)
    assert all(math.isnan(f[f"knob_{i}"]) for i in KNOB_IDS if i not in (2, 13))
    assert (f["note_runtime_compilation"], f["note_supports_cuda_graph_native_api"]) == (1, 0)


@pytest.mark.parametrize(
    ("cid", "space", "code", "space_code"),
    [("gemm:fc", "gemm", 1000, 1), ("gemm:pointwise", "gemm", 1001, 1), (DEFAULT_ID, "pytorch", 1002, 2)],
)
def test_non_cudnn_candidates_get_their_own_engine_codes(cid, space, code, space_code):
    cand = {
        "candidate_id": cid,
        "space": space,
        "engine_id": -1,
        "knobs": "",
        "rank_a": -1,
        "rank_b": -1,
        "rank_fallback": -1,
        "notes": "",
    }
    f = named(candidate_vector(cand), CANDIDATE_FEATURES)
    assert (f["engine_code"], f["space_code"]) == (code, space_code)


def test_parse_knobs():
    assert parse_knobs("k2=5_k13=0_k18=-1") == {2: 5, 13: 0, 18: -1}
    assert parse_knobs("") == {}


def test_hardware_vector_missing_fields_are_nan():
    hv = hardware_vector({"sm_count": 132})
    assert hv[0] == 132 and np.isnan(hv[1:]).all()


def test_training_and_prediction_paths_build_identical_rows(slice_records):
    frame, envs = slice_records
    key = frame["problem_key"].iloc[0]
    rows = frame[frame["problem_key"] == key]
    env = envs[rows["env_id"].iloc[0]]
    via_frame = frame_features(rows, envs)
    via_problem = feature_matrix(ConvProblem.from_key(key), rows.to_dict("records"), env)
    assert via_frame.shape == (len(rows), len(FEATURE_NAMES))
    np.testing.assert_array_equal(via_frame, via_problem)


def _cand(cid, engine, ra=-1, rb=-1, rf=-1, space="cudnn", status="ok"):
    return {"candidate_id": cid, "space": space, "engine_id": engine, "knobs": "", "rank_a": ra, "rank_b": rb,
            "rank_fallback": rf, "notes": "", "status": status}  # fmt: skip


LIST = [
    _cand("cudnn:eng7_k2=1", 7, ra=1, rb=0),
    _cand("cudnn:eng65_k2=1", 65, ra=0, rb=2, status="build_failed"),  # A's first, whatever its status
    _cand("cudnn:eng65_k2=2", 65, ra=2, rb=1, rf=0),
    _cand("cudnn:eng0", 0, rf=1),
    _cand(DEFAULT_ID, -1, space="pytorch"),
]


def test_list_context_of_a_known_list():
    assert list_context(LIST) == (65.0, 7.0, 3.0, 3.0, 2.0)
    assert all(math.isnan(v) for v in list_context([LIST[3]])[:2])  # no A or B list: no first engines


def test_list_columns_describe_the_whole_list_even_for_a_shortlist():
    env = {"sm_count": 132}
    whole = feature_matrix(P, LIST, env)
    names = list(FEATURE_NAMES)
    col = {n: names.index(n) for n in LIST_FEATURES}
    assert whole[:, col["list_engine_a0"]].tolist() == [65.0] * 5
    assert whole[:, col["list_len_fallback"]].tolist() == [2.0] * 5
    assert whole[:, col["shares_engine_a0"]].tolist() == [0, 1, 1, 0, 0]
    assert whole[:, col["shares_engine_b0"]].tolist() == [1, 0, 0, 0, 0]
    # Scoring two of them: the same rows as in the whole list.
    part = feature_matrix(P, [LIST[2], LIST[4]], env, list_rows=LIST)
    np.testing.assert_array_equal(part, whole[[2, 4]])
    alone = feature_matrix(P, [LIST[2], LIST[4]], env)
    assert alone[0, col["list_len_a"]] == 1.0  # without list_rows the two are the list


def test_tile_features_of_a_known_problem():
    fwd = ConvProblem(n=2, c=64, k=200, h=16, w=16, r=1, s=1)  # M = 2*16*16 = 512, N = 200, K = 64
    f = named(tile_vector(fwd, 132), TILE_FEATURES)
    assert f["log2_tiles_64"] == math.log2(8 * 4) and f["waves_64"] == 1
    assert f["wave_occupancy_64"] == pytest.approx(32 / 132)
    assert f["tile_fill_64"] == pytest.approx(512 * 200 / (512 * 256))
    assert f["log2_tiles_256"] == 1.0 and f["tile_fill_256"] == pytest.approx(512 * 200 / (512 * 256))
    assert f["k_fill"] == 1.0
    many = named(tile_vector(ConvProblem(n=64, c=64, k=512, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1), 132),
                 TILE_FEATURES)  # fmt: skip
    tiles = (64 * 56 * 56 // 128) * (512 // 128)
    assert many["waves_128"] == -(-tiles // 132) and many["wave_occupancy_128"] == pytest.approx(
        tiles / (many["waves_128"] * 132)
    )
    unknown = named(tile_vector(fwd, math.nan), TILE_FEATURES)
    assert math.isnan(unknown["waves_64"]) and unknown["log2_tiles_64"] == 5.0


def test_list_engines_are_categories():
    assert {"list_engine_a0", "list_engine_b0", "engine_code"} <= set(CATEGORICAL_FEATURES)
    assert set(CATEGORICAL_FEATURES) <= set(FEATURE_NAMES)


def test_frame_features_keep_the_frame_order(slice_records):
    frame, envs = slice_records
    keys = frame["problem_key"].unique()[:2]
    rows = frame[frame["problem_key"].isin(keys)]
    shuffled = rows.sample(frac=1.0, random_state=0)
    np.testing.assert_array_equal(
        frame_features(shuffled, envs), frame_features(rows, envs)[[rows.index.get_loc(i) for i in shuffled.index]]
    )
    assert frame_features(rows.iloc[:0], envs).shape == (0, len(FEATURE_NAMES))
