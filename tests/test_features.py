"""Features of known problems and candidates, exactly; and one code path for training and prediction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algosel.learn.features import (
    CANDIDATE_FEATURES,
    FEATURE_NAMES,
    KNOB_IDS,
    PROBLEM_FEATURES,
    candidate_vector,
    feature_matrix,
    frame_features,
    hardware_vector,
    problem_vector,
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
    [("gemm:fc", "gemm", 1000, 1), ("gemm:pointwise", "gemm", 1001, 1), ("pytorch:default", "pytorch", 1002, 2)],
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
