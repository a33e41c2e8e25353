"""GEMM lowering: a convolution that *is* a matrix product, computed by ``torch.matmul`` (cuBLAS on a GPU).

Two cases qualify (groups = 1):

- **fully connected mode**: the kernel covers the whole unpadded input (R = H, S = W, no padding or
  dilation), so the output is 1x1 and ``y[N, K] = x[N, C*H*W] @ w[K, C*R*S]^T``;
- **pointwise**: a 1x1 kernel with stride 1 and no padding, so every pixel is a row of one matrix:
  in NHWC ``y[NHW, K] = x[NHW, C] @ w[K, C]^T``; in NCHW a batched product ``y[n] = w[K, C] @ x[n][C, HW]``.

The same identities give both gradients. These functions work on any device and are the ones the runtime
hook calls, so they never copy an operand unless the layout forces it (NCHW pointwise ``bwd_filter``).

Math mode: a ``float32`` problem allows TF32 (as PyTorch's convolutions do by default), ``float32_strict`` does
not; the prepared candidate sets cuBLAS's TF32 switch accordingly around its product, whatever the caller's
``torch.backends.cuda.matmul.allow_tf32`` says, so that the records and the runtime compute the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from algosel.operands import Operands
from algosel.problem import DTYPE_TABLE, ConvProblem
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate

#: The GEMM kinds, with their category codes in the selector's features.
_ENGINE_CODES: Mapping[str, int] = {"fc": 1000, "pointwise": 1001}


def gemm_kind(problem: ConvProblem) -> str | None:
    """``"fc"``, ``"pointwise"`` or ``None`` when the problem is not a plain matrix product."""
    if problem.is_fully_connected:
        return "fc"
    if problem.is_pointwise:
        return "pointwise"
    return None


def _rows(t: torch.Tensor, nhwc: bool) -> torch.Tensor:
    """Flatten a 4-D tensor to (dim0, rest) in its memory order: C*H*W for NCHW, H*W*C for NHWC."""
    if nhwc:
        return t.permute(0, 2, 3, 1).reshape(t.shape[0], -1)
    return t.reshape(t.shape[0], -1)


def _unrows(m: torch.Tensor, shape: tuple[int, int, int, int], nhwc: bool) -> torch.Tensor:
    """Inverse of :func:`_rows`: view a (dim0, rest) matrix as the 4-D tensor ``shape`` (NCHW indexed)."""
    n, c, h, w = shape
    if nhwc:
        return m.reshape(n, h, w, c).permute(0, 3, 1, 2)
    return m.reshape(n, c, h, w)


def gemm_conv(problem: ConvProblem, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Compute ``problem.direction`` as a matrix product.

    ``a, b`` are the direction's inputs as :meth:`Operands.inputs` orders them: (x, w) for ``fwd``,
    (dy, w) for ``bwd_data``, (x, dy) for ``bwd_filter``. Returns y, dx or dw, in the problem's layout.
    ``bias`` (``fwd`` only, shape (K,)) is added, inside the GEMM (``addmm``) where the output is one matrix.
    """
    kind = gemm_kind(problem)
    if kind is None:
        raise ValueError(f"problem {problem.key} is not a GEMM (needs fully connected mode or pointwise 1x1)")
    nhwc = problem.layout == "nhwc"
    d = problem.direction
    if bias is not None and d != "fwd":
        raise ValueError(f"a bias is added in the forward direction only, not in {d}")
    if kind == "fc":
        if d == "fwd":  # y[N,K] = x[N,CHW] @ w[K,CHW]^T (+ bias, as nn.Linear fuses it)
            x2, w2 = _rows(a, nhwc), _rows(b, nhwc)
            y2 = x2 @ w2.t() if bias is None else torch.addmm(bias, x2, w2.t())
            return _unrows(y2, problem.y_shape, nhwc)
        if d == "bwd_data":  # dx[N,CHW] = dy[N,K] @ w[K,CHW]
            return _unrows(_rows(a, False) @ _rows(b, nhwc), problem.x_shape, nhwc)
        # dw[K,CHW] = dy[N,K]^T @ x[N,CHW]
        return _unrows(_rows(b, False).t() @ _rows(a, nhwc), problem.w_shape, nhwc)

    n, c, h, w = problem.x_shape
    k = problem.k
    wm = b.reshape(k, c) if d != "bwd_filter" else None  # a 1x1 weight is (K, C) in both layouts
    if nhwc:  # every pixel is a row: (N*H*W, C) and (N*H*W, K) are plain views
        if d == "fwd":
            rows = a.permute(0, 2, 3, 1).reshape(-1, c)
            y2 = rows @ wm.t() if bias is None else torch.addmm(bias, rows, wm.t())
            return y2.reshape(n, h, w, k).permute(0, 3, 1, 2)
        if d == "bwd_data":
            return (a.permute(0, 2, 3, 1).reshape(-1, k) @ wm).reshape(n, h, w, c).permute(0, 3, 1, 2)
        dy = b.permute(0, 2, 3, 1).reshape(-1, k)
        return (dy.t() @ a.permute(0, 2, 3, 1).reshape(-1, c)).reshape(k, c, 1, 1)
    # NCHW: per image a (C, H*W) matrix; matmul broadcasts the weight over the batch.
    if d == "fwd":
        y = torch.matmul(wm, a.reshape(n, c, h * w)).reshape(n, k, h, w)
        return y if bias is None else y + bias.view(1, k, 1, 1)
    if d == "bwd_data":
        return torch.matmul(wm.t(), a.reshape(n, k, h * w)).reshape(n, c, h, w)
    # dw = sum_n dy[n] @ x[n]^T. With N > 1 the batch is not one strided matrix in NCHW, so gather
    # (K, N*H*W) and (C, N*H*W) first: two copies, then one GEMM (cheaper than N products and a sum).
    dy, x = b.reshape(n, k, h * w), a.reshape(n, c, h * w)
    if n == 1:
        return (dy[0] @ x[0].t()).reshape(k, c, 1, 1)
    return (dy.transpose(0, 1).reshape(k, -1) @ x.transpose(0, 1).reshape(c, -1).t()).reshape(k, c, 1, 1)


