"""The runtime hook on CPU: its decisions, GEMM lowering and pass-through give PyTorch's results and gradients,
in every mode of autograd a training loop uses, and torch.compile keeps it in its graph."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algosel.candidates import DEFAULT_ID
from algosel.learn.selector import Selector
from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.plans import Plan, compiled_plans
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy, fastest, host_extra_us
from algosel.runtime.standins import (
    CpuAsCuda,
    DefaultTakes,
    FakeDevice,
    LiveList,
    ManualClock,
    Preferring,
    ScriptedMeasurer,
    WithoutTimeModel,
)
from algosel.spaces.base import PreparedCandidate
from algosel.testing import exact_calibration


def _executor(**config) -> hook.Executor:
    """An executor that routes the CPU's calls as a GPU's (``CpuAsCuda``, unless a test gives its own device seam):
    the hook routes CUDA tensors alone, so its routing is tested on the CPU through this stand-in. Its calibration
    says the stand-in selectors' predicted times are exact (unless a test gives its own), so that the rule acts on
    them as they are."""
    return hook.Executor(**{"device_probe": CPU_AS_CUDA, "calibration": EXACT, **config})


#: One seam for every executor, so that ``enabled()`` blocks of one configuration share their executor.
CPU_AS_CUDA = CpuAsCuda()
EXACT = exact_calibration()


def Predicting(sel: Selector, gemm_ratio: float = 0.2, default_ms: float = 1.0) -> Preferring:  # noqa: N802
    """A selector with a time predictor that says GEMM lowering takes ``gemm_ratio`` of PyTorch's default time, and
    that ranks GEMM lowering first where it applies (the hook's decision is what is tested here, not the model's
    predictions or ranks)."""
    return Preferring(sel, "gemm", gemm_ratio, default_ms)


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here), with a time predictor that makes GEMM lowering pay."""
    hook.reset_stats()
    return _executor(selector=Predicting(shipped), live=False)


REF = hook.original_conv2d  # PyTorch's own conv2d, whatever the switches say


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


def test_an_unrecorded_problem_without_a_gain_estimate_passes_through(shipped):
    """A network the model knows nothing about runs at PyTorch's speed: no records, no measurement, no predicted
    times, no switch."""
    hook.reset_stats()
    ex = _executor(selector=WithoutTimeModel(shipped), live=False)
    x, w = torch.randn(64, 256, 6, 6), torch.randn(512, 256, 6, 6)
    with hook.enabled(ex):
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
    assert hook.stats() == {"pytorch:no calibrated time model": 1}


@pytest.mark.parametrize(("ratio", "expected"), [(0.95, "pytorch:expected saving below its cost"), (0.9, "cudnn")])
def test_the_rule_switches_untimed_only_where_the_predicted_saving_pays_the_routes_costs(shipped, ratio, expected):
    """Predictions exact (the calibration's errors all zero), nothing timed: a cuDNN config predicted 5% faster than a
    1 ms default saves 50 us a call, under the Python path's 60 us, and passes; 10% faster saves 40 us a call net,
    which over the expected calls pays the plan's build."""
    ex = _executor(selector=Preferring(shipped, "cudnn", ratio, recorded=False), live=False, cache=False,
                   device_probe=FakeDevice(can_time=False), native=False)  # fmt: skip
    problem = ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    decision = ex.decide(problem, torch.device("cpu"))
    got = decision.candidate_id.split(":")[0] if not decision.passes_through else f"pytorch:{decision.reason}"
    assert got == expected and decision.source == ("predicted" if expected == "cudnn" else "model")


