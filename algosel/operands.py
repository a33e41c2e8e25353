"""Operand tensors for a problem, its numeric mode, and the reference result (float32 with TF32 off).

Every direction uses the same three tensors ``x`` (input), ``w`` (weight) and ``y`` (output): ``fwd`` reads
``x, w`` and produces ``y``; ``bwd_data`` reads ``y`` (as dy) and ``w`` and produces ``x`` (dx);
``bwd_filter`` reads ``x`` and ``y`` (as dy) and produces ``w`` (dw). Tensors are always indexed NCHW /
KCRS; the ``nhwc`` layout is PyTorch's ``channels_last`` memory format of the same logical tensor.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from algosel.problem import DTYPE_TABLE, ConvProblem

#: The torch storage dtype of each problem dtype (from :data:`~algosel.problem.DTYPE_TABLE`).
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, d.torch_name) for name, d in DTYPE_TABLE.items()}

#: Largest relative L2 error accepted against the reference, per dtype (see :class:`~algosel.problem.DType`).
TOLERANCE: dict[str, float] = {name: d.tolerance for name, d in DTYPE_TABLE.items()}


#: The operand each direction produces (see the module docstring).
OUTPUT_ROLE: dict[str, str] = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}


@dataclass
class Operands:
    """One set of operand tensors for a problem (see the module docstring for the roles)."""

    x: torch.Tensor
    w: torch.Tensor
    y: torch.Tensor

    def output(self, direction: str) -> torch.Tensor:
        """The tensor a direction writes: y, x (dx) or w (dw)."""
        return getattr(self, OUTPUT_ROLE[direction])

    def inputs(self, direction: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The two tensors a direction reads, in the order (x, w), (dy, w) or (x, dy)."""
        if direction == "fwd":
            return self.x, self.w
        if direction == "bwd_data":
            return self.y, self.w
        return self.x, self.y


def memory_format(problem: ConvProblem) -> torch.memory_format:
    return torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format


def empty_like_layout(shape: tuple[int, ...], problem: ConvProblem, device: torch.device | str) -> torch.Tensor:
    """An uninitialised 4-D tensor of the problem's dtype and layout."""
    return torch.empty(shape, dtype=TORCH_DTYPES[problem.dtype], device=device).contiguous(
        memory_format=memory_format(problem)
    )


def make_operands(
    problem: ConvProblem, device: torch.device | str, generator: torch.Generator | None = None
) -> Operands:
    """Fresh operands filled with uniform random values in [-1, 1) (never zeros: they hide unwritten
    outputs and can run faster than real data)."""

    def rand(shape: tuple[int, ...]) -> torch.Tensor:
        t = empty_like_layout(shape, problem, device)
        # uniform_ fills in place, so the layout chosen above is kept.
        return t.uniform_(-1.0, 1.0, generator=generator)

    return Operands(x=rand(problem.x_shape), w=rand(problem.w_shape), y=rand(problem.y_shape))


def conv_args(problem: ConvProblem) -> dict:
    """Keyword arguments of ``F.conv2d`` for the problem's geometry."""
    return {
        "stride": (problem.stride_h, problem.stride_w),
        "padding": (problem.pad_h, problem.pad_w),
        "dilation": (problem.dilation_h, problem.dilation_w),
        "groups": problem.groups,
    }


def reference(problem: ConvProblem, ops: Operands, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The result of the problem's direction on ``ops``, computed in ``dtype`` on the operands' device.

    The default, float32 with TF32 off (set here, whatever the caller's math mode), is within ~1e-6 of the exact
    result: far below every :data:`TOLERANCE`, and much faster on a GPU than float64 (which has no tensor-core
    convolution kernels). Pass ``torch.float64`` for an exact reference on small problems.
    """
    x, w, y = (t.to(dtype) for t in (ops.x, ops.w, ops.y))
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        return pytorch_direction(problem, x, w, y)


def pytorch_direction(problem: ConvProblem, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The problem's direction through PyTorch's own entry points, as autograd calls them for a ``Conv2d``:
    ``F.conv2d`` for ``fwd`` (reads x, w), ``aten.convolution_backward`` with one output for ``bwd_data``
    (reads y as dy, and w) and ``bwd_filter`` (reads x and y as dy)."""
    args = conv_args(problem)
    if problem.direction == "fwd":
        return F.conv2d(x, w, None, **args)
    mask = [problem.direction == "bwd_data", problem.direction == "bwd_filter", False]
    grads = torch.ops.aten.convolution_backward(
        y,
        x,
        w,
        None,
        list(args["stride"]),
        list(args["padding"]),
        list(args["dilation"]),
        False,
        [0, 0],
        args["groups"],
        mask,
    )
    return grads[0] if problem.direction == "bwd_data" else grads[1]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``|out - ref|_2 / |ref|_2`` in float64; ``inf`` for a NaN/inf result or a shape mismatch."""
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf")
    diff = out.double() - ref
    err = (torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref).clamp_min(1e-30)).item()
    return float("inf") if math.isnan(err) else err  # NaN never passes


@contextlib.contextmanager
def math_mode(problem: ConvProblem) -> Iterator[None]:
    """Set PyTorch's TF32 switches for the problem's dtype, restoring them on exit.

    ``float32`` allows TF32 in both cuDNN and cuBLAS so that every candidate of a float32 problem works under
    one stated math mode; ``float32_strict`` forbids it in both. cuDNN's benchmark mode is turned off, so
    that PyTorch's default path is the heuristic's choice, as users get it.
    """
    allow = DTYPE_TABLE[problem.dtype].tf32
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.allow_tf32, matmul.allow_tf32, cudnn.benchmark, cudnn.deterministic)
    cudnn.allow_tf32, matmul.allow_tf32, cudnn.benchmark, cudnn.deterministic = allow, allow, False, False
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32, cudnn.benchmark, cudnn.deterministic = saved
