"""The interface every candidate space implements.

A *candidate* is one way to compute a :class:`~algosel.problem.ConvProblem`: a cuDNN engine config, a GEMM
lowering through cuBLAS, PyTorch's default path, a legacy cuDNN algorithm. A *space* is the family a candidate
belongs to, and it owns everything algosel knows about that family:

- **measurement**: :meth:`CandidateSpace.enumerate` lists the candidates valid for a problem (live, on a GPU) and
  :meth:`~CandidateSpace.prepare` makes one runnable. Preparing may fail (a plan that does not build): that is a
  :class:`CandidateError` carrying the status that the sweeper records;
- **the id codec**: a candidate id is ``<space>:<name>``; :meth:`~CandidateSpace.decode` splits a name into the
  ``engine_id`` and ``knobs`` columns of the records, :meth:`~CandidateSpace.candidate` builds a candidate from a
  name;
- **features**: :meth:`~CandidateSpace.engine_code` (a category per candidate family) and
  :meth:`~CandidateSpace.knob_values` (numeric parameters) fill the selector's candidate columns;
- **offline rows**: :meth:`~CandidateSpace.offline_candidates` says which candidates a problem has without a GPU
  (GEMM lowering and PyTorch's default follow from the problem; cuDNN's lists are known only from records or a
  live query);
- **the runtime runner**: :meth:`~CandidateSpace.runner` is what the runtime hook executes for a chosen candidate.

Spaces are listed once, in the registry of :mod:`algosel.spaces`.
"""

from __future__ import annotations

import abc
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from algosel.problem import ConvProblem

if TYPE_CHECKING:  # annotations only: a space's codec and features, which records and selectors use, need no torch
    import torch

    from algosel.operands import Operands

#: Record statuses. Everything but ``ok`` is a failure kept as a row, with its reason.
STATUSES: tuple[str, ...] = (
    "ok",  # built, ran, matched the reference, timed
    "build_failed",  # the candidate could not be prepared for this problem
    "run_failed",  # it raised (or the device reported an error) while running
    "wrong_result",  # it ran but its output differs from the float32 (TF32 off) reference beyond tolerance
    "workspace_exceeded",  # it needs more workspace than the sweep's limit
)


class CandidateError(Exception):
    """A candidate failed to build or run; ``status`` is one of :data:`STATUSES`."""

    def __init__(self, status: str, reason: str):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Candidate:
    """One way to compute a problem, as the records and the ranker see it.

    ``engine_id`` and ``knobs`` are the space's own reading of ``name`` (:meth:`CandidateSpace.decode`: a cuDNN
    engine id and knob values, a legacy algorithm and math type; ``-1`` and ``""`` where the space has none).
    ``rank_a``/``rank_b``/``rank_fallback`` are positions in the vendor heuristic's lists the space was enumerated
    from (cuDNN's modes A, B and FALLBACK; the legacy v7 heuristic as ``rank_a``), ``-1`` where absent: rank 0 of
    ``rank_a`` is the vendor's own choice.
    """

    space: str
    name: str
    engine_id: int = -1
    knobs: str = ""
    rank_a: int = -1
    rank_b: int = -1
    rank_fallback: int = -1
    notes: tuple[str, ...] = field(default=())

    @property
    def candidate_id(self) -> str:
        return f"{self.space}:{self.name}"


def split_candidate_id(candidate_id: str) -> tuple[str, str]:
    """``"cudnn:eng0_k2=1"`` -> ``("cudnn", "eng0_k2=1")``."""
    space, sep, name = candidate_id.partition(":")
    if not sep:
        raise ValueError(f"not a candidate id (space:name): {candidate_id!r}")
    return space, name


class PreparedCandidate(abc.ABC):
    """A candidate ready to run on one problem."""

    candidate: Candidate
    workspace_bytes: int = 0

    @abc.abstractmethod
    def run(self, ops: Operands) -> torch.Tensor:
        """Compute the problem's direction on ``ops`` (queued on the current stream); return the result."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`CandidateSpace.prepare` allocated."""


class CandidateSpace(abc.ABC):
    """A family of candidates (see the module docstring)."""

    #: Short name, the prefix of every candidate id of the space.
    name: str = ""
    #: What the space is, for reports and messages.
    label: str = ""
    #: Whether a problem's candidates come from a vendor heuristic's lists, known only from records or a live query
    #: (then :meth:`offline_candidates` is ``None``), rather than from the problem alone.
    from_lists: bool = True

    # ------------------------------------------------------------------------------------------ measurement
    def available(self) -> str | None:
        """``None`` if the space can run here, else why not (a missing library, no GPU)."""
        return None

    @abc.abstractmethod
    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        """The candidates of this space valid for ``problem`` (empty when none applies)."""

    @abc.abstractmethod
    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        """Make ``candidate`` runnable on ``problem``; raises :class:`CandidateError` if it cannot be."""

    def release(self, problem: ConvProblem) -> None:  # noqa: B027 - optional hook
        """Drop any state kept between :meth:`enumerate` and :meth:`prepare` for ``problem``."""

    # ------------------------------------------------------------------------------------------- id codec
    def decode(self, name: str, direction: str) -> tuple[int, str]:
        """The ``(engine_id, knobs)`` columns of a candidate name in a direction (the default: none)."""
        return -1, ""

    def candidate(self, name: str, direction: str, **fields: object) -> Candidate:
        """The candidate of this space called ``name`` for a problem of ``direction`` (``fields``: ranks, notes)."""
        engine_id, knobs = self.decode(name, direction)
        return Candidate(space=self.name, name=name, engine_id=engine_id, knobs=knobs, **fields)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------------- features
    def engine_code(self, engine_id: int, knobs: str, name: str) -> int:
        """A non-negative category for the ranker, one per candidate family (the default: from the name, in
        3000..3999, so that a space without a code of its own still tells its candidates apart)."""
        return 3000 + zlib.crc32(f"{self.name}:{name}".encode()) % 1000

    def knob_values(self, knobs: str) -> Mapping[int, int]:
        """Numeric parameters by knob id, for the ranker's ``knob_<id>`` columns (the default: none)."""
        return {}

    # ------------------------------------------------------------------------------------------- offline
    def offline_candidates(self, problem: ConvProblem) -> list[Candidate] | None:
        """The candidates ``problem`` has in this space, known without a GPU; ``None`` for a space whose candidates
        come from lists (:attr:`from_lists`): records or a live query."""
        return None

    # ------------------------------------------------------------------------------------------- runtime
    def runner(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate | None:
        """What the runtime hook executes for ``candidate`` on ``problem``; ``None``: PyTorch's own path.

        Raises :class:`CandidateError` where it cannot be made (the default prepares it as for measurement).
        """
        return self.prepare(problem, candidate)
