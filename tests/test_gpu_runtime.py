"""GPU tests of the runtime: measured decisions and their persistent cache, the compiled path (cuDNN plans in
C++), CUDA graph capture and replay, torch.compile, and the torchvision networks that once crashed under the hook.

Skipped without CUDA. The compiled path must be built first (``algosel build-ext``); its tests fail, rather than
skip, where ``ALGOSEL_REQUIRE_NATIVE=1`` says it should be there.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

from algosel.candidates import DEFAULT_ID
from algosel.operands import relative_error
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy, VerifyTimer
from algosel.runtime.standins import CudaWithoutTrials, Preferring
from algosel.testing import exact_calibration

#: These tests exercise the routes themselves: their switches are made on the first call, not after probation looked
#: at the device, and kept without a step trial (the tests of those two give their own arguments); the rule switches
#: untimed on the stand-in selectors' predictions, taken as exact (verify mode still times).
AT_ONCE = {"probe_calls": 0, "device_probe": CudaWithoutTrials(), "calibration": exact_calibration(),
           "rule_times": False}  # fmt: skip


def _prefer(sel, space: str, default_ms: float = 1.0) -> Preferring:
    """The shipped selector making one space's candidates ten times faster than PyTorch's default and ranking them
    first, every problem unrecorded and no host costs: the runtime's routing is what these tests exercise, not the
    model's predictions or ranks."""
    return Preferring(sel, space, 0.1, default_ms, recorded=False, host_costs=False)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def shipped():
    from algosel.learn.models import load_default

    return load_default()


@pytest.fixture(scope="module")
def ext():
    from algosel.runtime import native

    module = native.load()
    if module is None:
        if os.environ.get("ALGOSEL_REQUIRE_NATIVE") == "1":
            pytest.fail(f"the compiled path should be built here: {native.status()}")
        pytest.skip(native.status())
    return module


def _directions(ex, route):
    """The problems of a route's directions that have a plan (its forward, and the gradients it computed)."""
    return [p for p in ex.directions_of(route.problem).values() if p in ex.plans]


def _step(model, x):
    y = model(x)
    g = torch.ones_like(y)
    grads = torch.autograd.grad(y, [x, *model.parameters()], g)
    return y, grads


def _close(a, b, tol=5e-3):
    return relative_error(a, b.double()) <= tol


