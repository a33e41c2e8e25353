"""The expected-saving rule (algosel.runtime.rule), what a process has seen of its layers (runtime.recurrence), and
the time model's calibrated errors (learn.calibration) it stands on."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.learn.calibration import CALIBRATION_FILE, Calibration, ErrorSamples, fit_calibration, load_calibration
from algosel.problem import ConvProblem
from algosel.runtime.recurrence import Recurrence
from algosel.runtime.rule import PASS, SWITCH, TIME, Costs, decide, savings_ms, timing_cost_ms

COSTS = Costs(plan_build_ms=10.0, timing_overhead_ms=1.0, timing_runs=6, route_host_us=0.0)


def exact(rows: int = 1, ranks: int = 3) -> ErrorSamples:
    """A calibration that says predictions are exact."""
    return ErrorSamples(np.zeros(rows), np.zeros((rows, ranks)))


def test_savings_are_the_predicted_gain_where_predictions_are_exact():
    s = savings_ms({DEFAULT_ID: 1.0, "a": 0.5, "b": 0.8}, ["a", "b"], exact(), route_host_us=100.0)
    assert s.shape == (1, 2)
    assert s[0].tolist() == pytest.approx([0.5 - 0.1, 0.2 - 0.1])


def test_savings_follow_each_error_row():
    # one truth where the default is twice as long and the candidate's speed-up twice the predicted one
    errors = ErrorSamples(np.array([1.0]), np.array([[1.0]]))
    s = savings_ms({DEFAULT_ID: 1.0, "a": 0.5}, ["a"], errors)
    assert s[0, 0] == pytest.approx(2.0 * (1 - 1 / 4))


def test_timing_cost_is_builds_and_runs():
    cost = timing_cost_ms({DEFAULT_ID: 1.0, "a": 0.5, "gemm:x": 0.2}, ["a", "gemm:x"], COSTS)
    assert cost == pytest.approx(2 * 10.0 + 3 * 1.0 + 6 * (1.0 + 0.5 + 0.2))


def test_a_sure_gain_over_many_calls_switches_untimed():
    action = decide({DEFAULT_ID: 1.0, "a": 0.5}, ["a"], exact(), 100, COSTS)
    assert action.kind == SWITCH and action.candidates == ("a",)
    assert action.value_ms == pytest.approx(100 * 0.5 - 10.0)


def test_an_uncertain_gain_is_timed_not_switched():
    # half the truths: the candidate is 4x faster than predicted; half: 4x slower (it loses on average untimed)
    errors = ErrorSamples(np.zeros(2), np.array([[2.0], [-2.0]]))
    times = {DEFAULT_ID: 1.0, "a": 1.0}
    assert decide(times, ["a"], errors, 1000, COSTS, can_time=False).kind == PASS
    action = decide(times, ["a"], errors, 1000, COSTS)
    assert action.kind == TIME and action.candidates == ("a",)
    assert action.value_ms == pytest.approx(1000 * 0.5 * 0.75 - timing_cost_ms(times, ["a"], COSTS))


def test_few_calls_pass_through():
    assert decide({DEFAULT_ID: 1.0, "a": 0.5}, ["a"], exact(), 10, COSTS).kind == PASS
    assert decide({DEFAULT_ID: 1.0, "a": 0.5}, ["a"], exact(), 0, COSTS).kind == PASS


def test_timing_more_candidates_only_where_their_errors_differ():
    times = {DEFAULT_ID: 1.0, "a": 1.0, "b": 1.0}
    same = ErrorSamples(np.zeros(2), np.array([[1.0, 1.0], [-1.0, -1.0]]))
    assert decide(times, ["a", "b"], same, 1000, COSTS).candidates == ("a",)
    apart = ErrorSamples(np.zeros(2), np.array([[1.0, -1.0], [-1.0, 1.0]]))
    assert decide(times, ["a", "b"], apart, 1000, COSTS).candidates == ("a", "b")
    assert decide(times, ["a", "b"], apart, 1000, COSTS, max_k=1).candidates == ("a",)


def test_no_prediction_passes_through():
    assert decide({DEFAULT_ID: 1.0}, ["a"], exact(), 1000, COSTS).kind == PASS
    assert decide({DEFAULT_ID: math.nan, "a": 0.1}, ["a"], exact(), 1000, COSTS).kind == PASS
    assert decide({DEFAULT_ID: 1.0, "a": 0.1}, [], exact(), 1000, COSTS).kind == PASS


def test_a_gemm_lowering_builds_no_plan():
    action = decide({DEFAULT_ID: 1.0, "gemm:fc": 0.5}, ["gemm:fc"], exact(), 10, COSTS)
    assert action.kind == SWITCH and action.value_ms == pytest.approx(10 * 0.5)


# ---------------------------------------------------------------------------------------------- recurrence
def conv(n=8, h=32, w=32, c=16, direction="fwd") -> ConvProblem:
    return ConvProblem(n=n, c=c, k=16, h=h, w=w, r=3, s=3, pad_h=1, pad_w=1, dtype="float32", direction=direction)


def test_expected_calls_are_shared_among_a_layers_sizes():
    rec = Recurrence(run_steps=900)
    rec.met(conv(h=32))
    assert rec.expected_calls(conv(h=32)) == 900
    rec.met(conv(h=40))
    rec.met(conv(h=48))
    assert rec.expected_calls(conv(h=48)) == 300
    assert rec.layer_calls(conv(h=48)) == 900
    assert rec.expected_calls(conv(c=32)) == 900  # another layer
    rec.steps = 3000  # a run longer than the prior is expected to go on as long again
    assert rec.expected_calls(conv(h=48)) == 1000


def test_a_verdict_carries_to_near_sizes_of_the_same_batch_only():
    rec = Recurrence(run_steps=100)
    rec.remember(conv(h=32, w=32), DEFAULT_ID)
    assert rec.near_verdict(conv(h=40, w=36)).candidate_id == DEFAULT_ID
    assert rec.near_verdict(conv(h=48, w=32)) is None  # 1.5x
    assert rec.near_verdict(conv(n=16, h=32, w=32)) is None
    assert rec.near_verdict(conv(h=32, direction="bwd_data")) is None
    rec.remember(conv(h=38, w=38), "cudnn:x")
    assert rec.near_verdict(conv(h=40, w=40)).candidate_id == "cudnn:x"  # the nearest


# --------------------------------------------------------------------------------------------- calibration
def test_calibration_round_trips_and_falls_back_to_larger_groups():
    big = ErrorSamples(np.arange(50.0), np.stack([np.arange(50.0), np.full(50, np.nan)], axis=1))
    small = ErrorSamples(np.zeros(3), np.zeros((3, 2)))
    cal = Calibration({"all": big, "pointwise": big, "pointwise/far": small}, {"interval": [0.05, 0.95]})
    again = Calibration.from_json(cal.to_json())
    assert again.samples("pointwise", "far").default.tolist() == big.default.tolist()  # 3 rows: too few
    assert np.isnan(again.samples("depthwise", "near").speedup[:, 1]).all()
    assert again.coverage == {"interval": [0.05, 0.95]}


@pytest.mark.parametrize("text", ["", "{}", '{"format": "algosel-calibration", "groups": {}}', "[1, 2]"])
def test_a_damaged_calibration_is_one_line(text):
    with pytest.raises(ValueError, match=r"^cal\.json: not a calibration"):
        Calibration.from_json(text, "cal.json")


def test_calibration_fitted_on_held_out_problems_covers_its_interval(slice_model, slice_records):
    from algosel.learn.artifact import read_manifest, record_files
    from algosel.learn.selector import Selector

    directory, _ = slice_model
    sel = Selector.load(directory, force=True)
    cal = fit_calibration(sel, *slice_records)
    assert len(cal.groups["all"]) > 20
    assert 0.6 <= cal.coverage["all"]["share"] <= 1.0  # a 90% interval, on a small slice
    saved = load_calibration(directory, read_manifest(directory))  # `algosel train` wrote one into the model
    assert saved.groups.keys() == cal.groups.keys()
    assert {g: len(s) for g, s in saved.groups.items()} == {g: len(s) for g, s in cal.groups.items()}
    copy = directory.parent / "with-calibration"
    import shutil

    shutil.copytree(directory, copy, dirs_exist_ok=True)
    (copy / CALIBRATION_FILE).write_text(cal.to_json())
    record_files(copy, [CALIBRATION_FILE])
    assert load_calibration(copy, read_manifest(copy)).groups.keys() == cal.groups.keys()


# ------------------------------------------------------------------------------------ the rule in the executor
def test_the_executor_decides_by_the_rule(slice_model):
    """A problem the records lack: timed where the rule expects the timing to pay, passed through where its calls
    are too few; a near size of a layer whose default won passes untimed."""
    from algosel.learn.selector import Selector
    from algosel.runtime.candidates import ModelCandidates
    from algosel.runtime.executor import Executor
    from algosel.runtime.policy import DEFAULT_POLICY
    from algosel.runtime.standins import FakeDevice, ScriptedMeasurer

    sel = Selector.load(slice_model[0], force=True)
    wide = Calibration({"all": ErrorSamples(np.zeros(2), np.array([[2.0] * 3, [-2.0] * 3]))})
    measurer = ScriptedMeasurer(lambda cid: (1.0, 0.0) if cid == DEFAULT_ID else (2.0, 0.0))

    def executor(run_steps: float) -> Executor:
        # the compiled path's route: no host cost per call over PyTorch's own
        policy = dataclasses.replace(DEFAULT_POLICY, expected_run_steps=run_steps, python_path_overhead_us=0.0)
        return Executor(selector=sel, calibration=wide, policy=policy, cache=False, native=False,
                        candidates=ModelCandidates(sel, live=False), measurer=measurer,
                        device_probe=FakeDevice(can_time=True))  # fmt: skip

    p = ConvProblem(n=3, c=37, k=41, h=29, w=31, r=3, s=3, pad_h=1, pad_w=1, dtype="float32")
    assert not sel.is_recorded(p)
    assert executor(1.0).decide(p, torch.device("cpu")).reason == "expected saving below its cost"
    assert measurer.timed == []
    ex = executor(1e6)
    d = ex.decide(p, torch.device("cpu"))
    assert d.source == "measured" and d.passes_through and measurer.timed == [p.key]
    near = dataclasses.replace(p, h=33)
    assert ex.decide(near, torch.device("cpu")).reason == "default fastest at a near size of the layer"
    assert measurer.timed == [p.key]
