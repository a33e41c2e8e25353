"""Tests of algosel.measure.sweep on CPU, one problem at a time: every candidate's outcome becomes a record (built,
run, checked, timed, or why not), and the runtime's measured shortlist (checked against its first candidate, the
caller's math mode, a deadline, engines that build slowly). Timing is a FakeTimer; the operands and the
correctness check are real."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from support import SWEEP_ENV, SWEEP_TIMES

from algosel.candidates import DEFAULT_ID
from algosel.measure.sweep import SweepCase, Sweeper
from algosel.measure.timing import FakeTimer
from algosel.operands import Operands
from algosel.problem import DIRECTIONS, ConvProblem
from algosel.records import COLUMNS, read_part, write_part
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace, pytorch_conv

LIMIT = 1 << 20
FC = ConvProblem(n=3, c=4, k=5, h=3, w=3, r=3, s=3)


def _output(problem: ConvProblem, ops: Operands) -> torch.Tensor:
    return {"fwd": ops.y, "bwd_data": ops.x, "bwd_filter": ops.w}[problem.direction]


class _FakePrepared(PreparedCandidate):
    def __init__(self, space: FakeSpace, problem: ConvProblem, candidate: Candidate):
        self.space, self.problem, self.candidate = space, problem, candidate
        self.workspace_bytes = LIMIT + 1 if candidate.name == "huge_workspace" else 64

    def run(self, ops: Operands) -> torch.Tensor:
        name = self.candidate.name
        self.space.runs.append(name)
        if name == "run_raises":
            raise RuntimeError("illegal memory access (simulated)")
        if name == "zeros":
            return torch.zeros_like(_output(self.problem, ops))
        if name == "untouched":  # "writes in place" but never does: returns the output buffer as it found it
            out = _output(self.problem, ops)
            self.space.seen_poisoned.append(bool(torch.isnan(out).all()))
            return out
        return pytorch_conv(self.problem, ops)

    def close(self) -> None:
        self.space.closed.append(self.candidate.name)


class FakeSpace(CandidateSpace):
    """Candidates that fail in every way the sweeper records, plus one correct candidate."""

    name = "fake"
    NAMES = ("build_fails", "run_raises", "zeros", "untouched", "huge_workspace", "good")

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.closed: list[str] = []
        self.seen_poisoned: list[bool] = []
        self.released: list[str] = []

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate(space=self.name, name=n, engine_id=i, rank_a=i) for i, n in enumerate(self.NAMES)]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        if candidate.name == "build_fails":
            raise CandidateError("build_failed", "no plan for this shape (simulated)")
        return _FakePrepared(self, problem, candidate)

    def release(self, problem: ConvProblem) -> None:
        self.released.append(problem.key)


class EnumerateFails(CandidateSpace):
    name = "broken"

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        raise CandidateError("build_failed", "heuristic query failed (simulated)")

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        raise AssertionError("never prepared")


def make_sweeper(*extra: CandidateSpace, timer: FakeTimer | None = None) -> Sweeper:
    timer = timer or FakeTimer(lambda label: SWEEP_TIMES[label])
    spaces = [GemmSpace(), PyTorchDefaultSpace(), *extra]
    return Sweeper(spaces, timer, SWEEP_ENV, device="cpu", operand_sets=2, workspace_limit_bytes=LIMIT)


# ------------------------------------------------------------------------------------------ one problem
@pytest.fixture(scope="module")
def fwd_rows() -> tuple[dict[str, dict], FakeTimer, FakeSpace]:
    fake = FakeSpace()
    timer = FakeTimer(lambda label: SWEEP_TIMES[label])
    rows = make_sweeper(fake, timer=timer).measure_problem(FC, source="grid")
    return {r["candidate_id"]: r for r in rows}, timer, fake


def test_every_candidate_of_every_space_becomes_one_row(fwd_rows) -> None:
    rows, _, _ = fwd_rows
    assert list(rows) == ["gemm:fc", DEFAULT_ID, *(f"fake:{n}" for n in FakeSpace.NAMES)]
    for row in rows.values():
        assert set(row) == set(COLUMNS)
        assert (row["problem_key"], row["case_key"], row["source"], row["env_id"]) == (
            FC.key,
            FC.case_key,
            "grid",
            "cpu-test",
        )
        assert ConvProblem.from_dict(row) == FC


def test_build_failure_is_recorded_with_its_reason(fwd_rows) -> None:
    row = fwd_rows[0]["fake:build_fails"]
    assert row["status"] == "build_failed"
    assert row["reason"] == "no plan for this shape (simulated)"
    assert math.isnan(row["time_ms_median"]) and row["repeats"] == 0


def test_exception_while_running_is_run_failed(fwd_rows) -> None:
    row = fwd_rows[0]["fake:run_raises"]
    assert row["status"] == "run_failed"
    assert row["reason"] == "RuntimeError: illegal memory access (simulated)"
    assert row["workspace_bytes"] == 64
    assert math.isnan(row["time_ms_median"])


def test_wrong_output_is_wrong_result_with_its_error(fwd_rows) -> None:
    row = fwd_rows[0]["fake:zeros"]
    assert row["status"] == "wrong_result"
    assert row["max_rel_error"] == pytest.approx(1.0)
    assert row["reason"].startswith("relative error 1 > 0.005")
    assert math.isnan(row["time_ms_median"])


def test_output_is_poisoned_before_the_check(fwd_rows) -> None:
    rows, _, fake = fwd_rows
    assert fake.seen_poisoned == [True], "the candidate saw a NaN-filled output buffer"
    row = rows["fake:untouched"]
    assert row["status"] == "wrong_result" and row["max_rel_error"] == math.inf


def test_workspace_over_the_limit_is_recorded_and_never_run(fwd_rows) -> None:
    rows, _, fake = fwd_rows
    row = rows["fake:huge_workspace"]
    assert row["status"] == "workspace_exceeded"
    assert row["workspace_bytes"] == LIMIT + 1
    assert row["reason"] == f"needs {LIMIT + 1} bytes, limit {LIMIT}"
    assert "huge_workspace" not in fake.runs


def test_ok_rows_carry_the_timers_times(fwd_rows) -> None:
    rows, _, _ = fwd_rows
    for cid in ("gemm:fc", DEFAULT_ID, "fake:good"):
        row, t = rows[cid], SWEEP_TIMES[cid]
        assert row["status"] == "ok" and row["reason"] == ""
        assert row["time_ms_median"] == pytest.approx(t)
        assert row["time_ms_min"] == pytest.approx(0.99 * t)
        assert row["time_ms_p25"] == pytest.approx(0.995 * t)
        assert row["time_ms_p75"] == pytest.approx(1.01 * t)
        assert row["repeats"] == 3 and row["host_overhead_us"] == 10.0 and row["starved"] is False
        assert 0 <= row["max_rel_error"] <= 1e-4


def test_only_correct_candidates_are_timed(fwd_rows) -> None:
    _, timer, _ = fwd_rows
    assert timer.calls == ["gemm:fc", DEFAULT_ID, "fake:good"]


def test_every_prepared_candidate_is_closed_and_the_space_released(fwd_rows) -> None:
    _, _, fake = fwd_rows
    assert sorted(fake.closed) == sorted(n for n in FakeSpace.NAMES if n != "build_fails")
    assert fake.released == [FC.key]


def test_rows_are_valid_records(fwd_rows, tmp_path: Path) -> None:
    rows, _, _ = fwd_rows
    frame, _ = read_part(write_part(tmp_path / "part-x.parquet", list(rows.values()), [SWEEP_ENV]))
    assert frame["status"].value_counts().to_dict() == {
        "ok": 3,
        "wrong_result": 2,
        "build_failed": 1,
        "run_failed": 1,
        "workspace_exceeded": 1,
    }


def test_failure_while_timing_is_run_failed() -> None:
    def times(label: str) -> float:
        if label == DEFAULT_ID:
            raise RuntimeError("timer broke")
        return SWEEP_TIMES[label]

    rows = {r["candidate_id"]: r for r in make_sweeper(timer=FakeTimer(times)).measure_problem(FC)}
    assert rows["gemm:fc"]["status"] == "ok"
    row = rows[DEFAULT_ID]
    assert row["status"] == "run_failed"
    assert row["reason"] == "while timing: RuntimeError: timer broke"
    assert row["max_rel_error"] <= 1e-4


def test_failing_enumeration_is_one_row_for_the_whole_space() -> None:
    rows = make_sweeper(EnumerateFails()).measure_problem(FC)
    broken = [r for r in rows if r["space"] == "broken"]
    assert len(broken) == 1
    assert broken[0]["candidate_id"] == "broken:*"
    assert broken[0]["status"] == "build_failed" and "heuristic query failed" in broken[0]["reason"]


def test_measure_case_covers_all_three_directions() -> None:
    problem = ConvProblem(n=2, c=3, k=4, h=5, w=5, r=1, s=1, layout="nhwc")
    rows = make_sweeper().measure_case(SweepCase(problem, "suite:x"))
    assert sorted({r["direction"] for r in rows}) == sorted(DIRECTIONS)
    assert len(rows) == 6 and {r["case_key"] for r in rows} == {problem.case_key}
    assert all(r["status"] == "ok" and r["source"] == "suite:x" for r in rows)


def test_same_seed_gives_the_same_operands_and_errors() -> None:
    a = make_sweeper().measure_problem(FC)
    b = make_sweeper().measure_problem(FC)
    assert [r["max_rel_error"] for r in a] == [r["max_rel_error"] for r in b]


# --------------------------------------------------------------------- the runtime's measured shortlist
def _shortlist(sweeper: Sweeper, names: tuple[str, ...]) -> dict[str, dict]:
    fake, default = FakeSpace(), PyTorchDefaultSpace()
    pairs = [(default, default.candidate("default", FC.direction))] + [(fake, Candidate("fake", n)) for n in names]
    return {r["candidate_id"]: r for r in sweeper.measure_candidates(FC, pairs)}


def test_checked_against_the_first_candidate_no_reference_is_computed() -> None:
    def no_reference(*args, **kwargs):
        raise AssertionError("the exact reference was computed")

    timer = FakeTimer(lambda label: SWEEP_TIMES[label])
    sweeper = Sweeper([], timer, SWEEP_ENV, device="cpu", reference="first", exact_reference=no_reference)
    rows = _shortlist(sweeper, ("zeros", "untouched", "good"))
    assert rows[DEFAULT_ID]["status"] == "ok" and rows[DEFAULT_ID]["max_rel_error"] == 0.0
    assert rows["fake:zeros"]["status"] == "wrong_result"
    assert rows["fake:untouched"]["status"] == "wrong_result"  # the poisoned buffer, not the default's result
    assert rows["fake:good"]["status"] == "ok" and rows["fake:good"]["max_rel_error"] < 1e-6


def test_when_the_first_candidate_fails_the_rest_are_checked_against_the_exact_reference() -> None:
    sweeper = Sweeper([], FakeTimer(lambda label: SWEEP_TIMES[label]), SWEEP_ENV, device="cpu", reference="first")
    fake = FakeSpace()
    pairs = [(fake, Candidate("fake", n)) for n in ("build_fails", "zeros", "good")]
    rows = {r["candidate_id"]: r for r in sweeper.measure_candidates(FC, pairs)}
    assert [rows[f"fake:{n}"]["status"] for n in ("build_fails", "zeros", "good")] == [
        "build_failed", "wrong_result", "ok",
    ]  # fmt: skip


class _FlagProbe(CandidateSpace):
    """One candidate that notes cuDNN's TF32 switch while it runs."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def enumerate(self, problem):
        return [Candidate(self.name, "flags")]

    def prepare(self, problem, candidate):
        space = self

        class _Run(PreparedCandidate):
            workspace_bytes = 0

            def run(self, ops):
                space.seen.append(torch.backends.cudnn.allow_tf32)
                return pytorch_conv(problem, ops)

        return _Run()


