"""Tests of algosel.measure.sweep's run_sweep on CPU: its resumption, sharding, time budget and crash recovery, and
the targeted sweep script's dry run. Timing is a FakeTimer; the operands and the correctness check are real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import SWEEP_ENV, SWEEP_TIMES

from algosel.measure.sweep import SweepCase, Sweeper, done_case_keys, parse_shard, run_sweep, shard_cases
from algosel.measure.timing import FakeTimer
from algosel.problem import ConvProblem
from algosel.records import Journal, load_records, read_part
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace


# ---------------------------------------------------------------------------------------------- driving
def _cases(count: int) -> list[SweepCase]:
    return [SweepCase(ConvProblem(n=1 + i, c=3, k=2, h=2, w=3, r=2, s=3), "grid") for i in range(count)]


class CountingSweeper(Sweeper):
    """A CPU sweeper (GEMM and PyTorch spaces) that remembers which cases it measured."""

    def __init__(self, clock: list[float] | None = None, case_seconds: float = 0.0, crash_on: str | None = None):
        super().__init__(
            [GemmSpace(), PyTorchDefaultSpace()],
            FakeTimer(lambda label: SWEEP_TIMES[label]),
            SWEEP_ENV,
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
    assert envs == {"cpu-test": SWEEP_ENV}
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
    journal.append(a.key, a_rows, SWEEP_ENV)
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
