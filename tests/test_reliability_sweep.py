"""A sweep process is killed with SIGKILL at random moments, stopped with SIGINT and SIGTERM, and restarted over
damaged bookkeeping, losing and duplicating nothing (a real sweep process on CPU, ``tests/cpu_sweep.py``, each forked
from one that imported it once: tests/forked.py); a stop is not swallowed by a candidate space. (From
tests/test_reliability.py, in a file of its own so that the two test processes run them beside its command lines.)"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO
from forked import Forked, Forks

from algosel.measure.sweep import read_inflight
from algosel.problem import ConvProblem
from algosel.records import read_part
from algosel.records.store import part_paths


@pytest.fixture(scope="module")
def sweeps():
    """Starts CPU sweep processes (``tests/cpu_sweep.py OUT ARGS``), each forked from one that imported it."""
    with Forks("cpu_sweep") as forks:
        yield forks


# -------------------------------------------------------------------------------------------------- sweep
def _start_sweep(sweeps: Forks, out: Path, *args: str, until: str = "sweeping") -> Forked:
    """A CPU sweep process, once it printed a line starting with ``until`` (``case``: a case has started)."""
    proc = sweeps.start(str(out), *args, cwd=REPO)
    while not (line := proc.stdout.readline()).startswith(until):
        assert line, proc.communicate(60)[1]
    return proc


def _raw_rows(out: Path) -> list[tuple[str, str]]:
    """(problem key, candidate id) of every row of every part, duplicates kept."""
    rows = []
    for path in part_paths(out):
        frame, _ = read_part(path)
        rows += list(zip(frame["problem_key"], frame["candidate_id"]))
    return rows


@pytest.fixture(scope="module")
def reference_rows(tmp_path_factory) -> dict[int, set[tuple[str, str]]]:
    """What an uninterrupted sweep of ``tests/cpu_sweep.py``'s cases records, by number of cases (in this process)."""
    import cpu_sweep

    out = {}
    for count in (6, 64):
        d = tmp_path_factory.mktemp(f"reference-{count}")
        todo = cpu_sweep.cases(count)
        from algosel.measure.sweep import run_sweep

        assert run_sweep(todo, cpu_sweep.SleepingSweeper(0, 0, todo[0].key), d, progress=False).measured == count
        rows = _raw_rows(d)
        assert len(rows) == len(set(rows))
        out[count] = set(rows)
    return out


