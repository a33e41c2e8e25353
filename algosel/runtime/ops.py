"""The hooked convolution as PyTorch custom ops, so that ``torch.compile`` keeps it in its graph.

Under ``torch.compile`` the hook calls ``algosel::conv2d`` (a custom op with a fake implementation for tracing and
an autograd formula whose backward is ``algosel::conv2d_backward``). At run time, and when a CUDA graph is captured
(compile's "reduce-overhead"), their implementations route through the same executor as eager calls: planned
convolutions replay their kernels; nothing is decided during a capture.
"""

from __future__ import annotations

import torch
from torch import Tensor

from algosel.runtime.call import call_problem, run_conv
from algosel.runtime.function import memory_format, run_gradients
from algosel.runtime.state import STATE, original_conv2d


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


@torch.library.custom_op("algosel::conv2d", mutates_args=())
def conv2d_op(x: Tensor, w: Tensor, b: Tensor | None, stride: list[int], padding: list[int], dilation: list[int],
              groups: int, executor: int) -> Tensor:  # fmt: skip
    """The forward alone (the gradients are the autograd formula's, below), through executor number ``executor``
    (-1: the one switched on at run time)."""
    ex = STATE.executor_by_id(executor)
    with torch.no_grad():
        if ex is None:
            return original_conv2d(x, w, b, stride, padding, dilation, groups)
        # A compiled graph guards on F.conv2d, which stepping aside would swap (a compilation more): this
        # executor keeps routing every block
        ex.step_aside = False
        return run_conv(ex, x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)


@conv2d_op.register_fake
def _conv2d_fake(x, w, b, stride, padding, dilation, groups, executor):
    n, _, h, w_ = x.shape
    k, _, r, s = w.shape
    shape = (n, k, _out_size(h, r, stride[0], padding[0], dilation[0]),
             _out_size(w_, s, stride[1], padding[1], dilation[1]))  # fmt: skip
    nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    mf = torch.channels_last if nhwc else torch.contiguous_format
    return torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=mf)


@torch.library.custom_op("algosel::conv2d_backward", mutates_args=())
def conv2d_backward_op(
    grad: Tensor, x: Tensor, w: Tensor, stride: list[int], padding: list[int], dilation: list[int], groups: int,
    need_x: bool, need_w: bool, executor: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(dx, dw) through the executor's plans (an empty tensor for a gradient not asked for)."""
    ex = STATE.executor_by_id(executor)
    problem = None
    if ex is not None:
        problem, _ = call_problem(x, w, tuple(stride), tuple(padding), tuple(dilation), groups, x.dtype)
    if problem is None:
        gx, gw, _ = torch.ops.aten.convolution_backward(grad, x, w, None, stride, padding, dilation, False, [0, 0],
                                                        groups, [need_x, need_w, False])  # fmt: skip
    else:
        mf = memory_format(problem)
        grad, x, w = (t.contiguous(memory_format=mf) for t in (grad, x, w))
        gx, gw = run_gradients(ex, problem, x, w, grad, need_x, need_w)
    empty = x.new_empty(0)
    return (gx.clone() if gx is not None and gx._is_view() else gx if gx is not None else empty,
            gw.clone() if gw is not None and gw._is_view() else gw if gw is not None else empty)  # fmt: skip


@conv2d_backward_op.register_fake
def _conv2d_backward_fake(grad, x, w, stride, padding, dilation, groups, need_x, need_w, executor):
    return (torch.empty_like(x) if need_x else x.new_empty(0), torch.empty_like(w) if need_w else w.new_empty(0))


def _setup(ctx, inputs, output):
    x, w, b, stride, padding, dilation, groups, executor = inputs
    ctx.save_for_backward(x, w)
    ctx.geometry = (stride, padding, dilation, groups)
    ctx.executor = executor
    ctx.has_bias = b is not None


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    gx, gw = conv2d_backward_op(grad, x, w, *ctx.geometry, need_x, need_w, ctx.executor)
    gb = grad.sum(dim=(0, 2, 3)) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return (gx if need_x else None), (gw if need_w else None), gb, None, None, None, None, None


conv2d_op.register_autograd(_backward, setup_context=_setup)


def _ints(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(v[0]), int(v[-1])]


def compiled_conv2d(x, w, b, stride, padding, dilation, groups, executor: int = -1) -> Tensor:
    """``F.conv2d`` under ``torch.compile``: the custom op, with autocast's cast done here (custom ops have no
    autocast rule) and string padding turned into numbers (or PyTorch's own conv2d where that cannot be done, and
    on a device the executor does not route: the CPU, ``meta``)."""
    ex = STATE.executor_by_id(executor)
    if ex is not None and not ex.device_probe.routes(x.device):  # not cuDNN's: PyTorch's own call, traced as such
        return original_conv2d(x, w, b, stride, padding, dilation, groups)
    sh, sw = _ints(stride)
    dh, dw = _ints(dilation)
    if isinstance(padding, str):
        r, s = w.shape[2], w.shape[3]
        if padding == "valid":
            pad = [0, 0]
        elif padding == "same" and (sh, sw) == (1, 1) and not (dh * (r - 1)) % 2 and not (dw * (s - 1)) % 2:
            pad = [dh * (r - 1) // 2, dw * (s - 1) // 2]
        else:
            return original_conv2d(x, w, b, stride, padding, dilation, groups)
    else:
        pad = _ints(padding)
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        cast = torch.get_autocast_dtype(device_type)
        x, w = x.to(cast), w.to(cast)
        b = b.to(cast) if b is not None else None
        with torch.autocast(device_type, enabled=False):
            return conv2d_op(x, w, b, [sh, sw], pad, [dh, dw], groups, executor)
    return conv2d_op(x, w, b, [sh, sw], pad, [dh, dw], groups, executor)


__all__ = ["compiled_conv2d", "conv2d_backward_op", "conv2d_op"]
