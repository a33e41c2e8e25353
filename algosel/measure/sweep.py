"""Driving a sweep: the cases of a shard, resumed where a run stopped, through a journal, within a time budget.

:func:`run_sweep` measures cases with a :class:`~algosel.measure.sweeper.Sweeper`, with resumption, sharding, a time
budget and a progress bar; records go through a :class:`~algosel.records.Journal` so a killed sweep loses at most
the case in flight. A case that ends the process (a crash inside a library) twice is skipped by later runs:
``inflight-<shard>.json`` counts the attempts, written atomically before and after every case. SIGINT and SIGTERM
are not crashes: they stop the sweep between two statements of the case in flight, which is dropped and not
counted, the journal is compacted, and the report says which signal stopped it (the command line exits with 128 +
its number).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from algosel.files import write_text

# SweepCase and Sweeper are the sweeper's; importable from here, where the command line and the runtime find them.
from algosel.measure.sweeper import SweepCase, Sweeper
from algosel.records.store import Journal, load_records, part_paths

__all__ = [
    "StopSignals",
    "SweepCase",
    "SweepInterrupted",
    "SweepReport",
    "Sweeper",
    "done_case_keys",
    "journal_case_keys",
    "parse_shard",
    "read_inflight",
    "run_sweep",
    "shard_cases",
]

log = logging.getLogger(__name__)


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``."""
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {text}: need 0 <= i < n")
    return i, n


def shard_cases(cases: Sequence[SweepCase], shard: tuple[int, int]) -> list[SweepCase]:
    """The cases of one shard: a stable split by case key, so that every process agrees without talking."""
    i, n = shard
    return [c for c in cases if zlib.crc32(c.key.encode()) % n == i]


def done_case_keys(*datasets: str | Path) -> set[str]:
    """Case keys already recorded in the given dataset directories (missing directories are empty)."""
    keys: set[str] = set()
    existing = [d for d in datasets if Path(d).exists() and part_paths(d)]
    if existing:
        frame, _ = load_records(*existing)
        keys |= set(frame["case_key"].unique())
    return keys


def journal_case_keys(directory: str | Path) -> set[str]:
    """The finished cases of every shard's journal in a dataset directory: a killed run's, which the next run of
    that shard into the directory compacts into a part instead of measuring (a damaged line is skipped, as
    compaction skips it)."""
    directory = Path(directory)
    if not directory.is_dir():
        return set()
    keys: set[str] = set()
    for path in sorted(directory.glob("journal-*.jsonl")):
        rows, _, _ = Journal(path).read()
        keys |= {r["case_key"] for r in rows if isinstance(r, dict) and "case_key" in r}
    return keys


@dataclass
class SweepReport:
    measured: int = 0
    skipped_done: int = 0
    skipped_crashed: int = 0
    left_for_later: int = 0
    part: Path | None = None
    #: The signal (SIGINT, SIGTERM) that stopped the run early, or None.
    interrupted: int | None = None


