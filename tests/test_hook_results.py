"""The runtime hook on CPU gives PyTorch's results and gradients on every path (GEMM lowering, pass-through, a
failing candidate's fallback) and in every mode of autograd a training loop uses (no grad, inference mode,
checkpointing, double backward, an in-place op after a lowered convolution); bad input gets PyTorch's own error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support import REF, UnrecordedPredicting, gemm_paying_executor, hook_executor

from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.plans import Plan, compiled_plans
from algosel.spaces.base import PreparedCandidate


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here), with a time predictor that makes GEMM lowering pay."""
    return gemm_paying_executor(shipped)


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
            (route,) = executor.route_list()
    finally:
        matmul.allow_tf32 = saved
    assert route.kind == "gemm" and "Conv2dFunction" not in type(y.grad_fn).__name__
    assert hook.stats() == {"gemm": 3}


@pytest.mark.parametrize("switch", ["cudnn.deterministic", "use_deterministic_algorithms"])
def test_deterministic_convolutions_asked_for_are_pytorchs_own(executor, switch):
    """With determinism asked of PyTorch, a call the hook would switch (fully connected: GEMM) is PyTorch's own;
    the same call with it off again switches (the switch is part of the call's key)."""
    x, w = torch.randn(8, 256, 6, 6), torch.randn(512, 256, 6, 6)
    with hook.enabled(executor):
        if switch == "cudnn.deterministic":
            with torch.backends.cudnn.flags(enabled=True, deterministic=True):
                torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
        else:
            torch.use_deterministic_algorithms(True)
            try:
                torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
            finally:
                torch.use_deterministic_algorithms(False)
        assert hook.stats() == {"pytorch:deterministic algorithms asked for": 1}
        F.conv2d(x, w)
    assert hook.stats() == {"pytorch:deterministic algorithms asked for": 1, "gemm": 1}


def test_a_dtype_the_model_was_not_trained_on_passes_through(executor):
    x, w = torch.randn(4, 256, 6, 6, dtype=torch.float64), torch.randn(512, 256, 6, 6, dtype=torch.float64)
    with hook.enabled(executor):
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
    assert set(hook.stats()) == {"pytorch:dtype not covered"}


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
    with hook.enabled(executor):
        y = _compare(REF, F.conv2d, [x, w])
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert hook.stats().get("gemm") == 3


def test_an_in_place_op_after_a_lowered_conv_trains(executor):
    """NCHW pointwise lowering runs in the Python Function, whose output is a view of the product: an in-place
    activation after it (EfficientNet, SqueezeNet) must not raise, and the gradients must be PyTorch's."""
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 24, 1), torch.nn.ReLU(inplace=True), torch.nn.Conv2d(24, 8, 3))
    ref = torch.nn.Sequential(*(m for m in __import__("copy").deepcopy(model)))
    x = torch.randn(3, 16, 9, 9, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    with hook.enabled(executor):
        y = model(x)
        y.sum().backward()
        route_kinds = {r.kind for r in executor.route_list()}
    ref(xr).sum().backward()
    assert "function" in route_kinds
    torch.testing.assert_close(y, ref(xr), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)


def test_double_backward_matches_pytorch(executor):
    x = torch.randn(3, 16, 9, 9, requires_grad=True)
    w = torch.randn(24, 16, 1, 1, requires_grad=True)

    def second(fn):
        (gx,) = torch.autograd.grad(fn(x, w).pow(2).sum(), x, create_graph=True)
        return torch.autograd.grad(gx.sum(), w)[0]

    with hook.enabled(executor):
        got = second(F.conv2d)
    torch.testing.assert_close(got, second(REF), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_forward_without_autograd(executor, mode):
    x, w = torch.randn(64, 256, 6, 6), torch.randn(512, 256, 6, 6)
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with hook.enabled(executor), ctx:
        y = F.conv2d(x, w)
    torch.testing.assert_close(y, REF(x, w), atol=1e-3, rtol=1e-3)
    assert hook.stats() == {"gemm": 1}


def test_checkpointed_convolutions_train(executor):
    from torch.utils.checkpoint import checkpoint

    conv = torch.nn.Conv2d(256, 64, 6)
    x = torch.randn(8, 256, 6, 6, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    with hook.enabled(executor):
        checkpoint(conv, x, use_reentrant=False).sum().backward()
    got = (x.grad.clone(), conv.weight.grad.clone())
    conv.weight.grad = None
    conv(xr).sum().backward()
    torch.testing.assert_close(got[0], xr.grad, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(got[1], conv.weight.grad, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize(
    "make",
    [
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


class _BrokenRunner(PreparedCandidate):
    def run(self, ops):
        raise RuntimeError("kernel launch failed")


@pytest.fixture
def broken_space():
    """A candidate space whose one candidate builds and fails at run time (on every direction)."""
    from algosel import spaces
    from algosel.spaces.base import Candidate, CandidateSpace

    class BrokenSpace(CandidateSpace):
        name = "broken"
        from_lists = False

        def enumerate(self, problem):
            return self.offline_candidates(problem)

        def offline_candidates(self, problem):
            return [Candidate("broken", "x", problem.direction)]

        def prepare(self, problem, candidate):
            return _BrokenRunner()

    spaces.register(BrokenSpace)
    try:
        yield BrokenSpace
    finally:
        spaces.unregister("broken")


class _PrefersBroken(UnrecordedPredicting):
    """Chooses the broken space's candidate, predicted ten times faster than PyTorch's default."""

    def choose(self, problem, max_workspace_bytes=None, deterministic=False, top_k=1, live=False):
        from algosel.learn.selector import Choice

        return [Choice(candidate_id="broken:x", space="broken", engine_id=-1, knobs="", score=1.0,
                       workspace_bytes=0, source="records")]  # fmt: skip

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return {c: 0.1 if c == "broken:x" else 1.0 for c in candidate_ids}


def test_a_failing_candidate_falls_back_and_is_counted(shipped, broken_space):
    hook.reset_stats()
    ex = hook_executor(selector=_PrefersBroken(shipped), live=False, cache=False)
    p = ConvProblem(n=2, c=16, k=8, h=3, w=3, r=3, s=3, dtype="float32")
    x, w = torch.randn(p.x_shape), torch.randn(p.w_shape)
    with hook.enabled(ex):
        got = F.conv2d(x, w)
        torch.testing.assert_close(got, REF(x, w))
        assert hook.stats() == {"fallback:RuntimeError": 1}
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
    assert hook.stats() == {"fallback:RuntimeError": 1, "pytorch:chosen candidate failed": 1}  # not retried
    assert ex.plans.get(p).path == "pytorch:chosen candidate failed"


def test_gemm_mixed_with_other_paths_passes_through_where_the_compiled_path_runs_the_rest():
    """A GEMM direction beside a cuDNN plan or a pass-through would need the Python Function (host time the switch
    rule does not charge): with the compiled path, that direction passes through; an all-GEMM convolution keeps
    its GEMMs."""
    gemm, cudnn, native = Plan(object(), "gemm"), Plan(None, "cudnn", native_id=4), Plan(None, "pytorch:fastest")
    mixed = compiled_plans([gemm, cudnn, native])
    assert [p.path for p in mixed] == ["pytorch:gemm mixed with other paths", "cudnn", "pytorch:fastest"]
    assert mixed[0].runner is None and mixed[0].native_id < 0 and mixed[1] is cudnn and mixed[2] is native
    assert compiled_plans([gemm, gemm]) == [gemm, gemm]
    assert compiled_plans([cudnn, native]) == [cudnn, native]