def test_far_from_the_records_the_rule_weighs_the_far_errors(shipped):
    """The calibration's errors are grouped by distance from the records: near ones exact, far ones either way by 4x
    (log2 +-2); the same predicted 5x gain switches untimed near the records and not far from them, where one of the
    held-out errors would make it a loss."""
    from algosel.learn.calibration import Calibration, ErrorSamples, family_of

    problem = ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    rows = 40  # a group's least samples
    exact = ErrorSamples(np.zeros(rows), np.zeros((rows, 3)))
    wide = ErrorSamples(np.zeros(rows), np.repeat([[2.0] * 3, [-3.0] * 3], rows // 2, axis=0))
    calibration = Calibration({f"{family_of(problem)}/near": exact, "all": wide})
    for distance, switched in ((0.0, True), (FAR, False)):
        ex = _executor(selector=DefaultTakes(shipped, 1000.0, 200.0, distance), live=False, cache=False,
                       device_probe=FakeDevice(can_time=False), calibration=calibration)  # fmt: skip
        assert (not ex.decide(problem, torch.device("cpu")).passes_through) is switched, distance


def _verifying(selector, **kw):
    """A verify-mode executor that times on the CPU with ``measurer`` (default: every candidate as fast as PyTorch's
    default)."""
    kw.setdefault("measurer", ScriptedMeasurer({}, (1.0, 0.0)))
    return _executor(selector=selector, live=kw.pop("live", False), verify=3, cache=False,
                     device_probe=FakeDevice(can_time=True), **kw)  # fmt: skip


PROBLEM = ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)


@pytest.mark.parametrize(("largest_error", "default_us", "timed"), [
    (0.0, 19.9, False), (0.0, 20.1, True), (1.0, 9.9, False), (1.0, 10.1, True), (1.0, 500.0, True),
])  # fmt: skip
def test_verify_mode_does_not_time_a_problem_too_short_to_pay(shipped, largest_error, default_us, timed):
    """Nothing is timed where the default is predicted too short for any candidate to save the least gain (20 us),
    even at the calibration's largest held-out error of the default's time (log2 +1: twice as long)."""
    from algosel.learn.calibration import Calibration, ErrorSamples

    calibration = Calibration({"all": ErrorSamples(np.array([0.0, largest_error]), np.zeros((2, 3)))})
    ex = _verifying(DefaultTakes(shipped, default_us, 0.0), calibration=calibration)
    decision = ex.decide(PROBLEM, torch.device("cpu"))
    assert bool(ex.verifier.measurer().timed) == timed
    if not timed:
        assert (decision.candidate_id, decision.reason) == (DEFAULT_ID, "predicted shorter than the least gain")


@pytest.mark.parametrize(("default_us", "others_us"), [(50.0, 41.0), (50.0, 39.0), (100.0, 100.0), (99.0, 200.0)])
def test_verify_mode_times_a_problem_whatever_its_predicted_gain(shipped, default_us, others_us):
    """The model's predicted gain misses what problems the records lack gain: verify mode times the model's top 3
    and PyTorch's default on every problem whose default is not too short to pay."""
    ex = _verifying(DefaultTakes(shipped, default_us, others_us))
    ex.decide(PROBLEM, torch.device("cpu"))
    nearest = [c.candidate_id for c in shipped.choose(PROBLEM, top_k=5) if c.candidate_id != DEFAULT_ID][:3]
    assert ex.verifier.measurer().asked == [[DEFAULT_ID, *nearest]]


FAR = 2.5  # records distance beyond the calibration's near band (2.0)


def test_verify_mode_times_the_live_lists_top_near_the_records_or_far(shipped):
    """On a GPU the shortlist timed is the model's top of cuDNN's live list (heuristic modes A and FALLBACK), near
    the records or far; ``live=False`` (no query possible): the nearest recorded list's top."""

    def live_choices(p, k, modes=None):  # the live list's top: the nearest list's last candidates
        return [c for c in shipped.choose(p, top_k=200) if c.candidate_id != DEFAULT_ID][-k:]

    top = [c.candidate_id for c in live_choices(PROBLEM, 4)][:3]
    nearest = [c.candidate_id for c in shipped.choose(PROBLEM, top_k=5) if c.candidate_id != DEFAULT_ID][:3]
    for distance in (0.0, FAR):
        selector = DefaultTakes(shipped, 50.0, 41.0, distance)
        source = LiveList(selector, live_choices)
        ex = _verifying(selector, candidates=source, live=True)
        ex.decide(PROBLEM, torch.device("cuda"))  # a device object: the measurer stands in for the GPU
        assert source.asked == [(PROBLEM, 4, ("a", "fallback"))]  # the verify + 1 first: the default may be one
        assert ex.verifier.measurer().asked == [[DEFAULT_ID, *top]]
        offline = _verifying(DefaultTakes(shipped, 50.0, 41.0, distance))
        offline.decide(PROBLEM, torch.device("cuda"))
        assert offline.verifier.measurer().asked == [[DEFAULT_ID, *nearest]]


def test_without_a_time_model_the_rule_queries_no_live_list(shipped):
    selector = WithoutTimeModel(shipped)
    source = LiveList(selector, lambda p, k, modes=None: pytest.fail("queried cuDNN's live list"))
    ex = _executor(selector=selector, candidates=source, cache=False)
    decision = ex.decide(ConvProblem(n=3, c=5, k=7, h=9, w=9, r=3, s=3), torch.device("cuda"))
    assert decision.passes_through and not source.asked


def test_without_a_time_model_verify_mode_times_every_problem(shipped):
    ex = _verifying(WithoutTimeModel(shipped))
    ex.decide(ConvProblem(n=1, c=8, k=8, h=4, w=4, r=1, s=1), torch.device("cpu"))
    assert ex.verifier.measurer().timed  # no estimate that it is too short


class UnrecordedPredicting(Preferring):
    """... with every problem unrecorded, so that each is decided by its predicted times."""

    def __init__(self, sel: Selector, gemm_ratio: float = 0.2, default_ms: float = 1.0):
        super().__init__(sel, "gemm", gemm_ratio, default_ms, recorded=False)


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
    ex = _executor(selector=_PrefersBroken(shipped), live=False, cache=False)
    p = ConvProblem(n=2, c=16, k=8, h=3, w=3, r=3, s=3, dtype="float32")
    x, w = torch.randn(p.x_shape), torch.randn(p.w_shape)
    with hook.enabled(ex):
        got = F.conv2d(x, w)
        torch.testing.assert_close(got, REF(x, w))
        assert hook.stats() == {"fallback:RuntimeError": 1}
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
    assert hook.stats() == {"fallback:RuntimeError": 1, "pytorch:chosen candidate failed": 1}  # not retried
    assert ex.plans.get(p).path == "pytorch:chosen candidate failed"


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


def test_enabled_blocks_share_one_executor_per_configuration(shipped, monkeypatch):
    """A `with enabled():` around every training step plans each convolution once (it made ResNet-50 24x slower
    when every block made a new executor)."""
    x, w = torch.randn(2, 8, 11, 9), torch.randn(12, 8, 3, 3)
    seen = []
    for _ in range(3):
        with hook.enabled(selector=shipped, device_probe=CPU_AS_CUDA, live=False) as ex:
            F.conv2d(x, w)
            seen.append(ex)
    with hook.enabled(selector=shipped, device_probe=CPU_AS_CUDA, live=False, verify=2) as other:
        F.conv2d(x, w)
    assert seen == [ex] * 3 and other is not ex
    assert ex.aside is not None and ex.aside.join(10)  # the default mode decides beside the step: then routed
    with hook.enabled(selector=shipped, device_probe=CPU_AS_CUDA, live=False) as again:
        F.conv2d(x, w)
    assert again is ex and len(ex.route_list()) == 1
    with pytest.raises(ValueError, match="not both"):
        with hook.enabled(ex, verify=1):
            pass


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
    assert len(executor.route_list()) == 1
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
            (route,) = executor.route_list()
    finally:
        matmul.allow_tf32 = saved
    assert route.kind == "gemm" and "Conv2dFunction" not in type(y.grad_fn).__name__
    assert hook.stats() == {"gemm": 3}


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 8, 8),  # fully connected mode on the 8x8 map
    )  # fmt: skip


@pytest.mark.parametrize("switch", ["enable", "patch_model"])
def test_torch_compile_keeps_the_hooked_convolutions_in_one_graph(executor, switch):
    model = _net()
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    ref = model(x)
    torch._dynamo.reset()
    if switch == "enable":
        hook.enable(executor)
    else:
        hook.patch_model(model, executor)
    try:
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
        compiled = torch.compile(model, backend="aot_eager")
        y = compiled(x)
        y.sum().backward()
    finally:
        hook.disable()
        torch._dynamo.reset()
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-4)
    assert x.grad is not None and hook.stats().get("gemm", 0) >= 1, hook.stats()


