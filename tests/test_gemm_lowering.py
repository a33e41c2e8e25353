"""Tests of the GEMM lowering (algosel.spaces.gemm) and PyTorch's default path on CPU, against autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from algosel.candidates import DEFAULT_ID
from algosel.operands import Operands, conv_args, make_operands, memory_format, relative_error
from algosel.problem import ConvProblem
from algosel.spaces.base import Candidate, CandidateError
from algosel.spaces.gemm import GemmSpace, gemm_conv, gemm_kind
from algosel.spaces.pytorch import PyTorchDefaultSpace, pytorch_conv

FC_SHAPES = {
    "fc_3x5_b1": dict(n=1, c=3, k=5, h=3, w=5, r=3, s=5),
    "fc_3x5_b7": dict(n=7, c=3, k=5, h=3, w=5, r=3, s=5),
    "fc_5x3_b7_c2_k9": dict(n=7, c=2, k=9, h=5, w=3, r=5, s=3),
    "fc_1x1_input_b7": dict(n=7, c=11, k=6, h=1, w=1, r=1, s=1),  # both fc and pointwise: fc wins
    "fc_strided_b7": dict(n=7, c=3, k=4, h=4, w=2, r=4, s=2, stride_h=2, stride_w=3),  # stride is irrelevant
}
POINTWISE_SHAPES = {
    "pw_b1": dict(n=1, c=5, k=7, h=3, w=4, r=1, s=1),
    "pw_b3": dict(n=3, c=5, k=7, h=3, w=4, r=1, s=1),
    "pw_b4_c1": dict(n=4, c=1, k=3, h=2, w=5, r=1, s=1),
    "pw_b2_k1": dict(n=2, c=9, k=1, h=5, w=1, r=1, s=1),
}
SHAPES = {**FC_SHAPES, **POINTWISE_SHAPES}


def _autograd(problem: ConvProblem, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> dict[str, torch.Tensor]:
    """y, dx and dw of the problem in float64 through F.conv2d and autograd (independent of the code under test)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True)
    y = F.conv2d(x64, w64, None, **conv_args(problem))
    dx, dw = torch.autograd.grad(y, (x64, w64), grad_outputs=dy.detach().double())
    return {"fwd": y.detach(), "bwd_data": dx, "bwd_filter": dw}