def _sweep(sweeps: Forks, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    res = sweeps.run(str(out), *args, cwd=REPO, timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout.strip().splitlines()[-1])


def _started(inflight, before: dict) -> bool:
    """Whether a case was started since the bookkeeping read ``before`` (its count of attempts went up)."""
    return any(n > before.get(key, 0) for key, n in read_inflight(inflight).items())


def test_kill_9_at_random_moments_loses_and_duplicates_nothing(tmp_path, reference_rows, sweeps) -> None:
    """SIGKILL a sweep process at random moments, four times, then resume. No process can tell a SIGKILL from
    outside from a crash, so a case in flight at two kills is skipped as one that ended the process twice (and
    named); resuming with --retry-crashed records it. Every row ends up recorded exactly once."""
    out = tmp_path / "sweep"
    inflight = out / "inflight-0of1.json"
    rng = random.Random(12)  # the moments are random, and the same on every run of the test
    in_case = 0
    for _attempt in range(4):
        before = read_inflight(inflight)
        # 64 cases of at least 50 ms; the kill lands in a random one of the first 12 this process starts, while it
        # sleeps (counted from its "case" line: a loaded machine can take longer to start the interpreter than a
        # window of wall time leaves)
        proc = _start_sweep(sweeps, out, "--cases", "64", "--case-s", "0.05")
        for _case in range(rng.randint(1, 12)):
            if not proc.stdout.readline().startswith("case"):
                break
        proc.kill()
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        in_case += _started(inflight, before)
    assert in_case >= 2, "most kills landed outside a case"
    counts = read_inflight(inflight)
    res, report = _sweep(sweeps, out, "--cases", "64")
    rows = _raw_rows(out)
    assert res.returncode == 0, res.stderr
    assert len(rows) == len(set(rows)), "a row was recorded twice"
    recorded = {ConvProblem.from_key(key).case_key for key, _ in rows}
    twice = {key for key, n in counts.items() if n >= 2 and key not in recorded}
    assert report["skipped_crashed"] == len(twice), (report, counts)
    skipped = {r for r in reference_rows[64] if ConvProblem.from_key(r[0]).case_key in twice}
    assert set(rows) == reference_rows[64] - skipped, "a row was lost"
    if twice:  # resume once more, retrying them
        res, report = _sweep(sweeps, out, "--cases", "64", "--retry-crashed")
        assert res.returncode == 0 and report["measured"] == len(twice)
        rows = _raw_rows(out)
    assert len(rows) == len(set(rows)) and set(rows) == reference_rows[64]
    assert not list(out.glob("journal-*")) and not inflight.exists()


def test_damaged_inflight_file_is_a_warning_and_rebuilt(tmp_path, reference_rows, sweeps) -> None:
    """Empty (killed while an older algosel rewrote it in place) and half-written: both sweeps run at once."""
    procs = {}
    for name, bookkeeping in (("empty", ""), ("half", '{"n1_c3_k4_h3_w3_r3_s3_p0x0_u1x1_d1x1_g1_float32_nch')):
        out = tmp_path / name
        out.mkdir()
        (out / "inflight-0of1.json").write_text(bookkeeping)
        procs[out] = sweeps.start(str(out), "--cases", "6", cwd=REPO)
    for out, proc in procs.items():
        _, stderr = proc.communicate(timeout=120)
        inflight = out / "inflight-0of1.json"
        assert proc.returncode == 0 and "Traceback" not in stderr, stderr
        assert f"{inflight}: unreadable in-flight counts" in stderr
        assert set(_raw_rows(out)) == reference_rows[6]
        assert not inflight.exists(), "rebuilt, and removed once no case is in flight"


def test_sigint_and_sigterm_stop_a_sweep_cleanly_and_do_not_count_as_crashes(tmp_path, reference_rows,
                                                                               sweeps) -> None:
    """A long case interrupted twice was skipped for good: here it is interrupted by Ctrl-C, then by a scheduler's
    SIGTERM, and the third run measures it."""
    out = tmp_path / "sweep"
    for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc = _start_sweep(sweeps, out, "--cases", "6", "--slow-first", "30", until="case")
        time.sleep(0.2)  # inside the first case, which takes 30 s
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == status, stderr
        assert "Traceback" not in stderr, stderr
        report = json.loads(stdout.strip().splitlines()[-1])
        assert report["interrupted"] == sig and report["measured"] == 0
        assert not list(out.glob("journal-*")), "the journal is compacted"
        inflight = out / "inflight-0of1.json"
        assert not inflight.exists() or json.loads(inflight.read_text()) == {}, "the stop is not counted as a crash"
    res, report = _sweep(sweeps, out, "--cases", "6", "--slow-first", "0.5")
    assert res.returncode == 0, res.stderr
    assert (report["measured"], report["skipped_crashed"]) == (6, 0)
    rows = _raw_rows(out)
    assert len(rows) == len(set(rows)) and set(rows) == reference_rows[6]


def test_a_stop_is_not_swallowed_by_a_space_that_catches_every_exception(tmp_path) -> None:
    """SIGTERM arrives while a candidate space is at work inside ``except Exception``: the stop still stops the
    sweep (it is no candidate's failure), and nothing of the case is recorded."""
    from algosel.measure.sweep import Sweeper, run_sweep
    from algosel.measure.timing import FakeTimer
    from algosel.spaces.base import CandidateSpace
    from algosel.spaces.pytorch import PyTorchDefaultSpace

    class Swallowing(CandidateSpace):
        name = "swallowing"

        def enumerate(self, problem):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except Exception:  # noqa: BLE001 - what the test is about
                pass
            return []

        def prepare(self, problem, candidate):
            raise AssertionError("never prepared")

    import cpu_sweep

    sweeper = Sweeper([PyTorchDefaultSpace(), Swallowing()], FakeTimer(lambda label: 1.0), cpu_sweep.ENV, device="cpu")
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or a handler an earlier test's library left (ray.init)
    report = run_sweep(cpu_sweep.cases(2), sweeper, tmp_path, progress=False)
    assert (report.interrupted, report.measured, report.part, report.left_for_later) == (signal.SIGTERM, 0, None, 2)
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before, "the handler is restored"