def test_an_executor_met_under_torch_compile_routes_every_block(shipped):
    """A compiled graph guards on F.conv2d: an executor whose convolutions ran as the custom op never steps aside
    (which would swap F.conv2d and compile the graph again)."""
    model = _net()
    ex = _executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)  # nothing switched
    x = torch.randn(4, 3, 8, 8)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="aot_eager")
        for _ in range(6):
            with hook.enabled(ex):
                assert F.conv2d is not REF
                torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    finally:
        torch._dynamo.reset()
    assert not ex.step_aside and ex.blocks_aside == 0 and ex.route_reasons()


def test_record_mode_keeps_the_unrecorded_problems_met_with_call_counts(shipped, tmp_path, monkeypatch):
    from algosel.measure.layers import load_layers
    from algosel.runtime.unseen import ENV_VAR

    path = tmp_path / "unseen.csv"
    ex = _executor(selector=shipped, live=False, record=path)
    x, w = torch.randn(2, 8, 11, 9), torch.randn(12, 8, 3, 3)
    recorded = ConvProblem.from_key(shipped.catalogue.frame["problem_key"].iloc[0])
    xr, wr = torch.randn(recorded.x_shape), torch.randn(recorded.w_shape)
    with hook.enabled(ex):
        for _ in range(3):
            F.conv2d(x, w, stride=2)
        if recorded.direction == "fwd" and recorded.dtype == "float32" and recorded.layout == "nchw":
            F.conv2d(xr, wr, None, (recorded.stride_h, recorded.stride_w), (recorded.pad_h, recorded.pad_w),
                     (recorded.dilation_h, recorded.dilation_w), recorded.groups)  # fmt: skip
    ex.recorder.flush()
    layers = load_layers(path)
    assert len(layers) == 1 and int(layers["calls"].iloc[0]) == 3
    assert int(layers["n"].iloc[0]) == 2 and int(layers["c"].iloc[0]) == 8 and int(layers["stride_h"].iloc[0]) == 2
    # an environment variable does the same for code that cannot pass record=
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "from_env.csv"))
    assert _executor(selector=shipped, live=False).recorder.path.name == "from_env.csv"


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


class _OneDecisionCache:
    """A persistent cache holding one decision (the executor reads it as it would from disk on a GPU)."""

    def __init__(self, decision):
        self.decision, self.put_calls = decision, 0

    def get(self, key):
        return self.decision if key == self.decision.problem else None

    def put(self, decision):
        self.put_calls += 1


@pytest.mark.parametrize(("min_gain_us", "expected"), [(5.0, "gemm:fc"), (50.0, DEFAULT_ID)])
def test_a_cached_decision_is_judged_again_by_this_executors_rule(shipped, min_gain_us, expected):
    """The cache keeps the times a decision was made from; another executor's threshold (or an older rule) wrote
    it, so a hit is judged again: 20 us saved switches under a 5 us floor and passes through under a 50 us one."""
    from algosel.runtime.decision import Decision

    # float16 fully connected mode: one matrix product, so the GEMM route costs no host time to charge
    problem = ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6, dtype="float16")
    written = Decision(problem.key, DEFAULT_ID, "measured", "gain below the threshold",
                       {"gemm:fc": 0.010, DEFAULT_ID: 0.030})  # fmt: skip
    if expected == DEFAULT_ID:
        written = Decision(problem.key, "gemm:fc", "measured", "", written.times_ms)
    cache = _OneDecisionCache(written)
    ex = _executor(selector=shipped, live=False, min_gain_us=min_gain_us, cache=cache)
    got = ex.decide(problem, torch.device("cuda"))  # a device object only: the cache is read on GPUs
    assert got.candidate_id == expected and got.source == "measured"
    assert got.times_ms == written.times_ms and cache.put_calls == 0


class HostCosting(UnrecordedPredicting):
    """... whose records say the GEMM lowering takes ``extra_us`` more host time per call than PyTorch's default."""

    def __init__(self, sel, extra_us: float):
        super().__init__(sel)
        self._extra_us = extra_us

    def host_us(self, problem, candidate_ids):
        return {c: 20.0 + (self._extra_us if c.startswith("gemm:") else 0.0) for c in candidate_ids}


@pytest.mark.parametrize(("extra_us", "expected"), [(0.0, "gemm"), (730.0, "gemm"),
                                                    (750.0, "pytorch:expected saving below its cost")])  # fmt: skip
def test_a_switch_must_also_pay_the_host_time_its_candidate_takes_over_pytorchs(shipped, extra_us, expected):
    """Predicted 0.2 of a 1 ms default: 800 us saved a call, against the route's host cost (the Python path's 60 us
    here) plus the candidate's recorded extra host time: 730 us more still pays, 750 us does not."""
    hook.reset_stats()
    ex = _executor(selector=HostCosting(shipped, extra_us), live=False)
    x, w = torch.randn(64, 256, 6, 6), torch.randn(512, 256, 6, 6)
    with hook.enabled(ex):
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w), atol=1e-3, rtol=1e-3)
    assert hook.stats() == {expected: 1}
    decision = ex.decide(ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6), torch.device("cpu"))
    assert decision.host_us == {"gemm:fc": 20.0 + extra_us, DEFAULT_ID: 20.0}


def test_host_extra_counts_only_a_measured_excess():
    extra = host_extra_us
    assert extra({"cudnn:a": 35.0, DEFAULT_ID: 20.0}, "cudnn:a") == 15.0
    assert extra({"cudnn:a": 12.0, DEFAULT_ID: 20.0}, "cudnn:a") == 0.0  # cheaper: no credit
    assert extra({"cudnn:a": 35.0}, "cudnn:a") == 0.0 and extra({}, "cudnn:a") == 0.0  # unknown: nothing charged
    assert extra({"cudnn:a": float("nan"), DEFAULT_ID: 20.0}, "cudnn:a") == 0.0