@pytest.mark.parametrize(("math_arg", "expected"), [("problem", False), ("caller", True)])
def test_the_math_mode_is_the_problems_or_the_callers(math_arg, expected) -> None:
    """A float32_strict problem forbids TF32 ("problem"); the runtime keeps the caller's switches ("caller")."""
    probe = _FlagProbe()
    sweeper = Sweeper([], FakeTimer(lambda label: 1.0), SWEEP_ENV, device="cpu", math=math_arg)
    strict = ConvProblem(n=2, c=4, k=4, h=5, w=5, r=3, s=3, pad_h=1, pad_w=1, dtype="float32_strict")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):  # the caller's: TF32 allowed
        sweeper.measure_candidates(strict, [(probe, Candidate("probe", "flags"))])
    assert probe.seen and set(probe.seen) == {expected}


@pytest.mark.parametrize(("arg", "value"), [("reference", "float64"), ("math", "tf32")])
def test_a_bad_reference_or_math_mode_is_refused_by_name(arg, value) -> None:
    with pytest.raises(ValueError, match=value):
        Sweeper([], FakeTimer(lambda label: 1.0), SWEEP_ENV, device="cpu", **{arg: value})


def test_the_timers_repeat_rule_spends_little_on_candidates_slower_than_the_best():
    from algosel.measure.timing import planned_repeats

    rule = {"budget_ms": 10.0, "min_repeats": 5, "max_repeats": 15, "slow_factor": 4.0, "single_factor": 20.0}
    assert planned_repeats(0.1, None, **rule) == 15  # the budget's 100, clamped
    assert planned_repeats(1.0, None, **rule) == 10 and planned_repeats(5.0, None, **rule) == 5
    assert planned_repeats(1.0, 0.5, **rule) == 10  # 2x the best so far: timed as usual
    assert planned_repeats(3.0, 0.5, **rule) == 3  # beyond slow_factor: 3 repeats
    assert planned_repeats(11.0, 0.5, **rule) == 0  # beyond single_factor: its warm-up run only


