"""The interface every candidate space implements.

A *candidate* is one way to compute a :class:`~algosel.problem.ConvProblem`: a cuDNN engine config, a GEMM
lowering through cuBLAS, PyTorch's default path, a legacy cuDNN algorithm. A *space* enumerates the
candidates valid for a problem and prepares one of them for running. Preparing may fail (a plan that does not
build): that is a :class:`CandidateError` carrying the status that the sweeper records.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch

from algosel.operands import Operands
from algosel.problem import ConvProblem

#: Record statuses. Everything but ``ok`` is a failure kept as a row, with its reason.
STATUSES: tuple[str, ...] = (
    "ok",  # built, ran, matched the reference, timed
    "build_failed",  # the candidate could not be prepared for this problem
    "run_failed",  # it raised (or the device reported an error) while running
    "wrong_result",  # it ran but its output differs from the float64 reference beyond tolerance
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

    ``rank_a``/``rank_b``/``rank_fallback`` are positions in cuDNN's heuristic lists of modes A, B and
    FALLBACK (``-1``: absent from that list); rank 0 of mode A is the vendor heuristic's own choice.
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
