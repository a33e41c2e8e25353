"""Deciding beside the step (algosel.runtime.aside): new problems are decided on a worker thread while their calls
pass through; timing stays on the step's thread."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import torch

from algosel.candidates import DEFAULT_ID
from algosel.learn.calibration import Calibration, ErrorSamples
from algosel.problem import ConvProblem
from algosel.runtime.aside import DecidingAside
from algosel.runtime.decision import Passing, Reason

CPU = torch.device("cpu")


def problem(h: int = 29) -> ConvProblem:
    return ConvProblem(n=3, c=37, k=41, h=h, w=31, r=3, s=3, pad_h=1, pad_w=1, dtype="float32")


def test_the_worker_decides_each_problem_once_and_ends_when_idle():
    done: dict[ConvProblem, str] = {}
    threads: set[str] = set()
    gate = threading.Event()

    def prepare(p: ConvProblem, device: torch.device) -> None:
        gate.wait(5)
        threads.add(threading.current_thread().name)
        done[p] = "decided"

    aside = DecidingAside(prepare, lambda p: p in done, idle_s=0.05)
    a, b = problem(29), problem(33)
    assert not aside.ready([a, b], CPU)
    assert not aside.ready([a], CPU)  # asked again while queued: not queued twice
    assert aside.pending() == 2
    gate.set()
    assert aside.join(5)
    assert aside.ready([a, b], CPU) and aside.decided == 2 and aside.pending() == 0
    assert threads == {"algosel-deciding"}
    # a later problem starts a new worker
    c = problem(41)
    assert not aside.ready([c], CPU)
    assert aside.join(5) and aside.ready([c], CPU) and aside.decided == 3


def test_a_problem_whose_deciding_fails_is_left_to_the_steps_thread():
    def prepare(p: ConvProblem, device: torch.device) -> None:
        raise RuntimeError("model broke")

    aside = DecidingAside(prepare, lambda p: False, idle_s=0.05)
    p = problem()
    assert not aside.ready([p], CPU)
    assert aside.join(5)
    assert p in aside.failed and aside.ready([p], CPU)  # the executor decides it, and its caller sees the error


def rule_executor(slice_model, measurer, run_steps: float = 1e6):
    from algosel.learn.selector import Selector
    from algosel.runtime.candidates import ModelCandidates
    from algosel.runtime.executor import Executor
    from algosel.runtime.policy import DEFAULT_POLICY
    from algosel.runtime.standins import FakeDevice

    sel = Selector.load(slice_model[0], force=True)
    wide = Calibration({"all": ErrorSamples(np.zeros(2), np.array([[2.0] * 3, [-2.0] * 3]))})
    policy = dataclasses.replace(DEFAULT_POLICY, expected_run_steps=run_steps, python_path_overhead_us=0.0)
    return Executor(selector=sel, decide_aside=True, calibration=wide, policy=policy, cache=False,
                    native=False, candidates=ModelCandidates(sel, live=False), measurer=measurer,
                    device_probe=FakeDevice(can_time=True))  # fmt: skip


def test_a_new_signature_passes_through_until_decided_and_is_timed_on_the_steps_thread(slice_model):
    """The first call runs PyTorch's own convolution, unmemoised, while the worker ranks the problem; the rule wants it
    timed, so the worker leaves the timing to the next call, which times it on the calling thread and keeps it."""
    from algosel.runtime.standins import ScriptedMeasurer

    timing_threads: list[str] = []

    def times(cid: str) -> tuple[float, float]:
        timing_threads.append(threading.current_thread().name)
        return (1.0, 0.0) if cid == DEFAULT_ID else (2.0, 0.0)

    measurer = ScriptedMeasurer(times)
    ex = rule_executor(slice_model, measurer)
    p = problem()
    key = ("signature",)
    first = ex.route(key, p, CPU, (False, False))
    assert first.reasons == (Passing.DECIDING,) and key not in ex.routes.by_key and ex.stats() == {Passing.DECIDING: 1}
    assert ex.aside.join(10)
    assert ex.decider.prepared(p) and ex.decider.kept(p).reason == Reason.TIME_ON_STEP
    assert measurer.timed == []  # nothing was timed beside the step
    again = ex.route(key, p, CPU, (False, False))
    assert Passing.DECIDING not in again.reasons and ex.routes.by_key[key] is again
    assert measurer.timed == [p.key] and set(timing_threads) == {threading.current_thread().name}
    assert ex.route(key, p, CPU, (False, False)) is again


def test_an_untimed_decision_made_beside_the_step_is_the_one_the_step_would_make(slice_model):
    """With too few calls to pay for timing, the worker's decision (pass through) is taken as it is: the step's
    thread decides nothing again."""
    from algosel.runtime.standins import ScriptedMeasurer

    measurer = ScriptedMeasurer(lambda cid: (1.0, 0.0))
    ex = rule_executor(slice_model, measurer, run_steps=1.0)
    p = problem()
    assert ex.route(("k",), p, CPU, (False, False)).reasons == (Passing.DECIDING,)
    deadline = time.monotonic() + 10
    while not ex.decider.prepared(p) and time.monotonic() < deadline:
        time.sleep(0.01)
    kept = ex.decider.kept(p)
    route = ex.route(("k",), p, CPU, (False, False))
    assert route.reasons == (f"pytorch:{kept.reason}",) and kept.reason == "expected saving below its cost"
    assert measurer.timed == [] and not ex.decider.prepared(p)


def test_blocks_whose_calls_wait_for_decisions_are_not_quiet(slice_model):
    """A block whose calls passed through while their problems were being decided met signatures still to route: it
    does not count towards stepping aside (which would leave the decisions unused for many blocks)."""
    from algosel.runtime.standins import ScriptedMeasurer

    ex = rule_executor(slice_model, ScriptedMeasurer(lambda cid: (1.0, 0.0)), run_steps=1.0)
    for block in range(4):
        assert ex.begin_block() is False
        before = len(ex.routes)
        p = problem(h=20 + block)  # a new size each block: its first call waits for its decision
        assert ex.route(("k", block), p, CPU, (False, False)).reasons == (Passing.DECIDING,)
        ex.block_done(before)
        assert ex.blocks.quiet_blocks == 0
    assert ex.aside.join(10)
    ex.begin_block()
    for block in range(4):  # their next calls are routed (memoised: passed through, too few calls to pay)
        assert ex.route(("k", block), problem(h=20 + block), CPU, (False, False)).kind == "native"
    ex.block_done(0)
    assert len(ex.routes) == 4
    for _ in range(ex.policy.trial.step_aside_after_blocks):  # quiet blocks (nothing new): then it steps aside
        assert ex.begin_block() is False
        ex.block_done(len(ex.routes))
    assert ex.begin_block() is True