def _cudnn_model(dtype=torch.float16, channels_last=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
    ).cuda().to(dtype)  # fmt: skip
    x = torch.randn(8, 32, 28, 28, device="cuda", dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x.requires_grad_()


def test_the_compiled_path_runs_cudnn_plans_forward_and_backward(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = _cudnn_model()
    y_ref, g_ref = _step(model, x)
    ex = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path)
    hook.reset_stats()
    with hook.enabled(ex):
        y, grads = _step(model, x)
    kinds = {r.kind for r in ex.route_list()}
    assert kinds == {"compiled"}, kinds
    assert _close(y, y_ref) and all(_close(a, b) for a, b in zip(grads, g_ref))
    assert hook.stats().get("cudnn", 0) >= 5, hook.stats()  # 2 forwards, 1 dx (the first conv's x needs one), 2 dw


class PassingThrough(Preferring):
    """Every candidate predicted as fast as PyTorch's default: every convolution passes through."""

    def __init__(self, sel, space: str):
        super().__init__(sel, space, recorded=False, host_costs=False)

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return dict.fromkeys(candidate_ids, 1.0)


def test_the_dispatch_table_runs_planned_calls_in_cpp_with_pytorchs_results(shipped, ext, tmp_path, monkeypatch):
    from algosel.runtime import hook

    torch.manual_seed(0)
    # Strict float32 (no TF32), so that any algorithm PyTorch picks gives float32's result within rounding.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    x = torch.randn(4, 16, 20, 20, device="cuda", requires_grad=True)
    w = torch.randn(32, 16, 3, 3, device="cuda", requires_grad=True)
    b = torch.randn(32, device="cuda")
    ref = F.conv2d(x, w, b, 1, 1)
    (ref_gx,) = torch.autograd.grad(ref.sum(), x)
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    hook.reset_stats()
    with hook.enabled(ex):
        outs = [F.conv2d(x, w, b, 1, 1) for _ in range(3)]  # the first plans, the next two run in C++
        y = F.conv2d(x, w, b, (1, 1), [1, 1])  # another spelling of the same signature
        with torch.autocast("cuda", dtype=torch.float16):
            half = F.conv2d(x, w, b, 1, 1)  # autocast is part of the signature: planned apart
    assert ex.dispatch.fast_run is not None and len(ex.dispatch_table()) == 2, len(ex.dispatch_table())
    slots = [s for r in ex.route_list() for _, s in r.slots]
    assert sorted(slots) == [0, 1]  # one slot each, the two spellings sharing theirs
    assert sum(ex.dispatch_table().calls(s) for s in slots) == 3  # calls 2, 3 and 4 ran in C++
    # The first call ran PyTorch's conv2d from Python, the next three from C++: the same plan, the same bits.
    assert all(torch.equal(o, outs[0]) for o in outs) and torch.equal(y, outs[0])
    assert _close(outs[0], ref, 1e-5)
    assert half.dtype == torch.float16 and _close(half, ref, 1e-2)
    (gx,) = torch.autograd.grad(outs[-1].sum(), x)
    assert _close(gx, ref_gx, 1e-5)
    stats = hook.stats()
    assert sum(stats.values()) == 15 and all(k.startswith("pytorch:") for k in stats), stats  # 5 calls x 3 dirs


def test_the_dispatch_table_leaves_tensor_subclasses_to_python(shipped, ext, tmp_path):
    from algosel.runtime import hook

    seen = []

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(2, 8, 10, 10, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(ex):
        F.conv2d(x, w)
        F.conv2d(x, w)  # held by the table now
        out = F.conv2d(x.as_subclass(Traced), w)
    assert isinstance(out, Traced) and seen  # its __torch_function__ ran: the call went through Python


def test_the_dispatch_table_runs_compiled_routes(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = _cudnn_model()
    y_ref, g_ref = _step(model, x)
    ex = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(ex):
        _step(model, x)
        hook.reset_stats()
        y, grads = _step(model, x)  # every call from the table
    held = [(r.kind, ex.dispatch_table().calls(s)) for r in ex.route_list() for _, s in r.slots]
    assert held and all(kind == "compiled" and calls == 1 for kind, calls in held), held
    assert _close(y, y_ref) and all(_close(a, b) for a, b in zip(grads, g_ref))
    assert hook.stats().get("cudnn", 0) >= 5, hook.stats()


def test_f_conv2d_is_the_compiled_dispatch_while_the_hook_is_on_in_this_thread_only(shipped, ext, tmp_path):
    import threading

    from algosel.runtime import hook

    x, w = torch.randn(2, 8, 12, 12, device="cuda"), torch.randn(8, 8, 3, 3, device="cuda")
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    other = {}

    def elsewhere():  # a thread outside the block: F.conv2d is patched process-wide, but routes nothing here
        hook.reset_stats()
        other["y"] = F.conv2d(x, w, padding=1)
        other["stats"] = hook.stats()

    with hook.enabled(ex):
        assert F.conv2d is ext.conv2d
        F.conv2d(x, w, padding=1)
        hook.reset_stats()
        y = F.conv2d(x, w, None, padding=1)  # keywords too
        held, from_table = hook.stats(), ex.dispatch_table().calls(0)
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    assert F.conv2d is torch.conv2d
    assert sum(held.values()) == 1 and from_table == 1, held
    assert other["stats"] == {} and torch.equal(other["y"], y)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_dispatch_table_runs_gemm_routes_as_gemm_conv_does(shipped, ext, tmp_path, layout):
    from algosel.runtime import hook
    from algosel.runtime.call import call_problem
    from algosel.spaces.gemm import gemm_conv

    torch.manual_seed(0)
    cases = [(torch.randn(16, 64, 6, 6), torch.randn(96, 64, 6, 6))]  # fully connected mode
    if layout == "nhwc":
        cases.append((torch.randn(8, 64, 14, 14), torch.randn(32, 64, 1, 1)))  # 1x1, one product in NHWC
    ex = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "gemm"), cache=tmp_path)
    for x_cpu, w_cpu in cases:
        x, w, b = x_cpu.cuda().half(), w_cpu.cuda().half(), torch.randn(w_cpu.shape[0], device="cuda").half()
        if layout == "nhwc":
            x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        for t in (x, w, b):
            t.requires_grad_()
        with hook.enabled(ex):
            first = F.conv2d(x, w, b)
            again = F.conv2d(x, w, b)  # from the table
        problem, _ = call_problem(x, w, 1, 0, 1, 1, torch.float16)
        expected = gemm_conv(problem, x, w, b)
        assert torch.equal(first, expected) and torch.equal(again, expected)
        assert again.stride() == expected.stride()
        dy = torch.randn_like(expected)
        grads = torch.autograd.grad(again, (x, w, b), dy)
        grads_ref = torch.autograd.grad(F.conv2d(x, w, b), (x, w, b), dy)
        assert all(g.shape == r.shape and _close(g, r) for g, r in zip(grads, grads_ref))
        with hook.enabled(ex):
            y = F.conv2d(x, w, b)
        assert torch.equal(torch.relu_(y), torch.relu(expected))  # an in-place op on the output is allowed
    held = [(r.kind, ex.dispatch_table().calls(s)) for r in ex.route_list() for _, s in r.slots]
    assert len(held) == len(cases) and all(kind == "gemm" and calls == 2 for kind, calls in held), held


def test_cached_decisions_and_plans_need_no_planning_in_a_new_executor(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = _cudnn_model()
    first = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(first):
        _step(model, x)
    second = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(second):
        y, grads = _step(model, x)
    plans = [second.plans.get(p) for r in second.route_list() for p in _directions(second, r)]
    assert plans and all(p.runner is None and p.native_id >= 0 for p in plans if p.path == "cudnn")
    y_ref, g_ref = _step(model, x)
    assert _close(y, y_ref) and all(_close(a, b) for a, b in zip(grads, g_ref))


def test_double_backward_through_the_compiled_path(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = _cudnn_model(torch.float32, channels_last=False)

    def second(m):
        (gx,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), list(m.parameters()))

    ref = second(model)
    with hook.enabled(hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path)):
        got = second(model)
    assert all(_close(a, b, 1e-2) for a, b in zip(got, ref))


def test_double_backward_through_the_compiled_gemm_route(shipped, ext, tmp_path, monkeypatch):
    from algosel.runtime import hook

    # float32 GEMM routes need cuBLAS's TF32 switch as the records measured them (TF32, as the convolutions' default)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.Tanh(), torch.nn.Conv2d(32, 8, 7)).cuda()
    model = model.to(memory_format=torch.channels_last)  # 1x1 in NHWC, then fully connected mode
    x = torch.randn(4, 16, 7, 7, device="cuda").contiguous(memory_format=torch.channels_last).requires_grad_()

    def second(m):
        (gx,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), list(m.parameters()))

    ref = second(model)
    ex = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "gemm"), cache=tmp_path)
    with hook.enabled(ex):
        second(model)  # plans
        got = second(model)  # from the table
    assert {r.kind for r in ex.route_list()} == {"gemm"}
    assert all(_close(a, b, 1e-2) for a, b in zip(got, ref))


