"""PyTorch's default path: what users get today with ``torch.backends.cudnn.benchmark = False``.

Forward is ``F.conv2d``; both gradients are ``aten.convolution_backward`` with one output mask bit set, which is
what autograd calls for a ``Conv2d``. PyTorch picks its cuDNN engine config by cuDNN's heuristic (and caches
the plan per shape in the process).
"""

from __future__ import annotations

import torch

from algosel.operands import Operands, pytorch_direction
from algosel.problem import ConvProblem
from algosel.spaces.base import Candidate, CandidateSpace, PreparedCandidate


def pytorch_conv(problem: ConvProblem, ops: Operands) -> torch.Tensor:
    """Run the problem's direction through PyTorch's own convolution entry points."""
    return pytorch_direction(problem, ops.x, ops.w, ops.y)


class _PreparedDefault(PreparedCandidate):
    def __init__(self, problem: ConvProblem, candidate: Candidate):
        self.problem = problem
        self.candidate = candidate
        self.workspace_bytes = 0  # PyTorch allocates its workspace itself; not visible from outside

    def run(self, ops: Operands) -> torch.Tensor:
        # cudnn.benchmark is off under operands.math_mode, which the sweeper holds around every run.
        return pytorch_conv(self.problem, ops)


class PyTorchDefaultSpace(CandidateSpace):
    """The single candidate ``pytorch:default``."""

    name = "pytorch"
    label = "PyTorch's default (cudnn.benchmark = False)"
    from_lists = False

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        return [self.candidate("default", problem.direction)]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        return _PreparedDefault(problem, candidate)

    def engine_code(self, engine_id: int, knobs: str, name: str) -> int:
        return 1002

    def offline_candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self.enumerate(problem)

    def runner(self, problem: ConvProblem, candidate: Candidate) -> None:
        return None  # the runtime runs PyTorch's own path for it