def test_a_cached_measurement_is_judged_again_with_its_measured_host_times(shipped):
    """Verify mode keeps the host times it measured with its decision: judged again, a switch whose candidate took
    more host time than it saved device time passes through."""
    from algosel.runtime.decision import Decision

    problem = ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6, dtype="float16")
    times = {"gemm:fc": 0.010, DEFAULT_ID: 0.100}  # 90 us saved a call
    for host_us, expected in (({"gemm:fc": 30.0, DEFAULT_ID: 25.0}, "gemm:fc"),
                              ({"gemm:fc": 125.0, DEFAULT_ID: 25.0}, DEFAULT_ID)):  # fmt: skip
        written = Decision(problem.key, "gemm:fc", "measured", "", times, host_us)
        ex = _executor(selector=shipped, live=False, cache=_OneDecisionCache(written))
        got = ex.decide(problem, torch.device("cuda"))
        assert got.candidate_id == expected and got.host_us == host_us


def test_the_fastest_measured_candidate_counts_the_host_time_it_takes_over_pytorchs():
    times = {DEFAULT_ID: 0.200, "cudnn:a": 0.100, "cudnn:b": 0.110}
    assert fastest(times, {}) == "cudnn:a"  # no host times: the least device time
    host = {DEFAULT_ID: 20.0, "cudnn:a": 45.0, "cudnn:b": 21.0}  # a: 10 us faster, 25 us more host time
    assert fastest(times, host) == "cudnn:b"
    assert fastest({}, host) == DEFAULT_ID


def test_verify_mode_keeps_the_candidate_whose_kernel_and_launch_cost_least(shipped):
    """Measured: the fastest kernel takes 500 us more host time a call than PyTorch's default; the second, 5 us
    slower, launches as cheaply as PyTorch's: verify mode keeps the second."""
    selector = DefaultTakes(shipped, 1000.0, 0.0)
    problem = ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    ids = [c.candidate_id for c in selector.choose(problem, top_k=4) if c.candidate_id != DEFAULT_ID][:2]
    measurer = ScriptedMeasurer({DEFAULT_ID: (1.000, 20.0), ids[0]: (0.100, 520.0), ids[1]: (0.105, 20.0)})
    d = _verifying(selector, measurer=measurer).decide(problem, torch.device("cpu"))
    assert d.candidate_id == ids[1] and d.source == "measured"
    assert d.host_us[ids[0]] == 520.0  # every measured host time is kept for judging it again


def SMALL_GAIN(executor):  # noqa: N802 - reads as the selector it makes
    """The executor fixture's selector, predicting PyTorch's default at 100 us and GEMM at 20: a gain of 80 us a
    call, which probation judges (under ``probation_exempt_gain_us``)."""
    return Predicting(executor.selector.model, default_ms=0.1)


def _looking(busy, clock=None, settle_s: float = 0.0, **kw) -> dict:
    """Executor arguments: probation's looks answered by ``busy`` (see FakeDevice), counted ``settle_s`` after
    planning (default: even right after it); step trials timed by ``clock``."""
    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=settle_s))
    return dict(device_probe=FakeDevice(busy, clock=clock), policy=policy, **kw)


@pytest.mark.parametrize(
    ("busy_looks", "expected"),
    [
        ([True] * 8, "gemm"),  # the host is ahead: the device decides the step, so the switch pays
        ([True] * 6 + [False] * 2, "gemm"),  # busy in 6 of 8 looks: at min_busy_fraction
        ([True] * 5 + [False] * 3, "pytorch:device idle at the call"),
        ([False] * 8, "pytorch:device idle at the call"),  # host-bound: the device waits, a switch only costs host
    ],
)
def test_a_switch_is_made_only_where_the_device_is_busy_when_its_calls_arrive(executor, monkeypatch, busy_looks,
                                                                              expected):  # fmt: skip
    assert DEFAULT_POLICY.looks.probe_calls == 8 and DEFAULT_POLICY.looks.min_busy_fraction == 0.75
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(busy_looks))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # fully connected mode: GEMM is predicted to pay
    with hook.enabled(ex):
        for i in range(10):
            torch.testing.assert_close(F.conv2d(x, w), REF(x, w), atol=1e-4, rtol=1e-4)
            if i == 6:  # still looking: every call so far ran PyTorch's own convolution
                assert hook.stats() == {"pytorch:probing the device": 7}, hook.stats()
    (route,) = ex.route_list()
    assert route.probe is None and route.reasons == (expected,)
    assert hook.stats() == {"pytorch:probing the device": 7, expected: 3}, hook.stats()  # the 8th look decided


@pytest.mark.parametrize(("forward_busy", "backward_busy", "grad", "kept"), [
    (False, True, True, True),  # a step device-bound in its backward only: the switch (of its gradients too) pays
    (True, False, True, True),
    (False, False, True, False),
    (False, True, False, False),  # no gradient: the forward looks alone decide
])  # fmt: skip
def test_probation_looks_again_when_a_calls_gradient_comes_back(executor, monkeypatch, forward_busy, backward_busy,
                                                                grad, kept):  # fmt: skip
    """A gradient hook looks at the device as the backward reaches each call on probation; the switch is made where
    the forward looks or the backward looks find the device busy in min_busy_fraction of them."""
    # the forward looks at the input (64 channels), the backward at the output's gradient (32)
    busy = _looking(lambda t: forward_busy if t.shape[1] == 64 else backward_busy)
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **busy)
    x = torch.randn(4, 64, 6, 6, requires_grad=grad)
    w = torch.randn(32, 64, 6, 6, requires_grad=grad)
    with hook.enabled(ex):
        for _ in range(10):
            out = F.conv2d(x, w)
            if grad:
                out.sum().backward()
                torch.testing.assert_close(w.grad, x.detach().sum(0, keepdim=True).expand_as(w), atol=1e-3,
                                           rtol=1e-3)  # fmt: skip
                x.grad = w.grad = None
    (route,) = ex.route_list()
    assert route.probe is None and len(route.reasons) == (3 if grad else 1)
    idle = "pytorch:device idle at the call"
    if kept:  # the forward's switch and the input gradient's (the weight gradient's gain is under the threshold)
        assert route.kind != "native" and route.reasons[:2] == ("gemm", "gemm") and idle not in route.reasons
    else:
        assert route.kind == "native" and set(route.reasons) == {idle}, route.reasons
    looks = ex.looks
    assert (looks.calls, looks.back_calls) == (8, 7 if grad else 0)  # the 8th forward look decided