def test_verify_mode_measures_once_and_a_new_process_reuses_the_measurements(tmp_path):
    from algosel.runtime import hook

    x = torch.randn(256, 256, 6, 6, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(1024, 256, 6, 6, device="cuda", dtype=torch.float16, requires_grad=True)
    ex = hook.Executor(**AT_ONCE, verify=3, cache=tmp_path)
    hook.reset_stats()
    with hook.enabled(ex):
        F.conv2d(x, w).sum().backward()
    assert ex.measured_problems == 3 and hook.stats().get("gemm") == 3, hook.stats()  # fully connected: GEMM wins
    again = hook.Executor(**AT_ONCE, verify=3, cache=tmp_path)
    with hook.enabled(again):
        F.conv2d(x, w).sum().backward()
    assert again.measured_problems == 0
    sources = {d.source for d in again.runtime_cache().decisions()}
    assert sources == {"measured"}


@pytest.mark.parametrize("device_waits", [True, False])
def test_looking_first_times_only_where_the_device_is_busy_at_the_calls(tmp_path, device_waits):
    """``look_first`` on a real stream: a fully connected float16 convolution (forward only) whose calls come after
    a synchronization is never timed and passes through; queued behind a long kernel, it is timed once, after its
    8 looks, and switched without a second probation."""
    import dataclasses

    from algosel.runtime import hook

    # looking takes probe_calls (8) calls; whatever gain is predicted, none is exempt from them
    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=0.0, exempt_gain_us=math.inf))
    x = torch.randn(256, 256, 6, 6, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, 256, 6, 6, device="cuda", dtype=torch.float16)
    ex = hook.Executor(verify=3, cache=tmp_path, look_first=True, policy=policy, device_probe=CudaWithoutTrials())
    hook.reset_stats()
    with hook.enabled(ex), torch.no_grad():
        for _ in range(12):
            if device_waits:
                torch.cuda.synchronize()
            else:
                torch.cuda._sleep(2_000_000)  # ~1 ms of spinning ahead of the call on its stream
            y = F.conv2d(x, w)
    torch.cuda.synchronize()
    assert _close(y, F.conv2d(x, w), 1e-2)
    (route,) = ex.route_list()
    seen = (ex.measured_problems, route.kind, route.reasons, hook.stats(), ex.looks.calls, ex.looks.busy)
    assert route.probe is None and route.key is None, seen
    if device_waits:
        assert ex.measured_problems == 0 and route.reasons == ("pytorch:device idle at the call",), seen
    else:
        assert ex.measured_problems == 1 and route.kind != "native", seen
    assert hook.stats()["pytorch:probing the device"] == (7 if device_waits else 8)