def test_a_deadline_stops_starting_candidates_after_the_first() -> None:
    import time

    sweeper = Sweeper([], FakeTimer(lambda label: SWEEP_TIMES[label]), SWEEP_ENV, device="cpu", reference="first")
    fake, default = FakeSpace(), PyTorchDefaultSpace()
    pairs = [(default, default.candidate("default", FC.direction)), (fake, Candidate("fake", "good"))]
    past = sweeper.measure_candidates(FC, pairs, deadline_s=time.perf_counter() - 1.0)
    assert [r["candidate_id"] for r in past] == [DEFAULT_ID]  # the reference is always measured
    later = sweeper.measure_candidates(FC, pairs, deadline_s=time.perf_counter() + 60.0)
    assert [r["candidate_id"] for r in later] == [DEFAULT_ID, "fake:good"]


class _SlowBuilds(CandidateSpace):
    """Correct candidates whose preparation advances a fake clock by the build seconds their name gives
    (``eng3_a=0.2``: engine 3, 0.2 s); the timer gives each the time in ``TIMES_MS``."""

    name = "slow"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.prepared: list[str] = []

    def candidate(self, name: str, direction: str) -> Candidate:
        return Candidate(self.name, name, engine_id=int(name.split("_", maxsplit=1)[0].removeprefix("eng")))

    def enumerate(self, problem):
        raise AssertionError("named candidates only")

    def prepare(self, problem, candidate):
        self.prepared.append(candidate.name)
        self.clock[0] += float(candidate.name.split("=")[1])

        class _Run(PreparedCandidate):
            workspace_bytes = 0

            def run(self, ops):
                return pytorch_conv(problem, ops)

        return _Run()


