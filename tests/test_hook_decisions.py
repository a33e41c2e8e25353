"""The runtime hook's decisions on CPU: the rule switches untimed only where the predicted saving pays the route's
costs (the calibration's errors weighed near and far from the records), verify mode times only what may pay and
which shortlist, a cached decision is judged again by this executor's rule, and a switch pays the host time its
candidate takes over PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support import REF, UnrecordedPredicting, hook_executor

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.policy import fastest, host_extra_us
from algosel.runtime.standins import DefaultTakes, FakeDevice, LiveList, Preferring, ScriptedMeasurer, WithoutTimeModel


def test_an_unrecorded_problem_without_a_gain_estimate_passes_through(shipped):
    """A network the model knows nothing about runs at PyTorch's speed: no records, no measurement, no predicted
    times, no switch."""
    hook.reset_stats()
    ex = hook_executor(selector=WithoutTimeModel(shipped), live=False)
    x, w = torch.randn(64, 256, 6, 6), torch.randn(512, 256, 6, 6)
    with hook.enabled(ex):
        torch.testing.assert_close(F.conv2d(x, w), REF(x, w))
    assert hook.stats() == {"pytorch:no calibrated time model": 1}


@pytest.mark.parametrize(("ratio", "expected"), [(0.95, "pytorch:expected saving below its cost"), (0.9, "cudnn")])
def test_the_rule_switches_untimed_only_where_the_predicted_saving_pays_the_routes_costs(shipped, ratio, expected):
    """Predictions exact (the calibration's errors all zero), nothing timed: a cuDNN config predicted 5% faster than a
    1 ms default saves 50 us a call, under the Python path's 60 us, and passes; 10% faster saves 40 us a call net,
    which over the expected calls pays the plan's build."""
    ex = hook_executor(selector=Preferring(shipped, "cudnn", ratio, recorded=False), live=False, cache=False,
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
        ex = hook_executor(selector=DefaultTakes(shipped, 1000.0, 200.0, distance), live=False, cache=False,
                       device_probe=FakeDevice(can_time=False), calibration=calibration)  # fmt: skip
        assert (not ex.decide(problem, torch.device("cpu")).passes_through) is switched, distance


def _verifying(selector, **kw):
    """A verify-mode executor that times on the CPU with ``measurer`` (default: every candidate as fast as PyTorch's
    default)."""
    kw.setdefault("measurer", ScriptedMeasurer({}, (1.0, 0.0)))
    return hook_executor(selector=selector, live=kw.pop("live", False), verify=3, cache=False,
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


def test_an_untimed_switch_to_a_cudnn_config_is_to_one_cudnns_own_list_holds(shipped):
    """The nearest recorded problem's configs may not build for a new problem: where cuDNN's list of the problem can
    be queried (a GPU), the rule's untimed switch goes to the best of that list; beside the step (no CUDA call there)
    the decision is left to the step's thread, which queries it."""
    from algosel.runtime.decision import Reason

    listed = [c for c in shipped.choose(PROBLEM, top_k=200) if c.candidate_id.startswith("cudnn:")][-3:]

    def executor():
        selector = Preferring(shipped, "cudnn", 0.1, recorded=False)
        source = LiveList(selector, lambda p, k, modes=None: listed[:k])
        return hook_executor(selector=selector, candidates=source, cache=False,
                             device_probe=FakeDevice(can_time=False)), source  # fmt: skip

    cpu_ex, cpu_source = executor()
    offline = cpu_ex.decide(PROBLEM, torch.device("cpu"))  # no live list for the CPU's calls: the nearest list's
    assert offline.source == "predicted" and offline.candidate_id not in {c.candidate_id for c in listed}
    assert not cpu_source.asked
    gpu_ex, gpu_source = executor()
    decision = gpu_ex.decide(PROBLEM, torch.device("cuda"))  # a device object: nothing runs on a GPU here
    assert (decision.source, decision.candidate_id) == ("predicted", listed[0].candidate_id)
    assert gpu_source.asked == [(PROBLEM, 4, ("a", "fallback"))]
    aside_ex, aside_source = executor()
    aside_ex.decider.prepare(PROBLEM, torch.device("cuda"))  # as the worker beside the step does
    assert aside_ex.decider.kept(PROBLEM).reason == Reason.TIME_ON_STEP and not aside_source.asked
    assert aside_ex.decider.take(PROBLEM, torch.device("cuda")).candidate_id == listed[0].candidate_id
    assert len(aside_source.asked) == 1


def test_without_a_time_model_the_rule_queries_no_live_list(shipped):
    selector = WithoutTimeModel(shipped)
    source = LiveList(selector, lambda p, k, modes=None: pytest.fail("queried cuDNN's live list"))
    ex = hook_executor(selector=selector, candidates=source, cache=False)
    decision = ex.decide(ConvProblem(n=3, c=5, k=7, h=9, w=9, r=3, s=3), torch.device("cuda"))
    assert decision.passes_through and not source.asked


def test_without_a_time_model_verify_mode_times_every_problem(shipped):
    ex = _verifying(WithoutTimeModel(shipped))
    ex.decide(ConvProblem(n=1, c=8, k=8, h=4, w=4, r=1, s=1), torch.device("cpu"))
    assert ex.verifier.measurer().timed  # no estimate that it is too short


def test_cudnn_space_names_an_unknown_heuristic_mode():
    from algosel.spaces import get_space

    with pytest.raises(ValueError, match="unknown heuristic mode 'instant' \\(known: a, b, fallback\\)"):
        get_space("cudnn").enumerate(ConvProblem(n=1, c=8, k=8, h=8, w=8, r=3, s=3), modes=("a", "instant"))


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
    ex = hook_executor(selector=shipped, live=False, min_gain_us=min_gain_us, cache=cache)
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
    ex = hook_executor(selector=HostCosting(shipped, extra_us), live=False)
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
        ex = hook_executor(selector=shipped, live=False, cache=_OneDecisionCache(written))
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