def _operands(problem: ConvProblem, dtype: torch.dtype, seed: int = 0) -> Operands:
    g = torch.Generator().manual_seed(seed)
    mf = memory_format(problem)

    def rand(shape: tuple[int, ...]) -> torch.Tensor:
        return (torch.rand(shape, generator=g, dtype=dtype) * 2 - 1).contiguous(memory_format=mf)

    return Operands(x=rand(problem.x_shape), w=rand(problem.w_shape), y=rand(problem.y_shape))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["f64", "f32"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_gemm_conv_matches_conv2d_and_autograd_in_every_direction(shape, dtype, tol, layout) -> None:
    base = ConvProblem(**shape, layout=layout)
    ops = _operands(base, dtype)
    ref = _autograd(base, ops.x, ops.w, ops.y)
    for problem in base.directions():
        out = gemm_conv(problem, *ops.inputs(problem.direction))
        assert out.dtype == dtype
        assert relative_error(out, ref[problem.direction]) <= tol, problem.key


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_gemm_conv_output_layout_is_the_problems_layout(shape) -> None:
    for layout, mf in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        base = ConvProblem(**shape, layout=layout)
        ops = _operands(base, torch.float32)
        for problem in base.directions():
            out = gemm_conv(problem, *ops.inputs(problem.direction))
            expected = {"fwd": base.y_shape, "bwd_data": base.x_shape, "bwd_filter": base.w_shape}[problem.direction]
            assert tuple(out.shape) == expected
            assert out.is_contiguous(memory_format=mf), f"{problem.key}: strides {out.stride()}"


def test_nhwc_output_is_channels_last_not_nchw() -> None:
    problem = ConvProblem(**POINTWISE_SHAPES["pw_b3"], layout="nhwc")
    ops = _operands(problem, torch.float32)
    out = gemm_conv(problem, ops.x, ops.w)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()


def test_gemm_kind_names_the_lowering() -> None:
    assert gemm_kind(ConvProblem(**FC_SHAPES["fc_3x5_b7"])) == "fc"
    assert gemm_kind(ConvProblem(**FC_SHAPES["fc_1x1_input_b7"])) == "fc"
    assert gemm_kind(ConvProblem(**POINTWISE_SHAPES["pw_b3"])) == "pointwise"
    assert gemm_kind(ConvProblem(n=1, c=3, k=5, h=6, w=6, r=3, s=3)) is None


NOT_GEMM = {
    "3x3": dict(n=2, c=3, k=5, h=6, w=6, r=3, s=3),
    "1x1_stride2": dict(n=2, c=3, k=5, h=6, w=6, r=1, s=1, stride_h=2, stride_w=2),
    "1x1_padded": dict(n=2, c=3, k=5, h=6, w=6, r=1, s=1, pad_h=1, pad_w=1),
    "1x1_grouped": dict(n=2, c=4, k=6, h=6, w=6, r=1, s=1, groups=2),
    "fc_padded": dict(n=2, c=3, k=5, h=3, w=3, r=3, s=3, pad_h=1, pad_w=1),
    "fc_grouped": dict(n=2, c=4, k=4, h=3, w=3, r=3, s=3, groups=4),
}


@pytest.mark.parametrize("shape", list(NOT_GEMM.values()), ids=list(NOT_GEMM))
def test_gemm_space_offers_nothing_for_non_gemm_problems(shape) -> None:
    problem = ConvProblem(**shape)
    assert GemmSpace().enumerate(problem) == []
    with pytest.raises(ValueError, match="is not a GEMM"):
        gemm_conv(problem, torch.zeros(problem.x_shape), torch.zeros(problem.w_shape))


def test_gemm_space_offers_one_candidate_named_by_kind() -> None:
    space = GemmSpace()
    assert space.enumerate(ConvProblem(**FC_SHAPES["fc_3x5_b7"])) == [Candidate(space="gemm", name="fc")]
    assert space.enumerate(ConvProblem(**POINTWISE_SHAPES["pw_b3"])) == [Candidate(space="gemm", name="pointwise")]
    assert space.available() is None


def test_gemm_prepare_rejects_a_candidate_of_another_kind() -> None:
    space = GemmSpace()
    with pytest.raises(CandidateError, match="gemm:pointwise does not apply") as info:
        space.prepare(ConvProblem(**FC_SHAPES["fc_3x5_b7"]), Candidate(space="gemm", name="pointwise"))
    assert info.value.status == "build_failed"
    with pytest.raises(CandidateError) as info:
        space.prepare(ConvProblem(**NOT_GEMM["3x3"]), Candidate(space="gemm", name="fc"))
    assert info.value.status == "build_failed" and "gemm:fc" in info.value.reason


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_prepared_gemm_candidate_runs_the_problems_direction(layout) -> None:
    base = ConvProblem(**FC_SHAPES["fc_3x5_b7"], layout=layout)
    ops = make_operands(base, "cpu", torch.Generator().manual_seed(3))
    ref = _autograd(base, ops.x, ops.w, ops.y)
    space = GemmSpace()
    for problem in base.directions():
        (cand,) = space.enumerate(problem)
        prepared = space.prepare(problem, cand)
        assert prepared.candidate == cand and prepared.workspace_bytes == 0
        assert relative_error(prepared.run(ops), ref[problem.direction]) <= 1e-5
        prepared.close()


GROUPED_DILATED = dict(
    n=2, c=6, k=4, h=9, w=8, r=3, s=3, pad_h=2, pad_w=1, stride_h=2, stride_w=1, dilation_h=2, dilation_w=3, groups=2
)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_pytorch_default_matches_autograd_on_grouped_dilated_3x3(direction, layout) -> None:
    problem = ConvProblem(**GROUPED_DILATED, layout=layout, direction=direction)
    ops = make_operands(problem, "cpu", torch.Generator().manual_seed(5))
    ref = _autograd(problem, ops.x, ops.w, ops.y)[direction]
    out = pytorch_conv(problem, ops)
    assert tuple(out.shape) == tuple(ref.shape)
    assert relative_error(out, ref) <= 1e-5
    space = PyTorchDefaultSpace()
    (cand,) = space.enumerate(problem)
    assert cand.candidate_id == DEFAULT_ID
    assert relative_error(space.prepare(problem, cand).run(ops), ref) <= 1e-5


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_gemm_conv_adds_the_bias_in_the_forward_direction(shape, layout) -> None:
    problem = ConvProblem(**shape, layout=layout)
    ops = _operands(problem, torch.float64)
    bias = torch.rand(problem.k, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ref = F.conv2d(ops.x, ops.w, bias, **conv_args(problem))
    assert relative_error(gemm_conv(problem, ops.x, ops.w, bias), ref) <= 1e-12


def test_gemm_conv_refuses_a_bias_in_a_backward_direction() -> None:
    problem = ConvProblem(**FC_SHAPES["fc_3x5_b7"], direction="bwd_data")
    ops = _operands(problem, torch.float64)
    with pytest.raises(ValueError, match="bias is added in the forward direction only, not in bwd_data"):
        gemm_conv(problem, ops.y, ops.w, torch.zeros(problem.k, dtype=torch.float64))