@pytest.mark.parametrize(("busy_convs", "idle_convs", "kept"), [(1, 0, True), (4, 1, True), (2, 1, False),
                                                                (1, 1, False)])  # fmt: skip
def test_a_switch_busy_at_its_own_calls_is_dropped_where_most_of_the_networks_calls_find_the_device_idle(
        executor, monkeypatch, busy_convs, idle_convs, kept):  # fmt: skip
    """``busy_convs`` convolutions' calls find the device busy, ``idle_convs`` others' find it idle: pooled, the
    looks must find it busy in min_network_busy_fraction (three quarters) of them for the busy ones' switches to be
    made (4 of 5: kept; 2 of 3, 1 of 2: dropped)."""
    assert DEFAULT_POLICY.looks.min_busy_fraction == 0.75  # of the network's looks pooled too
    by_batch = _looking(lambda x: x.shape[0] < 4 + busy_convs)
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **by_batch)
    w = torch.randn(32, 64, 6, 6)
    inputs = [torch.randn(4 + i, 64, 6, 6) for i in range(busy_convs + idle_convs)]  # fully connected mode: all switch
    with hook.enabled(ex):
        for _ in range(10):
            for x in inputs:
                F.conv2d(x, w)
    routes = {r.problem.n: r for r in ex.route_list()}
    for n in range(4, 4 + busy_convs):
        assert routes[n].kind == ("function" if kept else "native")  # NCHW fc on CPU: the Python path
        if not kept:
            assert routes[n].reasons == ("pytorch:device idle at most of the network's calls",)
    assert all(routes[n].reasons == ("pytorch:device idle at the call",) for n in routes if n >= 4 + busy_convs)


def test_looks_at_the_device_just_after_planning_do_not_count(executor, monkeypatch):
    # every look is "just after" the first call's plan
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(False, settle_s=3600.0))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        for _ in range(20):
            F.conv2d(x, w)
    (route,) = ex.route_list()
    assert route.probe is not None and route.probe.calls == 0 and route.kind != "native"
    assert hook.stats() == {"pytorch:probing the device": 20}


def test_looks_just_after_another_executors_planning_do_not_count(executor, monkeypatch):
    """Planning may measure, which synchronizes the device for every executor: the settling time after it holds
    for the looks of all of them."""
    clock = ManualClock()
    ex = _executor(selector=SMALL_GAIN(executor), live=False, clock=clock, **_looking(True, settle_s=1.0))
    other = _executor(selector=SMALL_GAIN(executor), live=False, clock=clock, **_looking(True, settle_s=1.0))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)  # planned now: its own look does not count
    (route,) = ex.route_list()
    assert route.probe is not None and route.probe.calls == 0
    clock.advance(2.0)  # that planning long past
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert route.probe.calls == 1
    with hook.enabled(other):
        F.conv2d(torch.randn(5, 64, 6, 6), w)  # another executor plans a signature of its own
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert route.probe.calls == 1


def test_without_a_device_to_look_at_the_switch_is_made_at_once(executor):
    """CPU tensors: ``device_busy`` cannot tell, so the decision stands from the first call."""
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(executor):
        F.conv2d(x, w)
    assert hook.stats() == {"gemm": 1}


@pytest.mark.parametrize(("name", "unit"), [("probe_calls", "calls"), ("verify", "candidates to time")])
@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_counts_of_the_executor_must_be_non_negative_integers(shipped, name, unit, value):
    with pytest.raises(ValueError, match=rf"^{name} must be a non-negative integer \({unit}\), got {value!r}$"):
        _executor(selector=shipped, **{name: value})


@pytest.mark.parametrize(("default_ms", "probed"), [(0.1, True), (1.24, True), (1.26, False), (2.0, False)])
def test_a_switch_known_to_save_much_device_time_is_made_without_probation(executor, monkeypatch, default_ms, probed):
    """GEMM predicted at a fifth of PyTorch's default: a gain of 0.8 x default_ms a call for the forward. At 1 ms
    (``probation_exempt_gain_us``) or more, the switch is made at once even though the device looks idle."""
    assert DEFAULT_POLICY.looks.exempt_gain_us == 1000.0
    ex = _executor(selector=Predicting(executor.selector.model, default_ms=default_ms), live=False,
                   **_looking(False))  # fmt: skip
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # no gradients: the forward alone
    with hook.enabled(ex):
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w), atol=1e-4, rtol=1e-4)
    (route,) = ex.route_list()
    plan = ex.plans.get(route.problem)
    assert plan.path == "gemm" and plan.gain_us == pytest.approx(800.0 * default_ms)
    assert (route.probe is not None) == probed
    assert hook.stats() == ({"pytorch:probing the device": 1} if probed else {"gemm": 1})


def test_probe_calls_zero_switches_at_once(executor, monkeypatch):
    # the looks would drop the switch
    ex = _executor(selector=executor.selector, live=False, probe_calls=0, device_probe=FakeDevice(False))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert hook.stats() == {"gemm": 1}


def _blocks(ex, x, w, count: int, padding: int = 1) -> list[bool]:
    """Run ``count`` ``enabled(ex)`` blocks of one conv call; per block, whether it was routed (F.conv2d replaced)."""
    routed = []
    for _ in range(count):
        with hook.enabled(ex):
            routed.append(F.conv2d is not REF)
            torch.testing.assert_close(F.conv2d(x, w, padding=padding), REF(x, w, padding=padding), atol=1e-4,
                                       rtol=1e-4)  # fmt: skip
    return routed


