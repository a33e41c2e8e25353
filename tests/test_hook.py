"""The runtime hook on CPU: GEMM lowering and pass-through give PyTorch's results and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from algosel.learn.selector import Selector
from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.spaces.base import PreparedCandidate


@pytest.fixture(scope="module")
def shipped():
    from algosel.learn.models import default_model_dir

    return Selector.load(default_model_dir())


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here): cuDNN choices pass through, GEMM lowering runs."""
    hook.reset_stats()
    return hook.Executor(selector=shipped, live=False, min_gain_us=0.0)


REF = hook._original_conv2d  # PyTorch's own conv2d, whatever the switches say


def _compare(fn_ref, fn_hook, inputs, atol=1e-4, rtol=1e-4):
    ref_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    hk_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    y_ref, y_hk = fn_ref(*ref_in), fn_hook(*hk_in)
    torch.testing.assert_close(y_hk, y_ref, atol=atol, rtol=rtol)
    g = torch.randn_like(y_ref)
    y_ref.backward(g)
    y_hk.backward(g)
    for a, b in zip(hk_in, ref_in):
        if a.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, atol=atol, rtol=rtol)
    return y_hk


def test_fully_connected_mode_runs_as_gemm_forward_and_backward(executor):
    x = torch.randn(64, 256, 6, 6, requires_grad=True)
    w = torch.randn(512, 256, 6, 6, requires_grad=True)
    b = torch.randn(512, requires_grad=True)
    with hook.enabled(executor):
        _compare(REF, F.conv2d, [x, w, b], atol=1e-3, rtol=1e-3)
    s = hook.stats()
    assert s.get("gemm", 0) == 3, s  # forward, grad-input and grad-weight all lowered to matmuls