def test_cuda_graph_replay_gives_the_eager_results(shipped, tmp_path):
    from algosel.runtime import hook

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 16, 28))
    model = model.cuda().half()
    x = torch.randn(16, 32, 28, 28, device="cuda", dtype=torch.float16)
    ex = hook.Executor(**AT_ONCE, selector=_prefer(shipped, "gemm"), cache=tmp_path)
    with hook.enabled(ex):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):  # warm-up plans every convolution outside the capture
                eager = model(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        expected = model(x)
    assert "gemm" in {ex.plans.get(p).path for r in ex.route_list() for p in _directions(ex, r)}
    assert _close(captured, expected) and eager.shape == captured.shape


def test_torch_compile_keeps_the_convolutions_in_the_graph_on_gpu(shipped, tmp_path):
    from algosel.runtime import hook

    model, x = _cudnn_model()
    ref = model(x)
    torch._dynamo.reset()
    hook.enable(hook.Executor(**AT_ONCE, selector=_prefer(shipped, "cudnn"), cache=tmp_path))
    try:
        explained = torch._dynamo.explain(model)(x)
        compiled = torch.compile(model)
        y = compiled(x)
    finally:
        hook.disable()
        torch._dynamo.reset()
    assert explained.graph_break_count == 0, explained.break_reasons
    assert _close(y, ref)


@pytest.mark.parametrize(
    ("name", "amp"), [("efficientnet_b0", False), ("efficientnet_v2_s", False), ("squeezenet1_1", True)]
)
def test_networks_that_crashed_under_the_hook_train(shipped, name, amp, tmp_path):
    """An in-place activation after a hooked conv raised `Output 0 of _Conv2dFunctionBackward is a view`; every
    space is forced in turn so that the Python Function, the GEMM and the compiled paths all run."""
    torchvision = pytest.importorskip("torchvision")
    from algosel.runtime import hook

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).cuda()
    x = torch.randn(4, 3, 128, 128, device="cuda")
    if amp:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)

    def step():
        torch.manual_seed(1)  # the same dropout masks in every step
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = model(x).float().square().mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss_ref, grads_ref = step()
    for space in ("gemm", "cudnn"):
        hook.reset_stats()
        with hook.enabled(hook.Executor(**AT_ONCE, selector=_prefer(shipped, space), cache=tmp_path / space)):
            loss, grads = step()
        assert torch.isfinite(loss) and abs(float(loss) - float(loss_ref)) <= 2e-2 * abs(float(loss_ref)) + 1e-6
        assert len(grads) == len(grads_ref)
        assert not any(k.startswith("fallback") for k in hook.stats()), hook.stats()