class _PreparedGemm(PreparedCandidate):
    def __init__(self, problem: ConvProblem, candidate: Candidate):
        self.problem = problem
        self.candidate = candidate
        self.workspace_bytes = 0
        dtype = DTYPE_TABLE[problem.dtype]
        # float32 storage: cuBLAS's TF32 switch is set to the problem's math mode around the product.
        self._tf32 = dtype.tf32 if dtype.torch_name == "float32" else None

    def run(self, ops: Operands, bias: torch.Tensor | None = None) -> torch.Tensor:
        a, b = ops.inputs(self.problem.direction)
        if self._tf32 is None:
            return gemm_conv(self.problem, a, b, bias)
        matmul = torch.backends.cuda.matmul
        saved, matmul.allow_tf32 = matmul.allow_tf32, self._tf32
        try:
            return gemm_conv(self.problem, a, b, bias)
        finally:
            matmul.allow_tf32 = saved


class GemmSpace(CandidateSpace):
    """GEMM lowering through ``torch.matmul`` wherever the convolution is a matrix product."""

    name = "gemm"
    label = "GEMM lowering (cuBLAS)"
    from_lists = False

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        kind = gemm_kind(problem)
        return [] if kind is None else [self.candidate(kind, problem.direction)]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        if gemm_kind(problem) != candidate.name:
            raise CandidateError("build_failed", f"{candidate.candidate_id} does not apply to {problem.key}")
        return _PreparedGemm(problem, candidate)

    def engine_code(self, engine_id: int, knobs: str, name: str) -> int:
        return _ENGINE_CODES.get(name, 1003)

    def offline_candidates(self, problem: ConvProblem) -> list[Candidate]:
        # GEMM lowering applies wherever the problem is a matrix product; that needs no GPU to know.
        return self.enumerate(problem)