@pytest.mark.parametrize(
    ("shape", "kwargs"),
    [
        ((2, 8, 11, 9), dict(stride=2, padding=1)),
        ((2, 8, 11, 9), dict(padding="same", dilation=2)),
        ((2, 8, 11, 9), dict(padding="valid", groups=4)),
        ((2, 8, 11, 9), dict(padding=(2, 0), stride=(1, 2), dilation=(1, 3))),
    ],
)
def test_other_convolutions_pass_through_with_identical_results(executor, shape, kwargs):
    groups = kwargs.get("groups", 1)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(12, shape[1] // groups, 3, 3, requires_grad=True)
    b = torch.randn(12, requires_grad=True)
    with hook.enabled(executor):
        _compare(lambda *t: REF(*t, **kwargs), lambda *t: F.conv2d(*t, **kwargs), [x, w, b])
    assert any(k.startswith("pytorch:") for k in hook.stats()), hook.stats()


def test_channels_last_pointwise_runs_as_gemm_and_keeps_its_layout(executor):
    x = torch.randn(4, 64, 7, 5).contiguous(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(32, 64, 1, 1).contiguous(memory_format=torch.channels_last).requires_grad_()
    # The model decides; whatever it picks, results and gradients must be PyTorch's.
    with hook.enabled(executor):
        y = _compare(REF, F.conv2d, [x, w])
    assert y.shape == (4, 32, 7, 5)


def test_autocast_lowers_the_inputs_like_pytorch(executor):
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    x = torch.randn(2, 8, 10, 10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = conv(x)
        with hook.enabled(executor):
            got = conv(x)
    assert got.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(got, ref, rtol=0, atol=0)  # PyTorch's own path, with autocast's own casts
    # The shipped model knows float32 and float16: the forward and the weight gradient (the input needs none) stay
    # with PyTorch.
    assert hook.stats() == {"pytorch:dtype not covered": 2}


def test_autocast_to_a_covered_dtype_runs_the_hooks_path(executor):
    conv = torch.nn.Conv2d(256, 512, 6)
    x = torch.randn(64, 256, 6, 6)
    with torch.autocast("cpu", dtype=torch.float16):
        ref = conv(x)
        with hook.enabled(executor):
            got = conv(x)
            got.float().sum().backward()
    assert got.dtype == torch.float16 and conv.weight.grad.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)
    assert hook.stats().get("gemm") == 2  # forward and weight gradient (the input needs none)


class _AlwaysGemm(hook.Executor):
    """A stand-in executor: GEMM lowering where the math allows, pass-through elsewhere (for float64 gradcheck)."""

    def __init__(self):  # no model: the plan is fixed
        self._directions = {}

    def plan(self, problem, device):
        from algosel.spaces.gemm import gemm_kind

        if gemm_kind(problem):
            return hook._offline_plan(problem, f"gemm:{gemm_kind(problem)}")
        return hook._Plan(None, "pytorch:test")


@pytest.mark.parametrize("kernel", [(5, 3), (1, 1), (3, 3)])
def test_gradcheck_of_the_autograd_function_in_float64(kernel):
    r, s = kernel
    h, w_ = (5, 3) if kernel == (5, 3) else (4, 6)
    p = ConvProblem(n=3, c=4, k=5, h=h, w=w_, r=r, s=s, pad_h=int(r == 3), pad_w=int(s == 3), dtype="float32")
    x = torch.randn(p.x_shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(p.w_shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(p.k, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: hook._Conv2dFunction.apply(x, w, b, p, _AlwaysGemm()), (x, w, b))


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.randn(1, 4, 5, 5), torch.randn(6, 4, 3, 3, dtype=torch.float64)),  # dtypes differ
        lambda: (torch.randn(1, 4, 5, 5), torch.randn(6, 3, 3, 3)),  # channels do not match
        lambda: (torch.randn(4, 5, 5), torch.randn(6, 4, 3, 3, 1)),  # wrong ranks
        lambda: (torch.randn(1, 4, 2, 2), torch.randn(6, 4, 3, 3)),  # kernel larger than the input
    ],
)
def test_bad_input_gives_pytorchs_own_error(executor, make):
    x, w = make()
    with pytest.raises(Exception) as expected:  # noqa: PT011 - whatever PyTorch raises
        REF(x, w)
    with hook.enabled(executor), pytest.raises(type(expected.value)) as got:
        F.conv2d(x, w)
    assert str(got.value) == str(expected.value)


class _Broken(PreparedCandidate):
    def run(self, ops):
        raise RuntimeError("kernel launch failed")


def test_a_failing_candidate_falls_back_and_is_counted(executor):
    p = ConvProblem(n=2, c=16, k=8, h=3, w=3, r=3, s=3, dtype="float32")
    executor._plans[p] = hook._Plan(_Broken(), "cudnn")
    x, w = torch.randn(p.x_shape), torch.randn(p.w_shape)
    with hook.enabled(executor):
        got = F.conv2d(x, w)
    torch.testing.assert_close(got, REF(x, w))
    assert hook.stats().get("fallback:RuntimeError") == 1
    assert executor._plans[p].runner is None  # not retried on every call


def test_switches_restore_pytorchs_conv2d(executor):
    original = F.conv2d
    with hook.enabled(executor):
        assert F.conv2d is hook.conv2d
        with hook.enabled(executor):
            assert F.conv2d is hook.conv2d
        assert F.conv2d is hook.conv2d
    assert F.conv2d is original
    hook.enable(executor)
    try:
        assert F.conv2d is hook.conv2d
    finally:
        hook.disable()
    assert F.conv2d is original


def test_patch_model_routes_only_that_models_convs(executor):
    model = torch.nn.Sequential(torch.nn.Conv2d(256, 512, 6), torch.nn.Flatten())
    other = torch.nn.Conv2d(256, 512, 6)
    hook.patch_model(model, executor)
    x = torch.randn(64, 256, 6, 6)
    ref = REF(x, model[0].weight, model[0].bias).flatten(1)
    torch.testing.assert_close(model(x), ref, atol=1e-3, rtol=1e-3)
    assert hook.stats().get("gemm") == 1
    other(x)
    assert hook.stats().get("gemm") == 1  # the unpatched module went straight to PyTorch


def test_repeated_calls_reuse_the_route_and_are_all_counted(executor):
    x = torch.randn(2, 8, 11, 9)
    w = torch.randn(12, 8, 3, 3)
    with hook.enabled(executor):
        for _ in range(5):
            got = F.conv2d(x, w, None, [2, 1], [1, 1], [1, 1], 1)  # list arguments, as F.conv2d accepts them
    torch.testing.assert_close(got, REF(x, w, None, (2, 1), (1, 1)))
    assert sum(hook.stats().values()) == 5, hook.stats()  # no grad needed: one direction per call
    assert len(executor._routes) == 1
    hook.reset_stats()
    assert hook.stats() == {}


def test_fully_connected_mode_runs_as_plain_differentiable_gemms_when_matmul_tf32_matches(executor):
    """Where every direction is GEMM lowering and the math mode is the one measured, the hook leaves the backward to
    autograd (no Python Function, like nn.Linear), with the same results."""
    x = torch.randn(16, 32, 5, 5, requires_grad=True)
    w = torch.randn(64, 32, 5, 5, requires_grad=True)
    b = torch.randn(64, requires_grad=True)
    matmul = torch.backends.cuda.matmul
    saved, matmul.allow_tf32 = matmul.allow_tf32, True  # float32 convs allow TF32 (cudnn.allow_tf32) by default
    try:
        with hook.enabled(executor):
            y = _compare(REF, F.conv2d, [x, w, b], atol=1e-3, rtol=1e-3)
            route = next(iter(executor._routes.values()))
    finally:
        matmul.allow_tf32 = saved
    assert route.kind == "gemm" and "Conv2dFunction" not in type(y.grad_fn).__name__
    assert hook.stats() == {"gemm": 3}
