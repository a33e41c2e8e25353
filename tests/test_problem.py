"""Tests of algosel.problem: derived sizes, identities and every validation error of ConvProblem."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algosel.problem import DIRECTIONS, DTYPES, LAYOUTS, PROBLEM_FIELDS, ConvProblem, same_padding

# n=2, c=3, k=8, 10x12 input, 3x5 kernel, padding 1x2, stride 2x3, dilation 2x1.
ODD = dict(n=2, c=3, k=8, h=10, w=12, r=3, s=5, pad_h=1, pad_w=2, stride_h=2, stride_w=3, dilation_h=2, dilation_w=1)


# ------------------------------------------------------------------------------------------------ derived
def test_output_size_accounts_for_padding_stride_and_dilation() -> None:
    p = ConvProblem(**ODD)
    # (10 + 2 - 2*2 - 1) // 2 + 1 = 4 and (12 + 4 - 4 - 1) // 3 + 1 = 4
    assert (p.out_h, p.out_w) == (4, 4)
    y = F.conv2d(
        torch.zeros(p.x_shape, device="meta"),
        torch.zeros(p.w_shape, device="meta"),
        stride=(2, 3),
        padding=(1, 2),
        dilation=(2, 1),
    )
    assert tuple(y.shape) == p.y_shape == (2, 8, 4, 4)


def test_output_size_of_unit_stride_same_padding_keeps_the_input_size() -> None:
    p = ConvProblem(
        n=1,
        c=1,
        k=1,
        h=7,
        w=9,
        r=5,
        s=3,
        pad_h=same_padding(5, 2),
        pad_w=same_padding(3, 2),
        dilation_h=2,
        dilation_w=2,
    )
    assert (p.out_h, p.out_w) == (7, 9)


def test_flops_count_two_per_multiply_add() -> None:
    assert ConvProblem(**ODD).flops == 2 * 2 * 8 * 4 * 4 * 3 * 3 * 5 == 23040
    grouped = ConvProblem(n=1, c=4, k=6, h=5, w=5, r=3, s=3, groups=2)  # 3x3 output, C/g = 2
    assert grouped.flops == 2 * 1 * 6 * 3 * 3 * 2 * 3 * 3


def test_operand_bytes_follow_shapes_and_element_size() -> None:
    p = ConvProblem(**ODD)
    assert (p.x_bytes, p.w_bytes, p.y_bytes) == (2 * 3 * 10 * 12 * 4, 8 * 3 * 3 * 5 * 4, 2 * 8 * 4 * 4 * 4)
    assert p.bytes_moved == 2880 + 1440 + 1024
    half = p.replace(dtype="float16")
    assert (half.x_bytes, half.w_bytes, half.y_bytes) == (1440, 720, 512)
    assert p.replace(dtype="float32_strict").x_bytes == 2880
    assert p.arithmetic_intensity == pytest.approx(23040 / 5344)


def test_grouped_weight_shape_holds_channels_per_group() -> None:
    p = ConvProblem(n=1, c=4, k=6, h=5, w=5, r=3, s=3, groups=2)
    assert p.w_shape == (6, 2, 3, 3)
    assert p.w_bytes == 6 * 2 * 3 * 3 * 4


def test_gemm_mnk_of_each_direction() -> None:
    p = ConvProblem(**ODD)
    assert p.gemm_mnk("fwd") == (2 * 4 * 4, 8, 3 * 3 * 5)
    assert p.gemm_mnk("bwd_data") == (2 * 10 * 12, 3, 8 * 3 * 5)
    assert p.gemm_mnk("bwd_filter") == (8, 3 * 3 * 5, 2 * 4 * 4)
    # Without an argument, the problem's own direction.
    assert p.replace(direction="bwd_filter").gemm_mnk() == (8, 45, 32)
    grouped = ConvProblem(n=1, c=4, k=6, h=5, w=5, r=3, s=3, groups=2)
    assert grouped.gemm_mnk("fwd") == (9, 3, 18)
    assert grouped.gemm_mnk("bwd_data") == (25, 2, 27)
    assert grouped.gemm_mnk("bwd_filter") == (3, 18, 9)


def test_gemm_mnk_rejects_an_unknown_direction() -> None:
    with pytest.raises(ValueError, match="direction must be one of .*got 'sideways'"):
        ConvProblem(**ODD).gemm_mnk("sideways")


def test_fully_connected_mode_needs_kernel_covering_unpadded_input() -> None:
    fc = ConvProblem(n=7, c=3, k=5, h=3, w=5, r=3, s=5)
    assert fc.is_fully_connected and (fc.out_h, fc.out_w) == (1, 1)
    assert fc.replace(stride_h=2, stride_w=3).is_fully_connected  # stride is irrelevant with a 1x1 output
    assert not fc.replace(w=6).is_fully_connected
    assert not fc.replace(pad_h=1).is_fully_connected
    assert not ConvProblem(n=1, c=4, k=4, h=3, w=3, r=3, s=3, groups=2).is_fully_connected
    assert not ConvProblem(n=1, c=1, k=1, h=5, w=5, r=3, s=3, dilation_h=2, dilation_w=2).is_fully_connected


def test_pointwise_means_unit_kernel_stride_no_padding_one_group() -> None:
    pw = ConvProblem(n=2, c=5, k=7, h=3, w=4, r=1, s=1)
    assert pw.is_pointwise and not pw.is_fully_connected
    assert not pw.replace(stride_h=2).is_pointwise
    assert not pw.replace(pad_w=1).is_pointwise
    assert not ConvProblem(n=2, c=6, k=6, h=3, w=4, r=1, s=1, groups=3).is_pointwise
    assert not ConvProblem(**ODD).is_pointwise


def test_depthwise_means_one_group_per_input_channel() -> None:
    assert ConvProblem(n=1, c=8, k=8, h=5, w=5, r=3, s=3, groups=8).is_depthwise
    assert ConvProblem(n=1, c=8, k=16, h=5, w=5, r=3, s=3, groups=8).is_depthwise  # depth multiplier 2
    assert not ConvProblem(n=1, c=8, k=8, h=5, w=5, r=3, s=3, groups=4).is_depthwise
    assert not ConvProblem(n=1, c=1, k=1, h=5, w=5, r=3, s=3).is_depthwise  # one channel, one group: plain


# ------------------------------------------------------------------------------------------------ identity
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_key_round_trips_through_from_key(dtype: str, layout: str, direction: str) -> None:
    p = ConvProblem(**ODD, groups=1, dtype=dtype, layout=layout, direction=direction)
    assert ConvProblem.from_key(p.key) == p
    assert p.key == f"{p.case_key}_{direction}" and p.case_key == f"{p.shape_key}_{dtype}_{layout}"


def test_key_spells_every_field() -> None:
    p = ConvProblem(
        n=2,
        c=4,
        k=6,
        h=10,
        w=12,
        r=3,
        s=5,
        pad_h=1,
        pad_w=2,
        stride_h=2,
        stride_w=3,
        dilation_h=2,
        dilation_w=1,
        groups=2,
        dtype="float32_strict",
        layout="nhwc",
        direction="bwd_data",
    )
    assert p.key == "n2_c4_k6_h10_w12_r3_s5_p1x2_u2x3_d2x1_g2_float32_strict_nhwc_bwd_data"


@pytest.mark.parametrize("key", ["", "n1_c1", "n1_c1_k1_h1_w1_r1_s1_p0x0_u1x1_d1x1_g1_float32_nchw_up"])
def test_from_key_rejects_malformed_keys(key: str) -> None:
    with pytest.raises(ValueError, match="not a problem key"):
        ConvProblem.from_key(key)


def test_from_key_still_validates_the_parsed_problem() -> None:
    with pytest.raises(ValueError, match="ConvProblem.n must be positive, got 0"):
        ConvProblem.from_key("n0_c1_k1_h1_w1_r1_s1_p0x0_u1x1_d1x1_g1_float32_nchw_fwd")


def test_dict_round_trip_and_missing_fields() -> None:
    p = ConvProblem(**ODD, layout="nhwc")
    assert tuple(p.to_dict()) == PROBLEM_FIELDS
    assert ConvProblem.from_dict({**p.to_dict(), "extra": 1}) == p
    row = p.to_dict()
    del row["groups"], row["dtype"]
    with pytest.raises(ValueError, match="problem fields missing: groups, dtype"):
        ConvProblem.from_dict(row)


def test_directions_lists_all_three_of_the_same_case() -> None:
    ps = ConvProblem(**ODD).directions()
    assert [p.direction for p in ps] == list(DIRECTIONS)
    assert len({p.case_key for p in ps}) == 1


def test_numpy_integers_are_normalised_to_int() -> None:
    p = ConvProblem(n=np.int64(2), c=np.int32(3), k=8, h=10, w=12, r=3, s=3)
    assert type(p.n) is int and type(p.c) is int
    assert p == ConvProblem(n=2, c=3, k=8, h=10, w=12, r=3, s=3)


# ---------------------------------------------------------------------------------------------- validation
BASE = dict(n=2, c=4, k=4, h=8, w=8, r=3, s=3)
POSITIVE = ("n", "c", "k", "h", "w", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")


@pytest.mark.parametrize("value", [0, -3])
@pytest.mark.parametrize("field", POSITIVE)
def test_non_positive_size_is_rejected_naming_field_and_value(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"^ConvProblem\.{field} must be positive, got {value}$"):
        ConvProblem(**{**BASE, field: value})


@pytest.mark.parametrize("field", ["pad_h", "pad_w"])
def test_negative_padding_is_rejected_naming_field_and_value(field: str) -> None:
    with pytest.raises(ValueError, match=rf"^ConvProblem\.{field} must be >= 0, got -1$"):
        ConvProblem(**{**BASE, field: -1})


@pytest.mark.parametrize(
    ("field", "value"), [("n", 2.5), ("c", 4.0), ("h", "8"), ("groups", None), ("pad_w", True), ("r", False)]
)
def test_non_integer_field_is_rejected_naming_field_and_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^ConvProblem\.{field} must be an integer, got {re.escape(repr(value))}$"):
        ConvProblem(**{**BASE, field: value})


@pytest.mark.parametrize(
    ("changes", "axis", "kernel", "extent", "size", "pad"),
    [
        (dict(h=2, r=3), "r", 3, 3, 2, 0),
        (dict(w=4, s=7, pad_w=1), "s", 7, 7, 4, 1),
        (dict(h=5, r=3, dilation_h=3), "r", 3, 7, 5, 0),
        (dict(w=6, s=2, dilation_w=8, pad_w=1), "s", 2, 9, 6, 1),
    ],
    ids=["r_over_h", "s_over_padded_w", "dilated_r_over_h", "dilated_s_over_padded_w"],
)
def test_kernel_larger_than_padded_input_is_rejected(changes, axis, kernel, extent, size, pad) -> None:
    message = (
        f"ConvProblem.{axis}={kernel} (dilated extent {extent}) is larger than the padded input "
        f"({size} + 2*{pad} = {size + 2 * pad})"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ConvProblem(**{**BASE, **changes})


def test_kernel_exactly_filling_padded_dilated_input_is_accepted() -> None:
    p = ConvProblem(**{**BASE, "h": 5, "r": 3, "dilation_h": 3, "pad_h": 1})  # extent 7 == 5 + 2
    assert p.out_h == 1


def test_input_channels_not_divisible_by_groups_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"^ConvProblem\.c=6 is not divisible by groups=4$"):
        ConvProblem(**{**BASE, "c": 6, "k": 8, "groups": 4})


def test_output_channels_not_divisible_by_groups_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"^ConvProblem\.k=6 is not divisible by groups=4$"):
        ConvProblem(**{**BASE, "c": 8, "k": 6, "groups": 4})


@pytest.mark.parametrize(
    ("field", "value"),
    [("dtype", "float64"), ("dtype", "FLOAT16"), ("layout", "chwn"), ("layout", "NCHW"), ("direction", "bwd")],
)
def test_unknown_enum_value_is_rejected_naming_field_and_value(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"^ConvProblem\.{field} must be one of .*; got '{value}'$"):
        ConvProblem(**{**BASE, field: value})


def test_replace_validates_again() -> None:
    p = ConvProblem(**BASE)
    with pytest.raises(ValueError, match=r"^ConvProblem\.c=4 is not divisible by groups=3$"):
        p.replace(groups=3)


def test_problem_is_immutable_and_hashable() -> None:
    p = ConvProblem(**BASE)
    with pytest.raises(AttributeError):
        p.n = 3  # type: ignore[misc]
    assert len({p, ConvProblem(**BASE), p.replace(n=3)}) == 2