def test_an_executor_that_switches_nothing_steps_aside_after_quiet_blocks(shipped):
    """Every route passes through: after step_aside_after_blocks blocks that met nothing new, blocks leave PyTorch's
    F.conv2d in place (no call of theirs is routed or counted), except one in look_again_every_blocks; a new call
    signature met there makes every block routed again until it is quiet again."""
    assert DEFAULT_POLICY.trial.step_aside_after_blocks == 2 and DEFAULT_POLICY.trial.look_again_every_blocks == 50
    hook.reset_stats()
    ex = _executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
    x, w = torch.randn(2, 8, 10, 10), torch.randn(8, 8, 3, 3)
    assert _blocks(ex, x, w, 5) == [True, True, True, False, False]  # planned, then two quiet blocks
    assert sum(hook.stats().values()) == 3 and ex.blocks_aside == 2  # the calls of stepped-aside blocks: not routed
    (reason,) = ex.route_reasons()  # one signature, one direction (no gradients asked)
    assert reason.startswith("pytorch:") and ex.route_reasons()[reason] == 1
    routed = _blocks(ex, x, w, 100)
    assert [i for i, r in enumerate(routed) if r] == [47, 97]  # the 50th and 100th blocks aside look again
    assert sum(hook.stats().values()) == 5
    while ex.blocks_aside % 50 != 49:
        assert _blocks(ex, x, w, 1) == [False]
    assert _blocks(ex, torch.randn(2, 8, 12, 12), w, 1) == [True]  # the look again meets a new input size
    assert ex.blocks.quiet_blocks == 0 and len(ex.route_list()) == 2 and sum(ex.route_reasons().values()) == 2
    assert _blocks(ex, x, w, 3) == [True, True, False]  # routed until quiet again


def test_an_executor_with_a_switch_or_a_recorder_or_told_not_to_never_steps_aside(executor, shipped, tmp_path):
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # fully connected mode: GEMM predicted to pay
    assert all(_blocks(executor, x, w, 6, padding=0))
    assert {r.kind for r in executor.route_list()} == {"function"}  # switched (NCHW fc: the Python path)
    assert executor.route_reasons() == {"gemm": 1}
    x, w = torch.randn(2, 8, 10, 10), torch.randn(8, 8, 3, 3)
    for ex in (_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf, step_aside=False),
               _executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf,
                         record=tmp_path / "unseen.csv")):  # fmt: skip
        assert all(_blocks(ex, x, w, 6)) and ex.blocks_aside == 0


def test_a_block_inside_a_switched_on_hook_does_not_step_aside(shipped):
    """With the hook on for the process (enable()), F.conv2d is the hook's: a block keeps routing its calls."""
    ex = _executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
    x, w = torch.randn(2, 8, 10, 10), torch.randn(8, 8, 3, 3)
    hook.enable(_executor(selector=shipped, live=False, cache=False))
    try:
        assert all(_blocks(ex, x, w, 6)) and ex.blocks_aside == 0
    finally:
        hook.disable()


def test_under_enable_an_executor_with_nothing_to_switch_steps_aside_between_optimizer_steps(shipped):
    """enable() has no blocks: each optimizer step ends one. After two quiet steps the next ones run PyTorch's own
    F.conv2d; one step in look_again_every_blocks runs the hook's; disable() leaves PyTorch's."""
    ex = _executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
    model = torch.nn.Conv2d(8, 8, 3, padding=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 8, 10, 10)
    routed = []
    hook.enable(ex)
    try:
        for _ in range(60):
            routed.append(F.conv2d is not REF)
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    finally:
        hook.disable()
    assert F.conv2d is REF
    assert [i for i, r in enumerate(routed) if r] == [0, 1, 2, 52], routed  # planned, two quiet steps; a look again
    assert ex.blocks_aside == 58 and len(ex.route_list()) == 1  # every step after the first two quiet ones


def test_under_enable_a_switch_keeps_the_hook_on_between_optimizer_steps(executor):
    model = torch.nn.Conv2d(64, 32, 6)  # fully connected mode on a 6x6 input: GEMM predicted to pay
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 64, 6, 6)
    hook.enable(executor)
    try:
        for _ in range(5):
            assert F.conv2d is not REF
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    finally:
        hook.disable()
    assert executor.blocks_aside == 0 and "gemm" in executor.route_reasons()


def _measurer() -> ScriptedMeasurer:
    """Verify mode's measurer, standing in for the GPU's: GEMM lowering 0.1 ms, PyTorch's default 0.2 ms (a short call:
    the shortlist only, ``verify_whole_list_ms``), every other candidate 2 ms; ``timed`` lists the problems timed."""

    def time_of(cid):
        return (0.1 if cid.startswith("gemm:") else 0.2 if cid == DEFAULT_ID else 2.0), 5.0

    return ScriptedMeasurer(time_of)


def _looking_executor(shipped, selector=None, busy=False, **kw):
    """A verify-mode executor that times on the CPU with :func:`_measurer` (its GPU timer needs a GPU), its looks
    answered by ``busy``; its selector: ``selector``, or the shipped model with every problem unrecorded."""
    selector = UnrecordedPredicting(shipped) if selector is None else selector
    timer = _measurer()
    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=0.0))
    ex = _executor(selector=selector, live=False, verify=3, cache=False, measurer=timer, policy=policy,
                   device_probe=FakeDevice(busy, can_time=True), **kw)  # fmt: skip
    return ex, timer


@pytest.mark.parametrize("busy", [False, True])
def test_looking_first_times_a_new_problem_only_where_its_calls_find_the_device_busy(shipped, monkeypatch, busy):
    """``look_first``: the first ``probe_calls`` calls run PyTorch's own convolution and look at the device. Idle:
    the signature passes through, never timed. Busy: the call after the looks takes PyTorch's path too and forgets
    the route, the next one times the shortlist and switches (GEMM, timed fastest) without a second probation."""
    hook.reset_stats()
    ex, timer = _looking_executor(shipped, busy=busy, look_first=True)
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # fully connected mode: GEMM is worth timing
    with hook.enabled(ex):
        for i in range(12):
            torch.testing.assert_close(F.conv2d(x, w), REF(x, w), atol=1e-4, rtol=1e-4)
            if i == 6:
                assert timer.timed == [] and ex.route_reasons() == {"pytorch:looking before timing": 1}
    (route,) = ex.route_list()
    assert route.probe is None and route.key is None
    if busy:
        assert len(timer.timed) == 1 and ex.measured_problems == 1
        assert route.reasons == ("gemm",)
        assert hook.stats() == {"pytorch:probing the device": 8, "gemm": 4}, hook.stats()  # 8 looks, then timed
    else:
        assert timer.timed == [] and ex.measured_problems == 0
        assert route.reasons == ("pytorch:device idle at the call",)
        assert hook.stats() == {"pytorch:probing the device": 7, "pytorch:device idle at the call": 5}


