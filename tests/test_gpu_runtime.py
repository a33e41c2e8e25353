"""GPU tests of the runtime's measured decisions: verify mode measures once and a new process reuses the
measurements from the persistent cache, looking first and probation on a real stream, the step trial's clock and
verdict on device-bound blocks, and the rule on a network the records lack.

Skipped without CUDA. The compiled path must be built first (``algosel build-ext``); its tests fail, rather than
skip, where ``ALGOSEL_REQUIRE_NATIVE=1`` says it should be there.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from support import AT_ONCE, GPU_ONLY, close, cudnn_model, prefer

from algosel.candidates import DEFAULT_ID
from algosel.operands import relative_error
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy, VerifyTimer
from algosel.runtime.standins import CudaWithoutTrials
from algosel.testing import exact_calibration

pytestmark = GPU_ONLY


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


def test_verify_modes_measurer_takes_the_policys_timer_and_slow_build_bound():
    import dataclasses

    from algosel.runtime.verify import runtime_measurer

    policy = dataclasses.replace(DEFAULT_POLICY, timer=VerifyTimer(slow_build_s=0.2))
    sweeper = runtime_measurer(policy)
    timer = sweeper.timer
    assert (timer.budget_ms, timer.min_repeats, timer.max_repeats) == (1.0, 3, 5)
    assert (timer.slow_factor, timer.single_factor) == (1.25, 1.25)
    assert sweeper.slow_build_s == 0.2 and sweeper.operand_sets == 1 and sweeper.reference == "first"


def test_predict_measure_times_the_shortlist_and_puts_the_fastest_first():
    import algosel

    choices = algosel.predict(n=64, c=256, k=512, h=6, w=6, r=6, s=6, dtype="float16", measure=3, top_k=4)
    times = [c.measured_time_ms for c in choices if c.measured_time_ms is not None]
    assert len(times) >= 2 and times == sorted(times)
    assert DEFAULT_ID in {c.candidate_id for c in choices} and choices[0].source == "measured"


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
    assert close(y, F.conv2d(x, w), 1e-2)
    (route,) = ex.route_list()
    seen = (ex.measured_problems, route.kind, route.reasons, hook.stats(), ex.looks.calls, ex.looks.busy)
    assert route.probe is None and route.key is None, seen
    if device_waits:
        assert ex.measured_problems == 0 and route.reasons == ("pytorch:device idle at the call",), seen
    else:
        assert ex.measured_problems == 1 and route.kind != "native", seen
    assert hook.stats()["pytorch:probing the device"] == (7 if device_waits else 8)


@pytest.mark.parametrize(("device_waits", "default_ms"), [(False, 0.1), (True, 0.1), (True, 2.0)])
def test_a_switch_is_made_where_the_device_is_busy_and_dropped_where_it_waits(shipped, ext, tmp_path,
                                                                              device_waits, default_ms):  # fmt: skip
    """Probation (executor module docstring) on a real stream: calls queued behind a long kernel find the device
    busy and get their switch; calls after a synchronization find it idle and keep PyTorch's path. A switch
    predicted to save 1.8 ms a call (``policy.looks.exempt_gain_us``) is made at once, the device idle or not."""
    import dataclasses

    from algosel.runtime import hook

    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(settle_s=0.0))  # probe_calls: 8
    model, x = cudnn_model()
    x = x.detach()
    ex = hook.Executor(policy=policy, device_probe=CudaWithoutTrials(), selector=prefer(shipped, "cudnn", default_ms),
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
    assert close(y, model(x).detach())
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

    model, x = cudnn_model()
    x = x.detach()
    ex = hook.Executor(probe_calls=0, selector=prefer(shipped, "cudnn", 0.1), cache=tmp_path)
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
    assert close(y, model(x))


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
