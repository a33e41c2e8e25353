"""The sweeper: measure every candidate of every space on the problems of a case.

A *case* (:class:`SweepCase`) is one shape x dtype x layout; the sweeper measures its three directions together
(they share the shape, and the runtime hook needs all three). For each problem it

1. makes several operand sets of fresh random values and the reference result of the first (float32, TF32 off);
2. enumerates the candidates of every space;
3. prepares each candidate (a build failure is a record), skips one needing more workspace than the limit
   (a record), runs it once on a poisoned output and compares with the reference (a mismatch is a record,
   never a timing), then times it with the injected timer.

:func:`algosel.measure.sweep.run_sweep` drives a :class:`Sweeper` over many cases (resumption, sharding, a time
budget, signals); the runtime's measured shortlist calls :meth:`Sweeper.measure_candidates` directly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from algosel.measure.timing import Timer
from algosel.operands import TOLERANCE, Operands, make_operands, math_mode, reference, relative_error
from algosel.problem import ConvProblem
from algosel.records.schema import Record
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace

log = logging.getLogger(__name__)

#: Default limit on a candidate's workspace (larger ones are recorded as ``workspace_exceeded``).
DEFAULT_WORKSPACE_LIMIT_BYTES = 8 << 30


@dataclass(frozen=True)
class SweepCase:
    """One shape x dtype x layout to measure in all three directions; ``source`` says where it came from."""

    problem: ConvProblem
    source: str

    @property
    def key(self) -> str:
        return self.problem.case_key


def _row(problem: ConvProblem, source: str, cand: Candidate, env_id: str, **measured: Any) -> dict[str, Any]:
    return Record.of(problem, source, cand, env_id, **measured).to_dict()


def _engine_kind(cand: Candidate, problem: ConvProblem) -> tuple:
    """What the sweeper's slow-build rule remembers of an engine: the engine and the kind of problem it built for."""
    return (cand.space, cand.engine_id, problem.direction, problem.dtype, problem.layout, problem.groups > 1)


