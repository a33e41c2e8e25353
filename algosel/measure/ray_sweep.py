"""A sweep on a Ray cluster: the cases run as tasks on the cluster's GPUs (any number of hosts), the records are
written by this process through the same journal and parts as a local sweep.

:func:`run_ray_sweep` splits the cases of a shard into *chunks* of a few cases, and keeps a bounded number of
chunk tasks submitted (twice the task slots of the cluster by default: one running and one waiting per GPU, so
that a GPU never waits for this process, and nothing else is queued on the cluster, so that a time budget or a stop
takes effect at once). Ray starts each task where a GPU is free; a slow case holds up its GPU only. A task whose
worker dies (a crash in a library, a killed process, a lost node) is run again by Ray on another worker
(``max_retries``); a chunk that still fails is split into tasks of one case, so that only the case that kills its
worker is lost, and that case is counted in ``inflight-<shard>.json`` as a local sweep counts a case that ended
its process: later runs skip it (``retry_crashed`` tries it again).

The workers send their rows back; this process appends each finished case to ``journal-<shard>.jsonl`` and
compacts the journal into ``part-<time>-<shard>.parquet`` at the end (:class:`~algosel.records.Journal`), so no
shared filesystem is needed and the dataset is the one a local sweep of the shard would write: a rerun with the
same ``out_dir`` skips the cases recorded there, whichever of the two measured them. SIGINT and SIGTERM stop the
sweep as they stop a local one: the tasks in flight are cancelled (their cases are left for a later run), the
journal is compacted, and the report names the signal.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from algosel.files import write_text
from algosel.measure.ray_cluster import (
    GPU_TASK,
    describe_request,
    require_ray,
    resource_name,
    task_options,
    task_slots,
)
from algosel.measure.sweep import StopSignals, SweepReport, done_case_keys, read_inflight, shard_cases
from algosel.measure.sweeper import SweepCase, Sweeper
from algosel.records.store import Journal

log = logging.getLogger(__name__)

#: Cases per task by default. A task that asks for a GPU starts a fresh worker process (see
#: :func:`~algosel.measure.ray_cluster.task_options`), which pays for importing torch, a CUDA context and the
#: candidate spaces, a few seconds; on the H200 a case takes ~1.5 s (0.65 cases/s a GPU), so 16 cases keep that
#: start-up near a sixth of a task.
DEFAULT_CHUNK_CASES = 16
#: Attempts after the first of a task whose worker died (Ray's ``max_retries``).
DEFAULT_MAX_RETRIES = 3
#: How often the cluster's size is read again (nodes joining or leaving change the number of tasks in flight).
_RESIZE_EVERY_S = 10.0
#: How long the loop waits for a task before it looks at signals and the budget again.
_WAIT_S = 0.5


@dataclass
class ChunkResult:
    """What a task sends back: the rows of each of its cases, and where and how long it ran."""

    cases: list[tuple[str, list[dict[str, Any]]]]
    environment: dict[str, Any]
    worker: str
    seconds: float


@dataclass
class RaySweepReport(SweepReport):
    """:class:`~algosel.measure.sweep.SweepReport` of a sweep on Ray, with where its cases ran."""

    #: Cases measured by each worker process (``host:pid``).
    workers: dict[str, int] = field(default_factory=dict)
    #: Tasks that finished.
    tasks: int = 0
    #: Chunks whose worker died on every attempt, split into tasks of one case.
    split_chunks: int = 0


@dataclass(frozen=True)
class GpuSweeperSpec:
    """What a worker needs to build the sweeper of ``algosel sweep`` on its GPU: a picklable stand-in for the
    :class:`~algosel.measure.sweeper.Sweeper`, whose spaces and timer hold CUDA state that cannot travel."""

    spaces: tuple[str, ...] = ("gemm", "pytorch", "cudnn")
    budget_ms: float = 10.0
    workspace_limit_bytes: int = 8 << 30
    seed: int = 0

    def __call__(self) -> Sweeper:
        """The sweeper on this worker's GPU (the one Ray gave the task); a ValueError naming the worker where it
        has no GPU or a space cannot run."""
        import torch  # noqa: PLC0415

        from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415
        from algosel.records.environment import collect_environment  # noqa: PLC0415
        from algosel.spaces import make_space  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise ValueError(f"worker {worker_name()}: no CUDA GPU visible (CUDA_VISIBLE_DEVICES="
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r})")  # fmt: skip
        spaces = [make_space(name) for name in self.spaces]
        for space in spaces:
            why = space.available()
            if why:
                raise ValueError(f"worker {worker_name()}: candidate space {space.name!r} cannot run there: {why}")
        timer = CudaEventTimer(budget_ms=self.budget_ms)
        return Sweeper(spaces, timer, collect_environment(), workspace_limit_bytes=self.workspace_limit_bytes,
                       seed=self.seed)  # fmt: skip


def worker_name() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


#: The sweeper of this worker process, kept between the tasks of one sweep (a CPU worker runs many tasks; a GPU
#: worker one): ``(sweep id, sweeper)``.
_worker_sweeper: tuple[str, Sweeper] | None = None


def measure_chunk(sweep_id: str, make_sweeper: Callable[[], Sweeper], cases: Sequence[SweepCase]) -> ChunkResult:
    """The body of a sweep task: the records of every case of ``cases``, measured in this worker process by the
    sweeper ``make_sweeper()`` builds (once a sweep and process)."""
    global _worker_sweeper  # noqa: PLW0603 - one sweeper a worker process, as one a local sweep
    start = time.monotonic()
    if _worker_sweeper is None or _worker_sweeper[0] != sweep_id:
        _worker_sweeper = None  # the previous sweep's spaces go before the new ones are built
        _worker_sweeper = (sweep_id, make_sweeper())
    sweeper = _worker_sweeper[1]
    rows = [(case.key, sweeper.measure_case(case)) for case in cases]
    return ChunkResult(rows, dict(sweeper.environment), worker_name(), time.monotonic() - start)


def chunked(cases: Sequence[SweepCase], size: int) -> list[list[SweepCase]]:
    """``cases`` in order, in lists of ``size`` (the last one shorter)."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [list(cases[i : i + size]) for i in range(0, len(cases), size)]


