"""PyTorch's default path: what users get today with ``torch.backends.cudnn.benchmark = False``.

Forward is ``F.conv2d``; both gradients are ``aten.convolution_backward`` with one output mask bit set, which is
what autograd calls for a ``Conv2d``. PyTorch picks its cuDNN engine config by cuDNN's heuristic (and caches
the plan per shape in the process).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from algosel.candidates.base import Candidate, CandidateSpace, PreparedCandidate
from algosel.operands import Operands, conv_args
from algosel.problem import ConvProblem


def pytorch_conv(problem: ConvProblem, ops: Operands) -> torch.Tensor:
    """Run the problem's direction through PyTorch's own convolution entry points."""
    args = conv_args(problem)
    if problem.direction == "fwd":
        return F.conv2d(ops.x, ops.w, None, **args)
    bwd_data = problem.direction == "bwd_data"
    grads = torch.ops.aten.convolution_backward(
        ops.y,
        ops.x,
        ops.w,
        None,
        list(args["stride"]),
        list(args["padding"]),
        list(args["dilation"]),
        False,
        [0, 0],
        args["groups"],
        [bwd_data, not bwd_data, False],
    )
    return grads[0] if bwd_data else grads[1]


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

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        return [Candidate(space=self.name, name="default")]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        return _PreparedDefault(problem, candidate)