class Sweeper:
    """Measures the candidates of ``spaces`` on problems (see the module docstring).

    Parameters
    ----------
    spaces : sequence of CandidateSpace
    timer : Timer
        :class:`~algosel.measure.timing.CudaEventTimer` on a GPU, :class:`~algosel.measure.timing.FakeTimer` in tests.
    environment : dict
        The environment record (its ``env_id`` goes into every row).
    device : str
        Where operands live (``"cuda"``; ``"cpu"`` for tests of the GEMM and PyTorch spaces).
    operand_sets : int
        Operand sets rotated through while timing (no cache-warm inputs).
    workspace_limit_bytes : int
    reference : str
        What a candidate's result is checked against: ``"exact"``, the problem computed in float32 with TF32 off
        (sweeps); ``"first"``, the result of the first candidate measured (the runtime's measured shortlist lists
        PyTorch's default first: a candidate must agree with what PyTorch computes, and no reference computation
        of its own is paid, which costs a new PyTorch plan per problem), or the exact one where that fails.
    math : str
        ``"problem"``: PyTorch's TF32 switches set for the problem's dtype (:func:`~algosel.operands.math_mode`);
        ``"caller"``: left as the caller has them (the runtime times candidates under the switches its calls
        run with: PyTorch's plan cache is keyed by them, so its default runs on the plan the process already has).
    slow_build_s : float or None
        The runtime's limit on building: an engine whose candidate took longer than this to prepare, and was not the
        fastest on its problem, is not prepared again by this sweeper for problems of the same kind (direction,
        dtype, layout, grouped or not): its other knobs on this problem and later ones are left out, without a
        record. The kind matters: engines 19 and 16 of a float16 depthwise 7x7 weight gradient are 1.5-4.3x slower
        than PyTorch's default in NHWC and 5-11x faster in NCHW (ConvNeXt-T's layers, ``data/sweeps/h200-zoo-nhwc``),
        and one network can run both layouts. Such a build (0.14-1.04 s for those engines on the H200, against 2-14
        ms for the others) is paid once per problem and process; sweeps keep ``None`` (every candidate measured).
    clock_s : callable
        Wall time in seconds (``time.perf_counter``): what builds are timed by and ``deadline_s`` is read against.
        Tests pass a scripted clock.
    exact_reference : callable
        ``(problem, operands) -> tensor``, the exact result a candidate is checked against
        (:func:`algosel.operands.reference`). Tests pass one that counts or refuses its calls.
    """

    def __init__(
        self,
        spaces: Sequence[CandidateSpace],
        timer: Timer,
        environment: dict[str, Any],
        device: str = "cuda",
        operand_sets: int = 3,
        workspace_limit_bytes: int = DEFAULT_WORKSPACE_LIMIT_BYTES,
        seed: int = 0,
        reference: str = "exact",
        math: str = "problem",
        slow_build_s: float | None = None,
        clock_s: Callable[[], float] = time.perf_counter,
        exact_reference: Callable[[ConvProblem, Operands], torch.Tensor] = reference,
    ):
        if reference not in ("exact", "first"):
            raise ValueError(f"reference must be 'exact' or 'first', got {reference!r}")
        if math not in ("problem", "caller"):
            raise ValueError(f"math must be 'problem' or 'caller', got {math!r}")
        self.reference = reference
        self.math = math
        self.spaces = list(spaces)
        self.timer = timer
        self.environment = environment
        self.device = device
        self.operand_sets = operand_sets
        self.workspace_limit_bytes = workspace_limit_bytes
        self.seed = seed
        self.slow_build_s = slow_build_s
        self.clock_s = clock_s
        self.exact_reference = exact_reference
        #: The engines whose plan took longer than ``slow_build_s`` to build and was not the fastest of its problem,
        #: with the kind of problem (see ``_engine_kind``): not built again by this sweeper for problems of the kind.
        self.slow_engines: set[tuple] = set()
        #: Candidates left out because their engine is in ``slow_engines``.
        self.skipped_slow_builds = 0

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def measure_problem(self, problem: ConvProblem, source: str = "") -> list[dict[str, Any]]:
        """Records of every candidate of every space on one problem (one direction)."""

        def listed():
            for space in self.spaces:
                try:
                    candidates = space.enumerate(problem)
                except CandidateError as exc:
                    yield space, Candidate(space.name, "*"), exc
                    continue
                for cand in candidates:
                    yield space, cand, None
                space.release(problem)

        return self._measure(problem, source, listed())

    def measure_candidates(
        self,
        problem: ConvProblem,
        candidates: Sequence[tuple[CandidateSpace, Candidate]],
        source: str = "runtime",
        deadline_s: float | None = None,
    ) -> list[dict[str, Any]]:
        """Records of the given candidates on one problem, checked and timed as in a sweep (the runtime's measured
        shortlist). A cuDNN candidate that was not enumerated here is built by name. ``deadline_s`` (a
        value of ``clock_s``, ``time.perf_counter()`` by default): no candidate after the first is started past it
        (those left have no record)."""

        def listed():
            for i, (space, cand) in enumerate(candidates):
                if i and deadline_s is not None and self.clock_s() > deadline_s:
                    return
                yield space, cand, None

        return self._measure(problem, source, listed())

    def _measure(self, problem: ConvProblem, source: str, listed) -> list[dict[str, Any]]:
        env = self.environment["env_id"]
        rows: list[dict[str, Any]] = []
        generator = torch.Generator(device=self.device).manual_seed(self.seed ^ zlib.crc32(problem.key.encode()))
        with math_mode(problem) if self.math == "problem" else contextlib.nullcontext():
            opsets = [make_operands(problem, self.device, generator) for _ in range(self.operand_sets)]
            ref = self.exact_reference(problem, opsets[0]) if self.reference == "exact" else None
            best_ms: float | None = None
            slow: list[tuple[tuple, dict[str, Any]]] = []  # built slowly here, with their rows
            for space, cand, error in listed:
                if error is not None:
                    rows.append(_row(problem, source, cand, env, status=error.status, reason=error.reason))
                    continue
                engine = _engine_kind(cand, problem)
                if engine in self.slow_engines:  # only engines (engine_id >= 0) are ever added
                    self.skipped_slow_builds += 1
                    continue
                if ref is None and rows:  # a listing error came first: the exact reference checks the rest
                    ref = self.exact_reference(problem, opsets[0])
                kept: list[torch.Tensor] = []
                built_s: list[float] | None = [] if self.slow_build_s is not None else None
                row = self._measure_candidate(space, problem, source, cand, opsets, ref, best_ms, kept, built_s)
                if ref is None:  # this first candidate's result checks the others
                    ref = kept[0] if kept else self.exact_reference(problem, opsets[0])
                rows.append(row)
                if row["status"] == "ok":
                    best_ms = row["time_ms_median"] if best_ms is None else min(best_ms, row["time_ms_median"])
                if built_s and cand.engine_id >= 0 and built_s[0] > self.slow_build_s:
                    slow.append((engine, row))
                    self.slow_engines.add(engine)  # its other knobs on this problem are left out too
            for engine, row in slow:  # the fastest here paid for its build: later problems may build it again
                if row["status"] == "ok" and row["time_ms_median"] <= best_ms:
                    self.slow_engines.discard(engine)
        del opsets, ref
        return rows

    def _measure_candidate(self, space, problem, source, cand, opsets, ref, best_ms, kept, built_s=None
                           ) -> dict[str, Any]:  # fmt: skip
        """The candidate's record; with ``ref`` None its result is the reference, appended to ``kept``; the wall
        time its preparation took (s) is appended to ``built_s``."""
        row = functools.partial(_row, problem, source, cand, self.environment["env_id"])
        t0 = self.clock_s() if built_s is not None else 0.0
        try:
            prepared = space.prepare(problem, cand)
        except CandidateError as exc:
            return row(status=exc.status, reason=exc.reason)
        finally:
            if built_s is not None:
                built_s.append(self.clock_s() - t0)
        workspace = int(prepared.workspace_bytes)
        row = functools.partial(row, workspace_bytes=workspace)
        try:
            if workspace > self.workspace_limit_bytes:
                reason = f"needs {workspace} bytes, limit {self.workspace_limit_bytes}"
                return row(status="workspace_exceeded", reason=reason)
            # Poison the output so that elements the candidate fails to write cannot pass the check.
            opsets[0].output(problem.direction).fill_(math.nan)
            try:
                out = prepared.run(opsets[0])
                self._sync()
                if ref is None:
                    kept.append(out.double())  # the output buffer is poisoned again for the next candidate
                    err = 0.0
                else:
                    err = relative_error(out, ref)
            except (RuntimeError, CandidateError, torch.cuda.OutOfMemoryError) as exc:
                return row(status="run_failed", reason=f"{type(exc).__name__}: {exc}"[:500])
            limit = TOLERANCE[problem.dtype]
            if not err <= limit:
                return row(status="wrong_result", max_rel_error=err, reason=f"relative error {err:.3g} > {limit:g}")
            try:
                m = self.timer.measure(lambda i: prepared.run(opsets[i % len(opsets)]), cand.candidate_id, best_ms)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                reason = f"while timing: {type(exc).__name__}: {exc}"[:500]
                return row(status="run_failed", max_rel_error=err, reason=reason)
            return row(
                time_ms_median=m.median_ms,
                time_ms_p25=m.p25_ms,
                time_ms_p75=m.p75_ms,
                time_ms_min=m.min_ms,
                repeats=m.repeats,
                starved=m.starved,
                host_overhead_us=m.host_overhead_us,
                max_rel_error=err,
            )
        finally:
            prepared.close()

    def measure_case(self, case: SweepCase) -> list[dict[str, Any]]:
        """Records of all three directions of a case."""
        rows = []
        for problem in case.problem.directions():
            rows.extend(self.measure_problem(problem, case.source))
        return rows
