"""The Python path of a hooked convolution: an autograd Function whose forward and gradients each run their plan.

It runs the routes the compiled path cannot (no extension built, a plan of another space, GEMM lowering mixed with
other paths) at about 60 us of host time a call more than PyTorch's own (``policy.python_path_overhead_us``). A plan
that fails at run time falls back to PyTorch for good, counted as ``fallback:<error>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from algosel.operands import OUTPUT_ROLE, Operands, conv_args, empty_like_layout, pytorch_direction
from algosel.problem import ConvProblem
from algosel.runtime.state import original_conv2d, planning

if TYPE_CHECKING:
    from algosel.runtime.executor import Executor

log = logging.getLogger(__name__)


def run_direction(ex: Executor, problem: ConvProblem, ops: Operands, fallback: Callable[[], torch.Tensor],
                  bias: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Run ``problem``'s plan on ``ops`` (whose output slot is allocated here for a cuDNN plan, which writes into
    it); ``bias`` is added (fused into the GEMM where the lowering allows). ``fallback`` (PyTorch, bias included)
    runs on pass-through and on failure."""
    plan = ex.plans.get(problem)
    if plan is None:
        with planning(), torch.no_grad():
            plan = ex.plan(problem, ops.x.device if ops.x is not None else ops.y.device)
    counts = ex.call_stats
    if plan.runner is None and plan.native_id >= 0:  # a plan loaded from the cache into the compiled path only
        counts.count(plan.path)
        out = ex.native_module().run_plan(plan.native_id, *ops.inputs(problem.direction))
        return out if bias is None else out + bias.view(1, -1, 1, 1)
    if plan.runner is None:
        counts.count(plan.path)
        return fallback()
    try:
        if plan.path == "gemm":  # the GEMM runner adds the bias inside its product where the lowering allows
            out = plan.runner.run(ops, bias)
        else:
            role = OUTPUT_ROLE[problem.direction]
            like = ops.y if ops.y is not None else ops.x
            setattr(ops, role, empty_like_layout(getattr(problem, f"{role}_shape"), problem, like.device))
            out = plan.runner.run(ops)
            if bias is not None:
                out = out + bias.view(1, -1, 1, 1)
        counts.count(plan.path)
        return out
    except Exception as exc:  # noqa: BLE001 - any failure of a chosen candidate falls back, counted
        counts.count(f"fallback:{type(exc).__name__}")
        log.warning("algosel: %s failed on %s (%s); falling back to PyTorch", plan.path, problem.key, exc)
        ex.plans.failed(problem)
        return fallback()


def run_gradients(ex: Executor, problem: ConvProblem, x: torch.Tensor, w: torch.Tensor, grad_y: torch.Tensor,
                  need_x: bool, need_w: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:  # fmt: skip
    """The input and weight gradients asked for, each through its plan (PyTorch's on pass-through)."""
    dirs = ex.plans.directions_of(problem)
    gx = gw = None
    if need_x:
        p = dirs["bwd_data"]
        gx = run_direction(ex, p, Operands(None, w, grad_y), lambda: pytorch_direction(p, x, w, grad_y))
    if need_w:
        p = dirs["bwd_filter"]
        gw = run_direction(ex, p, Operands(x, None, grad_y), lambda: pytorch_direction(p, x, w, grad_y))
    return gx, gw


def memory_format(problem: ConvProblem) -> torch.memory_format:
    return torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format


class Conv2dFunction(torch.autograd.Function):
    """The hooked convolution on the Python path: each direction through its own plan."""

    @staticmethod
    def forward(ctx, x, weight, bias, problem: ConvProblem, ex: Executor):
        mf = memory_format(problem)
        x = x.contiguous(memory_format=mf)
        weight = weight.contiguous(memory_format=mf)
        ctx.save_for_backward(x, weight)
        ctx.problem, ctx.ex, ctx.has_bias = problem, ex, bias is not None
        out = run_direction(ex, problem, Operands(x, weight, None),
                            lambda: original_conv2d(x, weight, bias, **conv_args(problem)), bias)  # fmt: skip
        # A view returned from a custom Function cannot be modified in place (an in-place activation after the
        # conv raised in EfficientNet and SqueezeNet): return the output as a tensor of its own, sharing storage.
        return out.detach() if out._is_view() else out

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        problem, ex = ctx.problem, ctx.ex
        grad_y = grad_y.contiguous(memory_format=memory_format(problem))
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():
            # A differentiable backward was asked for (double backward): PyTorch's own, which has one.
            args = conv_args(problem)
            gx, gw, _ = torch.ops.aten.convolution_backward(
                grad_y, x, weight, None, list(args["stride"]), list(args["padding"]), list(args["dilation"]),
                False, [0, 0], problem.groups, [need_x, need_w, False])  # fmt: skip
        else:
            gx, gw = run_gradients(ex, problem, x, weight, grad_y, need_x, need_w)
        gb = grad_y.sum(dim=(0, 2, 3)) if need_b and ctx.has_bias else None
        return gx, gw, gb, None, None
