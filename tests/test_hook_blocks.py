"""Blocks of the runtime hook on CPU: an executor that switches nothing steps aside after quiet blocks (and looks
again now and then), one with a switch never does; the step trial keeps the switches only where blocks with them
are faster (a stand-in clock gives the blocks' spans)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from support import REF, SMALL_GAIN, gemm_paying_executor, hook_executor, looking

from algosel.runtime import hook
from algosel.runtime.policy import DEFAULT_POLICY


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here), with a time predictor that makes GEMM lowering pay."""
    return gemm_paying_executor(shipped)


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
    ex = hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
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
    for ex in (hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf, step_aside=False),
               hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf,
                         record=tmp_path / "unseen.csv")):  # fmt: skip
        assert all(_blocks(ex, x, w, 6)) and ex.blocks_aside == 0


def test_a_block_inside_a_switched_on_hook_does_not_step_aside(shipped):
    """With the hook on for the process (enable()), F.conv2d is the hook's: a block keeps routing its calls."""
    ex = hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
    x, w = torch.randn(2, 8, 10, 10), torch.randn(8, 8, 3, 3)
    hook.enable(hook_executor(selector=shipped, live=False, cache=False))
    try:
        assert all(_blocks(ex, x, w, 6)) and ex.blocks_aside == 0
    finally:
        hook.disable()


def test_under_enable_an_executor_with_nothing_to_switch_steps_aside_between_optimizer_steps(shipped):
    """enable() has no blocks: each optimizer step ends one. After two quiet steps the next ones run PyTorch's own
    F.conv2d; one step in look_again_every_blocks runs the hook's; disable() leaves PyTorch's."""
    ex = hook_executor(selector=shipped, live=False, cache=False, min_gain_us=math.inf)
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(looks, _BlockClock(on_ms, off_ms)))
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(busy, clock))
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(True, _BlockClock(0.9, 1.0)))
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(looks, _BlockClock(0.9, 1.0)))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        for _ in range(10):
            F.conv2d(x, w)
    (route,) = ex.route_list()
    assert route.kind == "native" and route.reasons == ("pytorch:device idle at the call",)
    assert ex.busy_fractions() == (DEFAULT_POLICY.trial.busy_fraction,) * 2  # now one has