class SweepInterrupted(BaseException):
    """Raised inside the case in flight by :func:`run_sweep`'s SIGINT / SIGTERM handler.

    A BaseException, as KeyboardInterrupt is: a candidate's ``except Exception`` must not record the stop as the
    candidate's failure.
    """

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopSignals:
    """While installed, SIGINT and SIGTERM are recorded; inside :meth:`case` they also raise
    :class:`SweepInterrupted`, so that the case in flight stops, and nowhere else (never half-way through writing
    the journal or the in-flight counts)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._armed = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self._armed:
            self._armed = False  # once: a second signal during the unwinding must not raise again
            raise SweepInterrupted(signum)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def run_case(self, fn, *args):
        """``fn(*args)``, interruptible by the signals (raises :class:`SweepInterrupted`)."""
        if self.signum is not None:
            raise SweepInterrupted(self.signum)
        self._armed = True
        try:
            return fn(*args)
        finally:
            self._armed = False


def read_inflight(path: Path) -> dict[str, int]:
    """The attempt counts of cases that were in flight when a process ended (``{}`` without the file).

    A file that is empty or not such counts (a process killed while an older algosel wrote it in place) is
    a warning naming it, and is rewritten from scratch: losing the counts only means a crashing case is
    tried again.
    """
    if not path.exists():
        return {}
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(counts, dict) or not all(isinstance(k, str) and type(v) is int for k, v in counts.items()):
            raise ValueError("not an object of case keys and attempt counts")
    except (ValueError, OSError) as exc:
        log.warning("%s: unreadable in-flight counts (%s); starting from none and rewriting it", path, exc)
        return {}
    return counts


def run_sweep(
    cases: Sequence[SweepCase],
    sweeper: Sweeper,
    out_dir: str | Path,
    shard: tuple[int, int] = (0, 1),
    resume_from: Iterable[str | Path] = (),
    time_budget_s: float | None = None,
    progress: bool = True,
    retry_crashed: bool = False,
    clock_s: Callable[[], float] = time.monotonic,
) -> SweepReport:
    """Measure the shard's cases not yet recorded in ``out_dir`` or ``resume_from``; see the module docstring.

    Stops starting new cases once the time budget would be exceeded (judged by the mean case time so far), and
    compacts what it measured into ``out_dir/part-<time>-<shard>.parquet``. A SIGINT or SIGTERM stops it as the
    module docstring says (``report.interrupted`` is the signal's number). ``retry_crashed`` forgets the attempt
    counts, so that cases skipped after ending the process twice are tried again (a SIGKILL from outside, which no
    process can tell from a crash, counts as one). ``clock_s`` (seconds, ``time.monotonic``) is what the budget
    is read against; tests pass a scripted clock.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{shard[0]}of{shard[1]}"
    journal = Journal(out_dir / f"journal-{tag}.jsonl")
    inflight_path = out_dir / f"inflight-{tag}.json"
    report = SweepReport()
    with StopSignals() as stop:
        done = _recover(journal, out_dir, tag, resume_from)
        # Counts of cases recorded since (a kill after the journal line, before the count was cleared) are stale.
        crashed = {} if retry_crashed else read_inflight(inflight_path)
        crashed = {key: n for key, n in crashed.items() if key not in done}
        todo = []
        for c in shard_cases(cases, shard):
            if c.key in done:
                report.skipped_done += 1
            elif crashed.get(c.key, 0) >= 2:
                log.warning("skipping %s: it ended the sweep process twice", c.key)
                report.skipped_crashed += 1
            else:
                todo.append(c)
        attempts = _Attempts(inflight_path, crashed)
        _measure_cases(todo, sweeper, journal, attempts, stop, report, shard, time_budget_s, progress, clock_s)
        report.interrupted = stop.signum
        if not attempts.counts:
            inflight_path.unlink(missing_ok=True)
        report.part = journal.compact(out_dir, f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{tag}")
    if report.interrupted:
        log.warning("sweep %s stopped by %s", tag, signal.Signals(report.interrupted).name)
    return report


def _recover(journal: Journal, out_dir: Path, tag: str, resume_from: Iterable[str | Path]) -> set[str]:
    """Compact what a killed run of this shard left in its journal; return the case keys already recorded.

    The journal's cases that a part already holds (a run killed between writing its part and deleting its journal)
    are not compacted again.
    """
    rows, _, warnings = journal.read()
    for w in warnings:
        log.warning(w)
    in_parts = done_case_keys(out_dir)
    journal.compact(out_dir, f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{tag}-recovered", skip_cases=in_parts)
    return in_parts | {r["case_key"] for r in rows} | done_case_keys(*resume_from)


@dataclass
class _Attempts:
    """The attempt counts of cases in flight, written to ``path`` at every change (atomically)."""

    path: Path
    counts: dict[str, int]

    def start(self, key: str) -> None:
        """Count an attempt before it starts: a case that kills the process is skipped after two attempts."""
        self.counts[key] = self.counts.get(key, 0) + 1
        write_text(self.path, json.dumps(self.counts))

    def finish(self, key: str) -> None:
        """The case is recorded: its count goes."""
        self.counts.pop(key)
        write_text(self.path, json.dumps(self.counts))

    def withdraw(self, key: str) -> None:
        """Stopped on purpose, not a crash: the attempt does not count."""
        self.counts[key] -= 1
        if not self.counts[key]:
            self.counts.pop(key)
        write_text(self.path, json.dumps(self.counts))


def _measure_cases(
    todo: Sequence[SweepCase],
    sweeper: Sweeper,
    journal: Journal,
    attempts: _Attempts,
    stop: StopSignals,
    report: SweepReport,
    shard: tuple[int, int],
    time_budget_s: float | None,
    progress: bool,
    clock_s: Callable[[], float],
) -> None:
    """Measure ``todo`` in order into the journal until done, out of budget or stopped by a signal."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    start = clock_s()
    bar = tqdm(todo, desc=f"sweep {shard[0]}/{shard[1]}", unit="case", disable=not progress, position=shard[0])
    try:
        for index, case in enumerate(bar):
            elapsed = clock_s() - start
            over_budget = time_budget_s is not None and index and elapsed + elapsed / index > time_budget_s
            if over_budget or stop.signum is not None:
                report.left_for_later = len(todo) - index
                return
            attempts.start(case.key)
            try:
                rows = stop.run_case(sweeper.measure_case, case)
            except SweepInterrupted:
                attempts.withdraw(case.key)
                report.left_for_later = len(todo) - index
                return
            journal.append(case.key, rows, sweeper.environment)
            attempts.finish(case.key)
            report.measured += 1
            bar.set_postfix_str(case.problem.shape_key[:40])
    finally:
        bar.close()
