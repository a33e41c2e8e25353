"""Probation on CPU (a stand-in device whose looks a test scripts): a switch is made only where the device is busy
when its calls arrive (forward and backward looks, the network's calls pooled), looks just after planning do not
count, a large predicted gain skips probation; and verify mode's looking first, which times a new problem only
where its calls find the device busy."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from support import REF, SMALL_GAIN, Predicting, UnrecordedPredicting, gemm_paying_executor, hook_executor, looking

from algosel.candidates import DEFAULT_ID
from algosel.learn.selector import Selector
from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy
from algosel.runtime.standins import DefaultTakes, FakeDevice, ManualClock, Preferring, ScriptedMeasurer


@pytest.fixture
def executor(shipped):
    """The shipped H200 model, offline (no GPU here), with a time predictor that makes GEMM lowering pay."""
    return gemm_paying_executor(shipped)


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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(busy_looks))
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
    busy = looking(lambda t: forward_busy if t.shape[1] == 64 else backward_busy)
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **busy)
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
    by_batch = looking(lambda x: x.shape[0] < 4 + busy_convs)
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **by_batch)
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, **looking(False, settle_s=3600.0))
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
    ex = hook_executor(selector=SMALL_GAIN(executor), live=False, clock=clock, **looking(True, settle_s=1.0))
    other = hook_executor(selector=SMALL_GAIN(executor), live=False, clock=clock, **looking(True, settle_s=1.0))
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


@pytest.mark.parametrize(("default_ms", "probed"), [(0.1, True), (1.24, True), (1.26, False), (2.0, False)])
def test_a_switch_known_to_save_much_device_time_is_made_without_probation(executor, monkeypatch, default_ms, probed):
    """GEMM predicted at a fifth of PyTorch's default: a gain of 0.8 x default_ms a call for the forward. At 1 ms
    (``probation_exempt_gain_us``) or more, the switch is made at once even though the device looks idle."""
    assert DEFAULT_POLICY.looks.exempt_gain_us == 1000.0
    ex = hook_executor(selector=Predicting(executor.selector.model, default_ms=default_ms), live=False,
                   **looking(False))  # fmt: skip
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
    ex = hook_executor(selector=executor.selector, live=False, probe_calls=0, device_probe=FakeDevice(False))
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)
    with hook.enabled(ex):
        F.conv2d(x, w)
    assert hook.stats() == {"gemm": 1}


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
    ex = hook_executor(selector=selector, live=False, verify=3, cache=False, measurer=timer, policy=policy,
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
