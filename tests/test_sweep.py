"""Tests of algosel.measure.sweep on CPU: candidate outcomes become records, and run_sweep's resumption, sharding,
budget and crash recovery. Timing is a FakeTimer; the operands and the correctness check are real."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.measure.sweep import SweepCase, Sweeper, done_case_keys, parse_shard, run_sweep, shard_cases
from algosel.measure.timing import FakeTimer
from algosel.operands import Operands
from algosel.problem import DIRECTIONS, ConvProblem
from algosel.records import COLUMNS, Journal, load_records, read_part, write_part
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace, pytorch_conv

ENV = {"env_id": "cpu-test", "gpu_name": "none"}
LIMIT = 1 << 20
TIMES = {"gemm:fc": 0.5, "gemm:pointwise": 0.4, DEFAULT_ID: 1.0, "fake:good": 2.0}
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
    timer = timer or FakeTimer(lambda label: TIMES[label])
    spaces = [GemmSpace(), PyTorchDefaultSpace(), *extra]
    return Sweeper(spaces, timer, ENV, device="cpu", operand_sets=2, workspace_limit_bytes=LIMIT)


# ------------------------------------------------------------------------------------------ one problem
@pytest.fixture(scope="module")
def fwd_rows() -> tuple[dict[str, dict], FakeTimer, FakeSpace]:
    fake = FakeSpace()
    timer = FakeTimer(lambda label: TIMES[label])
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
        row, t = rows[cid], TIMES[cid]
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
    frame, _ = read_part(write_part(tmp_path / "part-x.parquet", list(rows.values()), [ENV]))
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
        return TIMES[label]

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


# ---------------------------------------------------------------------------------------------- driving
def _cases(count: int) -> list[SweepCase]:
    return [SweepCase(ConvProblem(n=1 + i, c=3, k=2, h=2, w=3, r=2, s=3), "grid") for i in range(count)]


class CountingSweeper(Sweeper):
    """A CPU sweeper (GEMM and PyTorch spaces) that remembers which cases it measured."""

    def __init__(self, clock: list[float] | None = None, case_seconds: float = 0.0, crash_on: str | None = None):
        super().__init__(
            [GemmSpace(), PyTorchDefaultSpace()],
            FakeTimer(lambda label: TIMES[label]),
            ENV,
            device="cpu",
            operand_sets=1,
        )
        self.measured: list[str] = []
        self.clock, self.case_seconds, self.crash_on = clock, case_seconds, crash_on

    def measure_case(self, case: SweepCase) -> list[dict]:
        if case.key == self.crash_on:
            raise SystemExit("process killed (simulated)")
        self.measured.append(case.key)
        if self.clock is not None:
            self.clock[0] += self.case_seconds
        return super().measure_case(case)


def _recorded_cases(out: Path) -> list[str]:
    frame, _ = load_records(out)
    return sorted(frame["case_key"].unique())


def test_run_sweep_measures_every_case_into_one_part(tmp_path: Path) -> None:
    cases = _cases(3)
    sweeper = CountingSweeper()
    report = run_sweep(cases, sweeper, tmp_path, progress=False)
    assert (report.measured, report.skipped_done, report.skipped_crashed, report.left_for_later) == (3, 0, 0, 0)
    assert report.part is not None and report.part.parent == tmp_path and report.part.name.endswith("-0of1.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == [report.part.name], "no journal or inflight file left"
    frame, envs = read_part(report.part)
    assert envs == {"cpu-test": ENV}
    assert len(frame) == 3 * 3 * 2  # cases x directions x (gemm, pytorch)
    assert _recorded_cases(tmp_path) == sorted(c.key for c in cases)


def test_resume_skips_recorded_cases_and_keeps_earlier_records(tmp_path: Path) -> None:
    cases = _cases(5)
    first = run_sweep(cases[:2], CountingSweeper(), tmp_path, progress=False)
    assert first.measured == 2
    sweeper = CountingSweeper()
    second = run_sweep(cases, sweeper, tmp_path, progress=False)
    assert (second.measured, second.skipped_done) == (3, 2)
    assert sweeper.measured == [c.key for c in cases[2:]]
    assert _recorded_cases(tmp_path) == sorted(c.key for c in cases)
    frame, _ = load_records(tmp_path)
    assert len(frame) == 5 * 3 * 2
    third = run_sweep(cases, CountingSweeper(), tmp_path, progress=False)
    assert (third.measured, third.skipped_done, third.part) == (0, 5, None)


def test_resume_from_skips_cases_of_another_dataset(tmp_path: Path) -> None:
    cases = _cases(4)
    run_sweep(cases[:3], CountingSweeper(), tmp_path / "old", progress=False)
    sweeper = CountingSweeper()
    report = run_sweep(cases, sweeper, tmp_path / "new", resume_from=[tmp_path / "old"], progress=False)
    assert (report.measured, report.skipped_done) == (1, 3)
    assert sweeper.measured == [cases[3].key]
    assert done_case_keys(tmp_path / "new", tmp_path / "old") == {c.key for c in cases}
    assert done_case_keys(tmp_path / "missing") == set()


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_are_disjoint_and_cover_every_case(n: int) -> None:
    cases = _cases(40)
    shards = [shard_cases(cases, (i, n)) for i in range(n)]
    keys = [c.key for shard in shards for c in shard]
    assert sorted(keys) == sorted(c.key for c in cases) and len(set(keys)) == len(keys)
    for shard in shards:  # each shard keeps the list's order
        assert shard == [c for c in cases if c in shard]
    if n > 1:
        assert all(0 < len(s) < len(cases) for s in shards)


def test_shard_assignment_does_not_depend_on_the_list(tmp_path: Path) -> None:
    cases = _cases(30)
    mine = {c.key for c in shard_cases(cases, (1, 3))}
    assert {c.key for c in shard_cases(list(reversed(cases))[:20], (1, 3))} == mine & {c.key for c in cases[10:]}


def test_run_sweep_measures_only_its_shard(tmp_path: Path) -> None:
    cases = _cases(12)
    sweeper = CountingSweeper()
    report = run_sweep(cases, sweeper, tmp_path, shard=(1, 3), progress=False)
    expected = [c.key for c in shard_cases(cases, (1, 3))]
    assert sweeper.measured == expected and report.measured == len(expected)
    assert report.part.name.endswith("-1of3.parquet")


@pytest.mark.parametrize(("text", "expected"), [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1/2", (1, 2))])
def test_parse_shard_accepts_i_of_n(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["", "1", "a/b", "1/2/3", "1.0/2", "1-2"])
def test_parse_shard_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match=f"--shard must look like i/n .*got {text!r}"):
        parse_shard(text)


@pytest.mark.parametrize("text", ["4/4", "5/4", "-1/4", "0/0", "0/-2"])
def test_parse_shard_rejects_an_index_out_of_range(text: str) -> None:
    with pytest.raises(ValueError, match=f"--shard {text}: need 0 <= i < n"):
        parse_shard(text)


def test_time_budget_leaves_cases_for_a_later_run(tmp_path: Path) -> None:
    clock = [1000.0]
    cases = _cases(6)
    # 10 s a case, 25 s budget: after two cases (20 s) a third would end at 30 s.
    sweeper = CountingSweeper(clock, case_seconds=10.0)
    report = run_sweep(cases, sweeper, tmp_path, time_budget_s=25.0, progress=False, clock_s=lambda: clock[0])
    assert (report.measured, report.left_for_later) == (2, 4)
    assert sweeper.measured == [c.key for c in cases[:2]]
    assert _recorded_cases(tmp_path) == sorted(c.key for c in cases[:2])
    later = CountingSweeper(clock, case_seconds=10.0)
    report = run_sweep(cases, later, tmp_path, time_budget_s=25.0, progress=False, clock_s=lambda: clock[0])
    assert (report.measured, report.skipped_done, report.left_for_later) == (2, 2, 2)
    assert later.measured == [c.key for c in cases[2:4]]


def test_time_budget_always_runs_the_first_case(tmp_path: Path) -> None:
    clock = [0.0]
    sweeper = CountingSweeper(clock, 100.0)
    report = run_sweep(_cases(3), sweeper, tmp_path, time_budget_s=1.0, progress=False, clock_s=lambda: clock[0])
    assert (report.measured, report.left_for_later) == (1, 2)


def test_killed_run_is_recovered_and_a_case_that_killed_it_twice_is_skipped(tmp_path: Path) -> None:
    a, b, c, d = _cases(4)
    # What a killed run leaves: the journal of the case it finished (plus half a line of the next) and the
    # in-flight counts (b ended the process twice, c once).
    journal = Journal(tmp_path / "journal-0of1.jsonl")
    a_rows = CountingSweeper().measure_case(a)
    journal.append(a.key, a_rows, ENV)
    with journal.path.open("a") as fh:
        fh.write('{"case_key": "' + c.key + '", "environment": {"env_id"')
    (tmp_path / "inflight-0of1.json").write_text(json.dumps({b.key: 2, c.key: 1}))

    sweeper = CountingSweeper()
    report = run_sweep([a, b, c, d], sweeper, tmp_path, progress=False)
    assert (report.measured, report.skipped_done, report.skipped_crashed) == (2, 1, 1)
    assert sweeper.measured == [c.key, d.key]
    assert not journal.path.exists()
    recovered = list(tmp_path.glob("part-*-0of1-recovered.parquet"))
    assert len(recovered) == 1
    frame, _ = read_part(recovered[0])
    assert sorted(frame["problem_key"] + frame["candidate_id"]) == sorted(
        r["problem_key"] + r["candidate_id"] for r in a_rows
    )
    assert _recorded_cases(tmp_path) == sorted([a.key, c.key, d.key])
    assert len(load_records(tmp_path)[0]) == 3 * 6, "no row lost"
    # b stays marked, so that later runs skip it too.
    assert json.loads((tmp_path / "inflight-0of1.json").read_text()) == {b.key: 2}


def test_case_that_kills_the_process_twice_is_skipped_on_the_third_run(tmp_path: Path) -> None:
    a, b, c = _cases(3)
    for attempt in (1, 2):
        killer = CountingSweeper(crash_on=b.key)
        with pytest.raises(SystemExit):
            run_sweep([a, b, c], killer, tmp_path, progress=False)
        assert json.loads((tmp_path / "inflight-0of1.json").read_text()) == {b.key: attempt}
        assert killer.measured == ([a.key] if attempt == 1 else [])
    sweeper = CountingSweeper(crash_on=b.key)
    report = run_sweep([a, b, c], sweeper, tmp_path, progress=False)
    assert (report.measured, report.skipped_done, report.skipped_crashed) == (1, 1, 1)
    assert sweeper.measured == [c.key]
    assert _recorded_cases(tmp_path) == sorted([a.key, c.key])
    assert len(load_records(tmp_path)[0]) == 2 * 6


# --------------------------------------------------------------------- the runtime's measured shortlist
def _shortlist(sweeper: Sweeper, names: tuple[str, ...]) -> dict[str, dict]:
    fake, default = FakeSpace(), PyTorchDefaultSpace()
    pairs = [(default, default.candidate("default", FC.direction))] + [(fake, Candidate("fake", n)) for n in names]
    return {r["candidate_id"]: r for r in sweeper.measure_candidates(FC, pairs)}


def test_checked_against_the_first_candidate_no_reference_is_computed() -> None:
    def no_reference(*args, **kwargs):
        raise AssertionError("the exact reference was computed")

    timer = FakeTimer(lambda label: TIMES[label])
    sweeper = Sweeper([], timer, ENV, device="cpu", reference="first", exact_reference=no_reference)
    rows = _shortlist(sweeper, ("zeros", "untouched", "good"))
    assert rows[DEFAULT_ID]["status"] == "ok" and rows[DEFAULT_ID]["max_rel_error"] == 0.0
    assert rows["fake:zeros"]["status"] == "wrong_result"
    assert rows["fake:untouched"]["status"] == "wrong_result"  # the poisoned buffer, not the default's result
    assert rows["fake:good"]["status"] == "ok" and rows["fake:good"]["max_rel_error"] < 1e-6


def test_when_the_first_candidate_fails_the_rest_are_checked_against_the_exact_reference() -> None:
    sweeper = Sweeper([], FakeTimer(lambda label: TIMES[label]), ENV, device="cpu", reference="first")
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
    sweeper = Sweeper([], FakeTimer(lambda label: 1.0), ENV, device="cpu", math=math_arg)
    strict = ConvProblem(n=2, c=4, k=4, h=5, w=5, r=3, s=3, pad_h=1, pad_w=1, dtype="float32_strict")
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):  # the caller's: TF32 allowed
        sweeper.measure_candidates(strict, [(probe, Candidate("probe", "flags"))])
    assert probe.seen and set(probe.seen) == {expected}


@pytest.mark.parametrize(("arg", "value"), [("reference", "float64"), ("math", "tf32")])
def test_a_bad_reference_or_math_mode_is_refused_by_name(arg, value) -> None:
    with pytest.raises(ValueError, match=value):
        Sweeper([], FakeTimer(lambda label: 1.0), ENV, device="cpu", **{arg: value})


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

    sweeper = Sweeper([], FakeTimer(lambda label: TIMES[label]), ENV, device="cpu", reference="first")
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
    sweeper = Sweeper([], timer, ENV, device="cpu", reference="first", slow_build_s=0.05, clock_s=lambda: clock[0])
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


def test_the_targeted_sweep_script_lists_its_400_cases_without_a_gpu(tmp_path) -> None:
    """benchmarks/targeted_sweep.sh's DRY_RUN: the device command of issue 40, tested here up to the measurement."""
    import os
    import subprocess
    import sys

    from conftest import REPO, SLICE

    env = {**os.environ, "OUT": str(tmp_path / "out"), "KEEP": str(tmp_path / "keep"), "BASE": str(SLICE),
           "DRY_RUN": "1", "PYTHON": sys.executable}  # fmt: skip
    script = ["bash", "benchmarks/targeted_sweep.sh"]
    done = subprocess.run(script, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "400 cases (400 from the grid)" in done.stdout
    assert (tmp_path / "out" / "before.txt").read_text() == done.stdout
    assert not (tmp_path / "keep").exists() or not any((tmp_path / "keep").glob("part-*"))