def test_looking_first_is_on_by_default_and_skipped_where_nothing_would_be_timed(shipped, monkeypatch):
    """Verify mode looks first by default; with ``look_first=False`` it times on the first call; looking first, a
    signature whose problem would not be timed (here: predicted too short to pay) is decided at once, without
    looks."""
    assert _looking_executor(shipped)[0].look_first is True
    ex, timer = _looking_executor(shipped, look_first=False)
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert len(timer.timed) == 1
    quick, quick_timer = _looking_executor(shipped, selector=DefaultTakes(shipped, 1.0), look_first=True)
    with hook.enabled(quick):
        F.conv2d(x, w)
    (route,) = quick.route_list()
    assert route.probe is None and route.reasons != ("pytorch:looking before timing",) and quick_timer.timed == []


def test_looking_first_without_a_device_to_look_at_times_at_the_next_call(shipped, monkeypatch):
    """CPU tensors: the device cannot be looked at, so the shortlist is timed at the second call."""
    hook.reset_stats()
    ex, timer = _looking_executor(shipped, busy=lambda t: None, look_first=True)  # CPU tensors: no answer
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
        assert timer.timed == [] and ex.route_list() == []
        F.conv2d(x, w)
    assert len(timer.timed) == 1 and hook.stats() == {"pytorch:probing the device": 1, "gemm": 1}


def test_looking_first_skips_the_looks_where_the_predicted_gain_is_exempt_from_probation(shipped, monkeypatch):
    """A fully connected mode convolution predicted to save 1.6 ms a call (PyTorch's default 2 ms, GEMM 0.4):
    timed at its first call even though the device looks idle, as probation would switch it at once."""
    ex, timer = _looking_executor(shipped, selector=UnrecordedPredicting(shipped, default_ms=2.0), look_first=True)
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert len(timer.timed) == 1


class _CountingChoices(UnrecordedPredicting):
    """... counting the shortlists ranked (``choose``)."""

    def __init__(self, sel: Selector, default_ms: float):
        super().__init__(sel, default_ms=default_ms)
        self.ranked = 0

    def choose(self, *args, **kwargs):
        self.ranked += 1
        return super().choose(*args, **kwargs)


@pytest.mark.parametrize(("default_ms", "ranked_before_looks"), [(0.5, False), (2.0, True)])
def test_looking_first_ranks_no_shortlist_where_no_gain_could_skip_the_looks(shipped, default_ms, ranked_before_looks):
    """A new signature whose default is predicted shorter than the gain that exempts from probation (1 ms) looks at
    the device without ranking its shortlist (a multi-scale network meets every layer anew at each input size and
    most never finish looking); a longer one ranks it, as its gain may be exempt (then timed at once)."""
    selector = _CountingChoices(shipped, default_ms)
    ex, timer = _looking_executor(shipped, selector=selector, look_first=True)
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert (selector.ranked > 0) == ranked_before_looks
    assert (ex.route_reasons() == {"pytorch:looking before timing": 1}) != ranked_before_looks
    assert len(timer.timed) == int(ranked_before_looks)


class _ByDirection(UnrecordedPredicting):
    """PyTorch's default predicted at 2 ms in the forward (GEMM at 0.4: a gain probation exempts) and 1 ms in the
    gradients (GEMM at 0.2: a gain it judges)."""

    def default_ms(self, problem):
        return 2.0 if problem.direction == "fwd" else 1.0


def test_looking_first_skips_a_signature_one_of_whose_directions_probation_would_exempt(shipped, monkeypatch):
    """The forward's predicted gain (1.6 ms) is exempt, the input gradient's (0.8 ms) is not: the signature is timed
    and switched at once rather than looking first, which could drop the forward's switch with the rest."""
    ex, timer = _looking_executor(shipped, selector=_ByDirection(shipped), look_first=True)
    x = torch.randn(4, 64, 6, 6, requires_grad=True)
    w = torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w).sum().backward()
    assert len(timer.timed) == 2  # the forward and the input gradient, at the first call
    (route,) = ex.route_list()
    assert "pytorch:looking before timing" not in route.reasons and route.key is None


class _CountingRecords(Preferring):
    """The shipped model as it is, counting the lookups of its records' rows (one per decision of a recorded
    problem)."""

    def __init__(self, sel):
        super().__init__(sel, prefix="none")
        self.lookups = 0

    def choose(self, problem, max_workspace_bytes=None, deterministic=False, top_k=1, live=False):
        return self._sel.choose(problem, max_workspace_bytes, deterministic, top_k, live)

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return self._sel.predicted_time_ms(problem, candidate_ids, rows=rows)

    @property
    def catalogue(self):
        owner, catalogue = self, self._sel.catalogue

        class Counted:
            def __getattr__(self, name):
                return getattr(catalogue, name)

            def rows(self, key):
                owner.lookups += 1
                return catalogue.rows(key)

        return Counted()


def test_looking_first_decides_a_recorded_direction_once(shipped, monkeypatch):
    """Looking first asks whether a recorded direction's known gain exempts its signature; the plan then takes that
    decision rather than deciding the direction a second time."""
    ex, timer = _looking_executor(shipped, selector=_CountingRecords(shipped), look_first=True)
    x, w = torch.randn(128, 1024, 3, 3), torch.randn(160, 1024, 3, 3)  # recorded in the shipped records
    assert shipped.is_recorded(ConvProblem(n=128, c=1024, k=160, h=3, w=3, r=3, s=3))
    with hook.enabled(ex):
        for _ in range(3):
            F.conv2d(x, w)
    assert ex.selector.lookups == 1 and timer.timed == []


