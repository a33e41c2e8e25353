"""The GPU-bound rule (``SwitchPolicy.looks.device_bound_fraction``): where the executor's looks find the device busy
nearly always, a measured or recorded switch pays from its noise bound and host costs alone, without the host-bound
step's least gain (``min_gain_us``); a switch kept
by it says so, and a process reading it from the cache judges it by the same rule. On the CPU: a fake device, a
scripted measurer, the looks counted into the executor's probation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.decision import Reason
from algosel.runtime.executor import Executor
from algosel.runtime.policy import DEFAULT_POLICY, LookPolicy, judge
from algosel.runtime.standins import FakeDevice, Preferring, ScriptedMeasurer

ENV = {"gpu_name": "NVIDIA H200", "cudnn": 91900, "torch": "2.11.0", "cudnn_frontend": "1.32.0", "model": "abc"}
PROBLEM = ConvProblem(n=64, c=96, k=96, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1, dtype="float16", layout="nhwc")
CPU = torch.device("cpu")


def test_a_small_measured_gain_pays_in_a_gpu_bound_step_only():
    times = {DEFAULT_ID: 0.300, "cudnn:eng1": 0.288}  # 12 us saved a call, 1.042x faster
    host_bound = judge(DEFAULT_POLICY, "k", "cudnn:eng1", times, 0.300, "measured", 1.03, 0.0)
    assert host_bound.passes_through and host_bound.reason == Reason.BELOW_THRESHOLD
    bound = judge(DEFAULT_POLICY, "k", "cudnn:eng1", times, 0.300, "measured", 1.03, 0.0, device_bound=True)
    assert bound.candidate_id == "cudnn:eng1" and bound.reason == Reason.DEVICE_BOUND
    # the ratio still holds (run-to-run noise), and so does the route's host cost
    assert judge(DEFAULT_POLICY, "k", "cudnn:eng1", {**times, "cudnn:eng1": 0.295}, 0.300, "measured", 1.03, 0.0,
                 device_bound=True).passes_through  # fmt: skip
    assert judge(
        DEFAULT_POLICY, "k", "cudnn:eng1", times, 0.300, "measured", 1.03, 60.0, device_bound=True
    ).passes_through
    # a gain the host-bound rule keeps is a plain switch
    big = {DEFAULT_ID: 0.300, "cudnn:eng1": 0.200}
    assert judge(DEFAULT_POLICY, "k", "cudnn:eng1", big, 0.300, "measured", 1.03, 0.0, device_bound=True).reason == ""
    with pytest.raises(ValueError, match="LookPolicy.device_bound_fraction is a share in"):
        LookPolicy(device_bound_fraction=2.0)


def _executor(shipped, cache, busy_looks: int, idle_looks: int = 0) -> tuple[Executor, ScriptedMeasurer]:
    measurer = ScriptedMeasurer(lambda cid: (0.200, 10.0) if cid == DEFAULT_ID else (0.190, 10.0))
    # (a route on the compiled path costs no host time over PyTorch's: none here, where the CPU has no such path)
    policy = dataclasses.replace(DEFAULT_POLICY, python_path_overhead_us=0.0)
    ex = Executor(selector=Preferring(shipped, "cudnn", recorded=False), verify=3, cache=cache, measurer=measurer,
                  device_probe=FakeDevice(can_time=True), native=False, policy=policy)  # fmt: skip
    for i in range(busy_looks + idle_looks):
        ex.probation.looks.add(i < busy_looks, backward=bool(i % 2))
    return ex, measurer


@pytest.mark.parametrize(("busy", "idle", "switched"), [(0, 0, False), (31, 0, False), (38, 2, True), (36, 4, False)])
def test_the_executor_judges_by_the_gpu_bound_rule_once_its_looks_find_the_device_busy(shipped, tmp_path, busy,
                                                                                        idle, switched):  # fmt: skip
    """At least four signatures' probation of looks (32), ``device_bound_fraction`` (0.95) of them busy."""
    ex, measurer = _executor(shipped, RuntimeCache(tmp_path, ENV), busy, idle)
    assert ex.device_bound() is switched
    decision = ex.decide(PROBLEM, CPU)
    assert measurer.timed == [PROBLEM.key] and decision.source == "measured"
    assert (not decision.passes_through) is switched
    assert decision.reason == (Reason.DEVICE_BOUND if switched else Reason.BELOW_THRESHOLD)


def test_a_switch_kept_for_a_gpu_bound_step_is_kept_by_a_process_reading_the_cache(shipped, tmp_path):
    ex, _ = _executor(shipped, RuntimeCache(tmp_path, ENV), 40)
    kept = ex.decide(PROBLEM, CPU)
    later, measurer = _executor(shipped, RuntimeCache(tmp_path, ENV), 0)  # no looks yet in the new process
    assert later.decide(PROBLEM, CPU) == kept and measurer.timed == []
    # a pass-through for a small gain made in a host-bound step stays one where the step is not known GPU-bound
    host_bound, _ = _executor(shipped, RuntimeCache(tmp_path / "other", ENV), 0)
    assert host_bound.decide(PROBLEM, CPU).reason == Reason.BELOW_THRESHOLD