def test_predict_measure_times_the_shortlist_and_puts_the_fastest_first():
    import algosel

    choices = algosel.predict(n=64, c=256, k=512, h=6, w=6, r=6, s=6, dtype="float16", measure=3, top_k=4)
    times = [c.measured_time_ms for c in choices if c.measured_time_ms is not None]
    assert len(times) >= 2 and times == sorted(times)
    assert DEFAULT_ID in {c.candidate_id for c in choices} and choices[0].source == "measured"


@pytest.mark.parametrize(("device_waits", "default_ms"), [(False, 0.1), (True, 0.1), (True, 2.0)])
def test_a_switch_is_made_where_the_device_is_busy_and_dropped_where_it_waits(shipped, ext, tmp_path,
                                                                              device_waits, default_ms):  # fmt: skip
    """Probation (executor module docstring) on a real stream: calls queued behind a long kernel find the device
    busy and get their switch; calls after a synchronization find it idle and keep PyTorch's path. A switch
    predicted to save 1.8 ms a call (``policy.looks.exempt_gain_us``) is made at once, the device idle or not."""
    import dataclasses

    from algosel.runtime import hook

    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=0.0))  # probe_calls: 8
    model, x = _cudnn_model()
    x = x.detach()
    ex = hook.Executor(policy=policy, device_probe=CudaWithoutTrials(), selector=_prefer(shipped, "cudnn", default_ms),
                       cache=tmp_path, calibration=exact_calibration(), rule_times=False)  # gain: 90 or 1800 us
    exempt = 900 * default_ms >= policy.looks.exempt_gain_us
    hook.reset_stats()
    with hook.enabled(ex), torch.no_grad():
        for _ in range(12):
            y = x
            for layer in model:
                if isinstance(layer, torch.nn.Conv2d):
                    if device_waits:
                        torch.cuda.synchronize()
                    else:
                        torch.cuda._sleep(2_000_000)  # ~1 ms of spinning ahead of the call on its stream
                y = layer(y)
    torch.cuda.synchronize()
    assert _close(y, model(x).detach())
    s = hook.stats()
    if exempt:
        assert set(s) == {"cudnn"}, s  # switched from the first call: no call probed
        assert all(r.kind == "compiled" and r.probe is None for r in ex.route_list())
        return
    if device_waits:
        assert set(s) == {"pytorch:probing the device", "pytorch:device idle at the call"}, s
        assert all(r.kind == "native" for r in ex.route_list())
    else:
        assert s.get("cudnn", 0) >= 2 and all(r.kind == "compiled" for r in ex.route_list()), s
        assert ex.dispatch.fast_run is not None and len(ex.dispatch_table()) == 2  # held in the C++ table once decided
    assert s["pytorch:probing the device"] == 2 * 7  # two convolutions, 7 calls each before the 8th decides


def test_the_step_trials_clock_reads_block_spans_on_the_devices_timeline():
    """A span is read once the device has passed its end (None before), and it measures the device's work: a kernel
    spinning four times as long spans about four times as long."""
    from algosel.runtime.device import CudaDevice

    clock = CudaDevice().block_clock(torch.device("cuda"))
    torch.cuda.synchronize()
    spans = []
    for cycles in (4_000_000, 16_000_000):
        start = clock.mark()
        torch.cuda._sleep(cycles)
        end = clock.mark()
        if cycles == 16_000_000:
            assert clock.span_ms(start, end) is None  # the device is still spinning
        torch.cuda.synchronize()
        spans.append(clock.span_ms(start, end))
    assert spans[0] > 0.5 and 2.5 < spans[1] / spans[0] < 5.5, spans


