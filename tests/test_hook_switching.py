"""Switching the runtime hook on and off on CPU: ``enabled()`` blocks, ``enable()`` and ``patch_model`` leave
PyTorch's conv2d as it was, share one executor per configuration and reuse each call's route; torch.compile keeps
the hooked convolutions in one graph; record mode keeps the unrecorded problems met; the executor's counts are
checked."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from support import CPU_AS_CUDA, REF, gemm_paying_executor, hook_executor

from algosel.problem import ConvProblem
from algosel.runtime import hook


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here), with a time predictor that makes GEMM lowering pay."""
    return gemm_paying_executor(shipped)


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
    ex = hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)  # nothing switched
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
    ex = hook_executor(selector=shipped, live=False, record=path)
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
    assert hook_executor(selector=shipped, live=False).recorder.path.name == "from_env.csv"


@pytest.mark.parametrize(("name", "unit"), [("probe_calls", "calls"), ("verify", "candidates to time")])
@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_counts_of_the_executor_must_be_non_negative_integers(shipped, name, unit, value):
    with pytest.raises(ValueError, match=rf"^{name} must be a non-negative integer \({unit}\), got {value!r}$"):
        hook_executor(selector=shipped, **{name: value})
