"""A sweep on a local Ray cluster of two CPUs (algosel.measure.ray_sweep): cases spread over workers, a killed worker
loses and duplicates nothing, a case that kills every worker is skipped, resumption, and records equal to a plain
local sweep's. Real operands and checks on CPU (the GEMM and PyTorch spaces), times from the fake timer."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

import cpu_sweep  # noqa: E402 - after the skip: the module needs no Ray, the tests do

from algosel.measure.ray_sweep import GpuSweeperSpec, run_ray_sweep  # noqa: E402
from algosel.measure.sweep import Sweeper, run_sweep  # noqa: E402
from algosel.measure.timing import FakeTimer  # noqa: E402
from algosel.records import load_records, part_paths, read_part  # noqa: E402
from algosel.spaces.gemm import GemmSpace  # noqa: E402
from algosel.spaces.pytorch import PyTorchDefaultSpace  # noqa: E402

CPU_TASK = {"num_cpus": 1}
CASES = cpu_sweep.cases(13)
KILLED_ONCE = CASES[5].key  # its first attempt kills its worker (after the first case of its task); a retry measures it
KILLS_ALWAYS = CASES[12].key  # kills every worker that measures it (a task of its own: the last of 13 in twos)


def plain_sweeper() -> Sweeper:
    """The CPU sweeper of tests/cpu_sweep.py, without its sleeps."""
    return Sweeper([GemmSpace(), PyTorchDefaultSpace()], FakeTimer(cpu_sweep.TIMES_MS.__getitem__), cpu_sweep.ENV,
                   device="cpu", operand_sets=1)  # fmt: skip


class _ChaosSweeper(Sweeper):
    """The plain sweeper, which also logs every case attempt (``pid key``), waits before its first case until
    ``spec.meet`` workers have started one (so that the test does not hang on how fast Ray starts workers), sleeps a
    little in each case and kills its own worker process on the cases the spec names."""

    def __init__(self, spec: ChaosSpec):
        plain = plain_sweeper()
        super().__init__(plain.spaces, plain.timer, plain.environment, device="cpu", operand_sets=1)
        self.spec = spec
        self.met = False

    def measure_case(self, case):
        with open(self.spec.log, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {case.key}\n")
        deadline = time.monotonic() + 30
        while not self.met and len({p for p, _ in attempts(Path(self.spec.log))}) < self.spec.meet:
            if time.monotonic() > deadline:
                break  # the test sees it: its first two attempts are then of one worker
            time.sleep(0.02)
        self.met = True
        marker = Path(self.spec.marker)
        if case.key == KILLED_ONCE and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        if case.key == KILLS_ALWAYS:
            os.kill(os.getpid(), signal.SIGKILL)
        if case.key == self.spec.interrupt_at:  # a Ctrl-C of the driver, sent while it waits for this task
            os.kill(self.spec.driver_pid, signal.SIGINT)
        time.sleep(self.spec.case_s)
        return super().measure_case(case)


@dataclass(frozen=True)
class ChaosSpec:
    """A picklable sweeper factory, as GpuSweeperSpec is for the command line."""

    log: str
    marker: str
    case_s: float = 0.05
    meet: int = 0
    interrupt_at: str = ""
    driver_pid: int = 0

    def __call__(self) -> Sweeper:
        return _ChaosSweeper(self)


def attempts(log: Path) -> list[tuple[int, str]]:
    return [(int(pid), key) for pid, key in (line.split() for line in log.read_text().splitlines())]


@pytest.fixture(scope="module")
def cluster():
    # The workers cannot import the tests' modules (tests/ is on no path of theirs): their classes travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(cpu_sweep)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 << 20, configure_logging=False)  # fmt: skip
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def swept(cluster, tmp_path_factory):
    """One sweep of 13 cases in tasks of 2 on the two-CPU cluster, one retry a task."""
    root = tmp_path_factory.mktemp("ray")
    spec = ChaosSpec(log=str(root / "attempts.log"), marker=str(root / "killed.pid"), meet=2)
    out = root / "out"
    report = run_ray_sweep(CASES, spec, out, progress=False, task_resources=CPU_TASK, chunk_cases=2, max_retries=1)
    return report, spec, out


def raw_records(out: Path) -> pd.DataFrame:
    """Every row of every part, duplicates kept (load_records drops them)."""
    return pd.concat([read_part(p)[0] for p in part_paths(out)], ignore_index=True)


def test_cases_spread_over_the_workers(swept) -> None:
    report, spec, _ = swept
    assert report.measured == len(CASES) - 1
    assert sum(report.workers.values()) == report.measured
    first, second = attempts(Path(spec.log))[:2]
    assert first[0] != second[0]  # two workers measured at once (the first two tasks; neither is killed)
    assert len(report.workers) >= 2, report.workers
    ran = {pid for pid, _ in attempts(Path(spec.log))}
    assert {int(w.rpartition(":")[2]) for w in report.workers} <= ran


def test_a_killed_worker_loses_and_duplicates_nothing(swept) -> None:
    report, spec, out = swept
    killed = int(Path(spec.marker).read_text())
    tries = [pid for pid, key in attempts(Path(spec.log)) if key == KILLED_ONCE]
    assert tries[0] == killed and len(tries) == 2 and tries[1] != killed, tries  # measured again by another worker
    partner = [pid for pid, key in attempts(Path(spec.log)) if key == CASES[4].key]  # first of the killed task
    assert partner[0] == killed and len(partner) == 2  # measured before the kill, and again by the retry
    rows = raw_records(out)
    assert not rows.duplicated(["problem_key", "candidate_id", "env_id"]).any()
    assert set(rows["case_key"]) == {c.key for c in CASES} - {KILLS_ALWAYS}
    assert (rows.groupby("case_key")["direction"].nunique() == 3).all()  # every case whole
    assert not list(out.glob("journal-*.jsonl"))  # compacted into the part


def test_a_case_that_kills_every_worker_is_skipped_and_counted(swept) -> None:
    report, spec, out = swept
    assert report.skipped_crashed == 1
    assert report.split_chunks == 0  # alone in its task (test_ray_driver.py splits a chunk of several)
    assert sum(1 for _, key in attempts(Path(spec.log)) if key == KILLS_ALWAYS) == 2  # the attempt and its retry
    counts = json.loads((out / "inflight-0of1.json").read_text())
    assert counts == {KILLS_ALWAYS: 2}  # skipped by later runs, as a local sweep skips a case that crashed it twice


def test_a_rerun_measures_nothing_new(swept) -> None:
    report, spec, out = swept
    parts = part_paths(out)
    before = attempts(Path(spec.log))
    again = run_ray_sweep(CASES, spec, out, progress=False, task_resources=CPU_TASK, chunk_cases=2, max_retries=1)
    assert (again.measured, again.skipped_done, again.skipped_crashed) == (0, len(CASES) - 1, 1)
    assert again.part is None and part_paths(out) == parts
    assert attempts(Path(spec.log)) == before  # no task ran


def test_records_equal_a_local_sweep(swept, tmp_path) -> None:
    _, _, out = swept
    local = [c for c in CASES if c.key != KILLS_ALWAYS]
    assert run_sweep(local, plain_sweeper(), tmp_path, progress=False).measured == len(local)
    key = ["problem_key", "candidate_id"]
    on_ray = load_records(out)[0].set_index(key).sort_index()
    plain = load_records(tmp_path)[0].set_index(key).sort_index()
    assert list(on_ray.index) == list(plain.index)
    exact = ["case_key", "status", "env_id", "source", "time_ms_median", "time_ms_min", "time_ms_p25", "time_ms_p75",
             "repeats", "workspace_bytes", "host_overhead_us"]  # fmt: skip
    pd.testing.assert_frame_equal(on_ray[exact], plain[exact])
    # The same operands and checks; the error may differ in the last bits (Ray's workers run torch on one thread).
    assert ((on_ray["max_rel_error"] - plain["max_rel_error"]).abs() <= 1e-6).all()
    # The GPU check's comparison (docs/sweeper.md) says so too.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import ray_sweep_check
    finally:
        sys.path.pop(0)
    passed, lines = ray_sweep_check.check(str(tmp_path), str(out), reference_dir=str(tmp_path))
    assert passed and lines[:3] == [
        f"cases: {len(local)} plain, {len(local)} ray, 0 in one only",
        f"candidates: {len(plain)} plain, {len(plain)} ray, 0 in one only",
        f"statuses that differ: 0 of {len(plain)}",
    ], lines
    assert "geomean 1.0000, p95 |log ratio| 0.0000, 100.0% within 10%" in lines[3]


def test_sigint_stops_the_sweep_and_a_rerun_finishes_it(cluster, tmp_path) -> None:
    cases = [c for c in CASES if c.key not in (KILLED_ONCE, KILLS_ALWAYS)][:10]
    spec = ChaosSpec(log=str(tmp_path / "attempts.log"), marker=str(tmp_path / "none"), case_s=0.2,
                     interrupt_at=cases[0].key, driver_pid=os.getpid())  # fmt: skip
    out = tmp_path / "out"
    stopped = run_ray_sweep(cases, spec, out, progress=False, task_resources=CPU_TASK, chunk_cases=1)
    assert stopped.interrupted == signal.SIGINT
    assert stopped.left_for_later > 0 and stopped.measured + stopped.left_for_later == len(cases)
    recorded = set(load_records(out)[0]["case_key"]) if part_paths(out) else set()
    assert len(recorded) == stopped.measured  # what finished is in a part, the tasks in flight were dropped
    rest = run_ray_sweep(cases, ChaosSpec(spec.log, spec.marker, case_s=0), out, progress=False,
                         task_resources=CPU_TASK, chunk_cases=4)  # fmt: skip
    assert (rest.measured, rest.skipped_done, rest.interrupted) == (stopped.left_for_later, stopped.measured, None)
    rows = raw_records(out)
    assert set(rows["case_key"]) == {c.key for c in cases}
    assert not rows.duplicated(["problem_key", "candidate_id", "env_id"]).any()


def test_an_error_of_the_sweep_on_a_worker_is_one_line_naming_the_worker(cluster, tmp_path) -> None:
    # The command line's sweeper on a worker without a GPU: its ValueError comes back as one, not Ray's traceback.
    with pytest.raises(ValueError, match=r"^worker [^:]+:\d+: no CUDA GPU visible") as info:
        run_ray_sweep(CASES[:2], GpuSweeperSpec(), tmp_path, progress=False, task_resources=CPU_TASK)
    assert "\n" not in str(info.value)
    assert not part_paths(tmp_path)
