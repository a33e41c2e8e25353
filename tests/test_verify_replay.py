"""Verify mode end to end on real data without a GPU: the executor decides every problem of MyNet's sweep (the
tutorial's network, in no dataset the shipped model is trained on) with a measurer that replays that sweep's
records, so each decision is what verify mode would have found on the H200 that measured them."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from conftest import REPO

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.policy import DEFAULT_POLICY
from algosel.runtime.standins import FakeDevice, RecordedMeasurer


@pytest.fixture(scope="module")
def mynet():
    from algosel.records.catalogue import Catalogue
    from algosel.records.store import load_records

    catalogue = Catalogue.from_records(load_records(REPO / "data" / "sweeps" / "h200-mynet")[0])
    problems = [ConvProblem.from_key(k) for k in sorted(catalogue.frame["problem_key"].unique())]
    return catalogue, problems


def _replay(shipped, catalogue, problems, policy=DEFAULT_POLICY):
    """Each problem's decision, and the recorded device time of what it runs, of the default and of the best."""
    measurer = RecordedMeasurer(catalogue)
    ex = hook.Executor(selector=shipped, verify=3, live=False, cache=False, policy=policy, measurer=measurer,
                       device_probe=FakeDevice(can_time=True))  # fmt: skip
    picked = default = best = 0.0
    decisions = []
    for p in problems:
        d = ex.decide(p, torch.device("cpu"))
        times = {r["candidate_id"]: float(r["time_ms_median"]) for r in catalogue.rows(p.key)
                 if r["status"] == "ok" and not math.isnan(float(r["time_ms_median"]))}  # fmt: skip
        default += times[DEFAULT_ID]
        best += min(times.values())
        picked += times[d.candidate_id]  # a switch is to a candidate the replay timed: recorded there
        decisions.append(d)
    return decisions, picked / default, best / default, ex, measurer


def test_verify_mode_finds_time_the_default_leaves_on_a_network_the_records_lack(shipped, mynet):
    catalogue, problems = mynet
    assert len(problems) == 126
    decisions, found, best, ex, measurer = _replay(shipped, catalogue, problems)
    assert best <= found < 1.0, (found, best)  # never slower than PyTorch's default in total, never below the best
    sources = {d.source for d in decisions}
    assert "measured" in sources and ex.measured_problems == len(measurer.timed) > 0
    for d in decisions:
        if not d.passes_through:  # every switch is one the measurement (or the records) found faster by the margin
            assert d.times_ms[DEFAULT_ID] >= DEFAULT_POLICY.min_measured_ratio * d.times_ms[d.candidate_id]
            assert d.gain_us() >= DEFAULT_POLICY.min_gain_us
    # the shortlist: PyTorch's default first, then at most verify (3) candidates
    for asked in measurer.asked:
        assert asked[0] == DEFAULT_ID and 2 <= len(asked) <= 1 + ex.verify


def test_a_larger_least_gain_switches_less_and_finds_no_more(shipped, mynet):
    catalogue, problems = mynet
    strict = dataclasses.replace(DEFAULT_POLICY, min_gain_us=200.0)
    loose, found_loose, *_ = _replay(shipped, catalogue, problems)
    tight, found_tight, *_ = _replay(shipped, catalogue, problems, strict)
    switched = [sum(not d.passes_through for d in ds) for ds in (loose, tight)]
    assert switched[1] < switched[0] and found_loose <= found_tight <= 1.0


def test_verify_modes_timer_settings_are_the_policys():
    """A small budget and few repeats (the sweeper's CudaEventTimer takes these; tests/test_gpu_runtime.py checks it
    does on a GPU)."""
    assert DEFAULT_POLICY.timer.as_kwargs() == {"budget_ms": 1.0, "min_repeats": 3, "max_repeats": 5,
                                                "slow_factor": 1.25, "single_factor": 1.25}  # fmt: skip
    assert DEFAULT_POLICY.timer.slow_build_s == 0.05  # the sweeper's own setting, not its timer's