def test_a_step_trial_drops_switches_that_do_not_shorten_device_bound_blocks(shipped, ext, tmp_path):
    """Blocks whose device time is a long kernel beside two small convolutions: with the switches (cuDNN plans
    through the compiled path and its C++ table) and without, the spans differ by far less than the margin, so the
    trial drops them; the routes then run as PyTorch's (a new table), and the executor steps aside."""
    from algosel.runtime import hook
    from algosel.runtime.trial import DROP

    model, x = _cudnn_model()
    x = x.detach()
    ex = hook.Executor(probe_calls=0, selector=_prefer(shipped, "cudnn", 0.1), cache=tmp_path)
    table_before = None
    with torch.no_grad():
        for block in range(2 + 2 * 8 + 1):
            if block == 2 + 2 * 8:
                # the host ran ahead of the device by every block so far (nothing synchronizes): the verdict waits
                # for the device to pass the last block's end
                assert ex.trial is not None and ex.trial_verdict is None
                torch.cuda.synchronize()
            with hook.enabled(ex):
                torch.cuda._sleep(10_000_000)  # ~5 ms: the device decides the block's time
                y = model(x)
            if block == 2:  # planned in the first block, quiet in the second: the trial's first block
                assert all(r.kind == "compiled" for r in ex.route_list()) and ex.trial is not None
                table_before = ex.dispatch_table()
    torch.cuda.synchronize()
    assert ex.trial_verdict == DROP, (ex.trial_verdict, ex.trial_ratio)
    assert 0.99 < ex.trial_ratio < 1.01
    assert all(r.kind == "native" for r in ex.route_list())
    assert set(ex.route_reasons()) == {"pytorch:step as fast without the switches"}
    assert ex.dispatch_table() is not table_before and ex.blocks_aside > 0
    assert _close(y, model(x))


def test_verify_modes_measurer_takes_the_policys_timer_and_slow_build_bound():
    import dataclasses

    from algosel.runtime.verify import runtime_measurer

    policy = dataclasses.replace(DEFAULT_POLICY, timer=VerifyTimer(slow_build_s=0.2))
    sweeper = runtime_measurer(policy)
    timer = sweeper.timer
    assert (timer.budget_ms, timer.min_repeats, timer.max_repeats) == (1.0, 3, 5)
    assert (timer.slow_factor, timer.single_factor) == (1.25, 1.25)
    assert sweeper.slow_build_s == 0.2 and sweeper.operand_sets == 1 and sweeper.reference == "first"


@pytest.mark.gpu
def test_the_rule_decides_a_network_the_records_lack_and_keeps_pytorchs_results(tmp_path):
    """The hook's default mode (the rule) on depthwise and grouped layers no record holds: every direction decided
    (timed, switched or passed through, never failed), the results PyTorch's within TF32's error, and a layer's
    near size passed through untimed where its default won."""
    from algosel.runtime import hook

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(72, 72, 3, padding=1, groups=72), torch.nn.ReLU(),
        torch.nn.Conv2d(72, 120, 3, padding=1, groups=6), torch.nn.ReLU(),
        torch.nn.Conv2d(120, 96, 1),
    ).cuda()  # fmt: skip
    x = torch.randn(48, 72, 40, 40, device="cuda", requires_grad=True)
    ref = net(x)
    ref.square().mean().backward()
    ref_grad = x.grad.clone()
    x.grad = None
    ex = hook.Executor(cache=tmp_path, probe_calls=0, device_probe=CudaWithoutTrials())
    assert ex.decider.calibration is not None  # the shipped model's
    with hook.enabled(ex):
        out = net(x)
        out.square().mean().backward()
        net(torch.randn(48, 72, 44, 44, device="cuda")).sum().backward()  # a near size of every layer
    assert relative_error(out, ref) < 1e-2 and relative_error(x.grad, ref_grad) < 1e-2
    reasons = ex.route_reasons()
    assert reasons and not any(r.startswith("fallback") for r in reasons), reasons