def _worker_died_errors(ray) -> tuple[type[BaseException], ...]:
    """Ray's errors of a task whose worker or node went away (retried by Ray, then split here); any other error of
    a task (an exception of the sweep's own code, a task that cannot be scheduled) stops the sweep."""
    names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "ObjectLostError", "LocalRayletDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


class TaskSlots:
    """Tasks to keep submitted: ``max_in_flight``, or twice the task slots of the cluster, read again every
    ``_RESIZE_EVERY_S`` so that nodes joining are used. ``ray``: the ``ray`` module, or anything with its
    ``cluster_resources()``."""

    def __init__(self, ray, request: Mapping[str, float], max_in_flight: int | None):
        self.ray, self.request, self.fixed = ray, request, max_in_flight
        self.slots, self._read_at = 0, -float("inf")

    def limit(self) -> int:
        now = time.monotonic()
        if now - self._read_at > _RESIZE_EVERY_S:
            self._read_at = now
            cluster = self.ray.cluster_resources()
            self.slots = task_slots(self.request, cluster)
            if not self.slots:
                names = sorted({resource_name(key) for key in self.request} | {"CPU"})
                have = ", ".join(f"{name} {float(cluster.get(name, 0)):g}" for name in names)
                raise ValueError(f"the Ray cluster has no room for a sweep task asking {describe_request(self.request)}"
                                 f": it has {have}")  # fmt: skip
        return self.fixed or 2 * self.slots