def test_cudnn_space_names_an_unknown_heuristic_mode():
    from algosel.spaces import get_space

    with pytest.raises(ValueError, match="unknown heuristic mode 'instant' \\(known: a, b, fallback\\)"):
        get_space("cudnn").enumerate(ConvProblem(n=1, c=8, k=8, h=8, w=8, r=3, s=3), modes=("a", "instant"))


class _BlockClock:
    """The step trial's clock on the CPU: a block's span is ``on_ms`` or ``off_ms`` by the arm the trial gives it
    (two marks a block, ABBA pairs: :meth:`StepTrial.arm`)."""

    def __init__(self, on_ms, off_ms):
        self.marks, self.on_ms, self.off_ms = 0, on_ms, off_ms

    def mark(self):
        self.marks += 1
        return self.marks - 1

    def span_ms(self, start, end):
        from algosel.runtime.trial import StepTrial

        return self.on_ms if StepTrial.arm(None, start // 2) == "on" else self.off_ms


@pytest.mark.parametrize(("busy_looks", "on_ms", "off_ms", "verdict", "kept"), [
    (8, 0.95, 1.0, "switches faster", True),
    (8, 1.0, 1.0, "pytorch's as fast", False),  # as fast: PyTorch's own, at no host cost
    (3, 0.95, 1.0, "switches faster", True),  # busy at 3 of 8 looks: under the three quarters, kept for the trial
    (1, 0.95, 1.0, None, False),  # at 1 of 8, under the quarter: dropped by the looks, nothing to try
])  # fmt: skip
def test_a_step_trial_keeps_the_switches_only_where_blocks_with_them_are_faster(
        executor, monkeypatch, busy_looks, on_ms, off_ms, verdict, kept):  # fmt: skip
    """Once probation has decided and a block met nothing new, the next 16 blocks alternate (ABBA pairs) between
    the switches and PyTorch's own F.conv2d (stepping aside), and the switches stay only where their blocks' spans
    were shorter by the margin in 7 of 8 pairs."""
    looks = iter([True] * busy_looks + [False] * (8 - busy_looks))
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(looks, _BlockClock(on_ms, off_ms)))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # fully connected mode: GEMM is predicted to pay
    routed = _blocks(ex, x, w, 8, padding=0)  # the 8th call's look decides
    (route,) = ex.route_list()
    assert all(routed) and route.probe is None and route.looked.busy == busy_looks
    assert (route.kind != "native") == (busy_looks >= 2)
    routed = _blocks(ex, x, w, 17, padding=0)
    assert ex.trial_verdict == verdict and ex.trial is None
    if verdict is None:  # no switch: steps aside as before
        assert routed[2:] == [False] * 15 and route.reasons == ("pytorch:device idle at the call",)
        return
    # 16 blocks of the trial (True: with the switches), then the verdict at the 17th block's start
    assert routed[:16] == [True, False, False, True] * 4
    assert math.isclose(ex.trial_ratio, on_ms / off_ms)
    assert (route.kind != "native") == kept
    if kept:
        assert routed[16] and route.reasons == ("gemm",)
    else:  # every route PyTorch's: it steps aside from the next block on
        assert not routed[16] and route.reasons == ("pytorch:step as fast without the switches",)
        assert ex.deciding() == 0


def test_a_step_trial_that_cannot_tell_leaves_probations_three_quarters_to_decide(executor, monkeypatch):
    """Blocks unlike each other (spans scattered): the verdict is probation's own at its three quarters."""
    calls = {"batch 4": 0}

    def busy(x):  # batch 4: busy at its first 3 calls of 8; the three others: at every call
        calls["batch 4"] += x.shape[0] == 4
        return x.shape[0] != 4 or calls["batch 4"] <= 3

    spans = iter([1.0, 2.0, 0.5, 1.0, 3.0, 1.0, 0.4, 1.0] * 20)
    clock = _BlockClock(0, 0)
    clock.span_ms = lambda start, end: next(spans)
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(busy, clock))
    w = torch.randn(32, 64, 6, 6)
    inputs = [torch.randn(n, 64, 6, 6) for n in (4, 5, 6, 7)]  # four fully connected mode convolutions
    for _ in range(25):
        with hook.enabled(ex):
            for x in inputs:
                F.conv2d(x, w)
    assert ex.trial_verdict == "inconclusive"
    by_batch = {r.problem.n: r for r in ex.route_list()}
    # pooled, 27 of 32 looks busy: above the three quarters
    assert by_batch[4].kind == "native" and by_batch[4].reasons == ("pytorch:device idle at the call",)
    assert all(by_batch[n].kind != "native" and by_batch[n].reasons == ("gemm",) for n in (5, 6, 7))


def test_a_new_call_signature_during_a_step_trial_starts_it_again_once_quiet(executor, monkeypatch):
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(True, _BlockClock(0.9, 1.0)))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    _blocks(ex, x, w, 8, padding=0)
    _blocks(ex, x, w, 4, padding=0)
    assert ex.trial is not None and ex.trial.blocks == 4 and ex.deciding() == 1
    _blocks(ex, torch.randn(6, 64, 6, 6), w, 1, padding=0)  # new: on probation, the trial abandoned
    assert ex.trial is None and ex.deciding() == 2
    _blocks(ex, x, w, 20, padding=0)  # the new signature is not called: never decided, so no trial
    assert ex.trial is None and ex.trial_verdict is None


def test_without_recurring_blocks_there_is_no_trial_and_probation_keeps_its_three_quarters(executor, monkeypatch):
    """One enabled() around every call (or patch_model): no block has ended, so no trial can judge; the looks
    decide at min_busy_fraction as before."""
    looks = iter([True] * 3 + [False] * 5)
    ex = _executor(selector=SMALL_GAIN(executor), live=False, **_looking(looks, _BlockClock(0.9, 1.0)))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        for _ in range(10):
            F.conv2d(x, w)
    (route,) = ex.route_list()
    assert route.kind == "native" and route.reasons == ("pytorch:device idle at the call",)
    assert ex.busy_fractions() == (DEFAULT_POLICY.trial.busy_fraction,) * 2  # now one has