def _slow_sweeper(times_ms: dict[str, float]) -> tuple[Sweeper, _SlowBuilds]:
    clock = [0.0]
    timer = FakeTimer(lambda label: times_ms[label])
    sweeper = Sweeper(
        [], timer, SWEEP_ENV, device="cpu", reference="first", slow_build_s=0.05, clock_s=lambda: clock[0]
    )
    return sweeper, _SlowBuilds(clock)


def test_an_engine_that_builds_slowly_and_loses_is_not_built_again() -> None:
    times = {DEFAULT_ID: 1.0, "slow:eng3_a=0.2": 2.0, "slow:eng3_b=0.01": 0.5, "slow:eng4_a=0.01": 0.9}
    sweeper, space = _slow_sweeper(times)
    default = PyTorchDefaultSpace()
    pairs = [(default, default.candidate("default", FC.direction))]
    pairs += [(space, space.candidate(n, FC.direction)) for n in ("eng3_a=0.2", "eng3_b=0.01", "eng4_a=0.01")]
    rows = sweeper.measure_candidates(FC, pairs)
    # engine 3's second knob set is left out at once, on this problem and the next; engine 4 is built as usual
    assert [r["candidate_id"] for r in rows] == [DEFAULT_ID, "slow:eng3_a=0.2", "slow:eng4_a=0.01"]
    assert sweeper.slow_engines == {("slow", 3, "fwd", "float32", "nchw", False)} and sweeper.skipped_slow_builds == 1
    again = sweeper.measure_candidates(FC, pairs)
    assert [r["candidate_id"] for r in again] == [DEFAULT_ID, "slow:eng4_a=0.01"]
    assert space.prepared == ["eng3_a=0.2", "eng4_a=0.01", "eng4_a=0.01"]
    # another kind of problem (here: its layout) builds engine 3 again
    nhwc = dataclasses.replace(FC, layout="nhwc")
    pairs_nhwc = [(default, default.candidate("default", "fwd")), (space, space.candidate("eng3_a=0.2", "fwd"))]
    assert len(sweeper.measure_candidates(nhwc, pairs_nhwc)) == 2 and space.prepared[-1] == "eng3_a=0.2"


def test_a_slow_build_that_is_the_fastest_keeps_its_engine() -> None:
    times = {DEFAULT_ID: 1.0, "slow:eng3_a=0.2": 0.5}
    sweeper, space = _slow_sweeper(times)
    default = PyTorchDefaultSpace()
    pairs = [(default, default.candidate("default", FC.direction)), (space, space.candidate("eng3_a=0.2", "fwd"))]
    assert [r["status"] for r in sweeper.measure_candidates(FC, pairs)] == ["ok", "ok"]
    assert sweeper.slow_engines == set()
    assert len(sweeper.measure_candidates(FC, pairs)) == 2 and space.prepared == ["eng3_a=0.2"] * 2


def test_sweeps_measure_every_candidate_however_slow_its_build() -> None:
    times = {DEFAULT_ID: 1.0, "slow:eng3_a=0.2": 2.0, "slow:eng3_b=0.2": 2.0}
    sweeper, space = _slow_sweeper(times)
    sweeper.slow_build_s = None  # a sweep's setting
    pairs = [(space, space.candidate(n, FC.direction)) for n in ("eng3_a=0.2", "eng3_b=0.2")]
    assert len(sweeper.measure_candidates(FC, pairs)) == 2 and sweeper.slow_engines == set()