def run_ray_sweep(
    cases: Sequence[SweepCase],
    make_sweeper: Callable[[], Sweeper],
    out_dir: str | Path,
    shard: tuple[int, int] = (0, 1),
    resume_from: Iterable[str | Path] = (),
    time_budget_s: float | None = None,
    progress: bool = True,
    retry_crashed: bool = False,
    task_resources: Mapping[str, float] = GPU_TASK,
    chunk_cases: int = DEFAULT_CHUNK_CASES,
    max_in_flight: int | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> RaySweepReport:
    """Measure the shard's cases not yet recorded in ``out_dir`` or ``resume_from`` as tasks on the Ray cluster
    this process is connected to (:func:`~algosel.measure.ray_cluster.connect`); see the module docstring.

    Parameters
    ----------
    make_sweeper : callable
        Picklable; called once in each worker process (and sweep) to build its
        :class:`~algosel.measure.sweeper.Sweeper`: :class:`GpuSweeperSpec` for ``algosel sweep``.
    task_resources : mapping
        What each task asks of the cluster: ``{"num_gpus": 1}`` (one GPU a task), ``{"num_cpus": 1}`` on a cluster
        of CPUs (tests), custom resources by name.
    chunk_cases : int
        Cases a task (see :data:`DEFAULT_CHUNK_CASES`).
    max_in_flight : int or None
        Tasks submitted at once; None: twice the tasks the cluster runs at once.
    max_retries : int
        Attempts after the first of a task whose worker died.

    The rest as :func:`~algosel.measure.sweep.run_sweep`; the time budget stops submitting tasks once the next one
    would not finish in time (judged by the mean time of a task so far).
    """
    from tqdm.auto import tqdm  # noqa: PLC0415

    ray = require_ray()
    remote = _remote_chunks(ray, task_resources, max_retries)
    slots = TaskSlots(ray, task_resources, max_in_flight)
    out_dir = Path(out_dir)
    tag, journal, inflight_path = _shard_files(out_dir, shard)
    report = RaySweepReport()
    todo, crashed = _todo(cases, shard, journal, out_dir, inflight_path, resume_from, retry_crashed, report)
    waiting = deque(chunked(todo, chunk_cases))
    tasks = _Tasks(ray, remote, _worker_died_errors(ray), make_sweeper, journal, report, waiting)
    if tasks.waiting:
        slots.limit()  # a cluster without room for a task: said before anything starts
    bar = tqdm(total=len(todo), desc=f"sweep ray {shard[0]}/{shard[1]}", unit="case", disable=not progress)
    with StopSignals() as stop:  # records SIGINT / SIGTERM; the loop below looks at it between waits
        tasks.run(slots, stop, time_budget_s, bar, lambda chunk, exc: after_worker_death(
            chunk, exc, tasks.waiting, crashed, inflight_path, max_retries, report))  # fmt: skip
        report.left_for_later = sum(map(len, tasks.waiting)) + sum(map(len, tasks.pending.values()))
        report.interrupted = stop.signum
        if not crashed:
            inflight_path.unlink(missing_ok=True)
        report.part = journal.compact(out_dir, f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{tag}")
    if report.interrupted:
        log.warning("sweep %s on Ray stopped by signal %d", tag, report.interrupted)
    return report


def _remote_chunks(ray: Any, task_resources: Mapping[str, float], max_retries: int) -> Any:
    """:func:`measure_chunk` as a Ray remote function asking ``task_resources``, retried ``max_retries`` times."""
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    return ray.remote(max_retries=max_retries, **task_options(task_resources))(measure_chunk)


def _shard_files(out_dir: Path, shard: tuple[int, int]) -> tuple[str, Journal, Path]:
    """The shard's tag, journal and in-flight counts in ``out_dir`` (made where missing): a local sweep's files of
    the shard, so that either continues the other."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{shard[0]}of{shard[1]}"
    return tag, Journal(out_dir / f"journal-{tag}.jsonl"), out_dir / f"inflight-{tag}.json"


@dataclass
class _Tasks:
    """The chunk tasks of one sweep on Ray: those waiting to be submitted, those submitted, and what came back."""

    ray: Any
    remote: Any  # measure_chunk as a Ray remote function
    died: tuple[type[BaseException], ...]  # the errors of a task whose worker died (_worker_died_errors)
    make_sweeper: Callable[[], Sweeper]
    journal: Journal
    report: RaySweepReport
    waiting: deque[list[SweepCase]]
    pending: dict[Any, list[SweepCase]] = field(default_factory=dict)
    task_s: list[float] = field(default_factory=list)  # the time each finished task took

    def run(self, slots: TaskSlots, stop: StopSignals, time_budget_s: float | None, bar: Any,
            on_died: Callable[[list[SweepCase], BaseException], None]) -> None:  # fmt: skip
        """Submit and collect tasks until none is left, the budget allows no further one, or a signal came; then
        cancel those still pending (nothing of this sweep keeps running on the cluster) and close ``bar``."""
        sweep_id, start = uuid.uuid4().hex, time.monotonic()
        try:
            while (self.waiting or self.pending) and stop.signum is None:
                limit = slots.limit()
                while self.waiting and len(self.pending) < limit and task_fits_budget(
                        time_budget_s, time.monotonic() - start, self.task_s, len(self.pending), limit):  # fmt: skip
                    chunk = self.waiting.popleft()
                    self.pending[self.remote.remote(sweep_id, self.make_sweeper, chunk)] = chunk
                if not self.pending:
                    return  # the budget allows no further task
                done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=_WAIT_S)
                for ref in done:
                    self._collect(ref, self.pending.pop(ref), bar, on_died)
        finally:
            for ref in self.pending:
                self.ray.cancel(ref)  # Python code stops between two statements, as a local sweep's case in flight
            bar.close()

    def _collect(self, ref: Any, chunk: list[SweepCase], bar: Any, on_died: Callable[..., None]) -> None:
        """A finished task's result recorded; a lost worker handed to ``on_died``; the sweep's own errors raised."""
        try:
            result: ChunkResult = self.ray.get(ref)
        except self.died as exc:
            on_died(chunk, exc)
            return
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ValueError):  # the sweep's own one-line errors (no GPU, a space)
                raise ValueError(str(cause)) from exc
            raise
        self._record(result, bar)

    def _record(self, result: ChunkResult, bar: Any) -> None:
        """A finished task's cases into the journal, and its worker and time into the report."""
        for key, rows in result.cases:
            self.journal.append(key, rows, result.environment)
        self.report.measured += len(result.cases)
        self.report.tasks += 1
        self.report.workers[result.worker] = self.report.workers.get(result.worker, 0) + len(result.cases)
        self.task_s.append(result.seconds)
        bar.update(len(result.cases))
        bar.set_postfix_str(f"{len(self.report.workers)} workers")


def _todo(cases, shard, journal, out_dir, inflight_path, resume_from, retry_crashed, report):
    """The shard's cases to measure, and the crash counts of the shard, after recovering what a killed run left in
    the journal: as :func:`~algosel.measure.sweep.run_sweep` starts."""
    rows, _, warnings = journal.read()
    for w in warnings:
        log.warning(w)
    in_parts = done_case_keys(out_dir)
    journal.compact(out_dir, f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{shard[0]}of{shard[1]}-recovered",
                    skip_cases=in_parts)  # fmt: skip
    done = in_parts | {r["case_key"] for r in rows} | done_case_keys(*resume_from)
    crashed = {} if retry_crashed else read_inflight(inflight_path)
    crashed = {key: n for key, n in crashed.items() if key not in done}
    todo = []
    for case in shard_cases(cases, shard):
        if case.key in done:
            report.skipped_done += 1
        elif crashed.get(case.key, 0) >= 2:
            log.warning("skipping %s: it ended the sweep process twice", case.key)
            report.skipped_crashed += 1
        else:
            todo.append(case)
    return todo, crashed


def task_fits_budget(budget_s: float | None, elapsed_s: float, task_s: list[float], pending: int, limit: int) -> bool:
    """Whether a task submitted ``elapsed_s`` into the sweep, behind ``pending`` others, would end within the budget:
    it waits for its share of the tasks ahead of it beyond one a slot (``limit // 2`` slots), then takes the mean
    task time (no estimate before the first task ends: it is submitted)."""
    if budget_s is None or not task_s:
        return True
    mean = sum(task_s) / len(task_s)
    slots = max(1, limit // 2)
    ahead = max(0, pending - slots + 1)
    return elapsed_s + mean * (1 + ahead / slots) <= budget_s


def after_worker_death(chunk, exc, waiting, crashed, inflight_path, max_retries, report) -> None:
    """A task whose worker died on every attempt: a chunk goes back as tasks of one case (first in the queue), a
    single case is counted as having ended its process (skipped by later runs)."""
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if len(chunk) > 1:
        log.warning("a task of %d cases lost its worker %d times (%s); running them one a task", len(chunk),
                    max_retries + 1, why)  # fmt: skip
        waiting.extendleft([case] for case in reversed(chunk))
        report.split_chunks += 1
        return
    (case,) = chunk
    log.warning("skipping %s: its task lost its worker %d times (%s)", case.key, max_retries + 1, why)
    crashed[case.key] = crashed.get(case.key, 0) + max_retries + 1
    write_text(inflight_path, json.dumps(crashed))
    report.skipped_crashed += 1


def workers_line(report: RaySweepReport) -> str:
    """``on 3 workers of 2 hosts (41 tasks)``: where a sweep's cases ran, for its summary line."""
    hosts = Counter(worker.rpartition(":")[0] for worker in report.workers)
    return f"on {len(report.workers)} workers of {len(hosts)} hosts ({report.tasks} tasks)"
