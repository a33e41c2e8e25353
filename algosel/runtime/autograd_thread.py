"""Run a function on the thread where autograd computes a device's gradients.

PyTorch keeps its cuDNN execution plans per thread (``benchmark_cache`` in ATen's ``Conv_v8.cpp`` is
``thread_local``: "cuDNN Execution Plans are not guaranteed to be thread safe"), and autograd's engine runs the
backward of CUDA tensors on a worker thread of its own per device. A gradient's problem timed on the main thread
therefore finds none of the plans the network's backward built, and builds them again; the backward then builds its
own as well. Measured (H200, torch 2.11, cuDNN 9.19, ConvNeXt-T float16 channels_last, batch 32,
``python benchmarks/archive/plan_threads.py --net convnext_tiny --dtype amp``, 2026-12-04,
``benchmarks/results/plan_threads-h200-20261204-convnext_tiny-amp-25e66d4.txt``): after one training step, the
first ``aten.convolution_backward`` of one gradient on the main thread took 156-384 ms for a depthwise 7x7 problem
and 1.5-2.9 ms for the others, 2,209 ms over the 16 gradients of the network's 8 distinct convolutions; the second
call there 4.2 ms in all, and the first through :func:`on_autograd_thread` 4.2 ms in all.

:func:`on_autograd_thread` runs a function inside the backward of a one-element graph on the device, so that what
it builds lands in the cache the network's own backward uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def in_backward() -> bool:
    """Whether this thread is computing a backward now (an autograd graph task is under way in it)."""
    current = getattr(torch._C, "_current_graph_task_id", None)
    return current is not None and current() != -1


class _RunInBackward(torch.autograd.Function):
    """The identity forward; its backward calls the function held in ``box`` and keeps its result or error."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, box: dict) -> torch.Tensor:
        ctx.box = box
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        box = ctx.box
        try:
            box["result"] = box["fn"]()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc
        return grad, None


def on_autograd_thread(fn: Callable[[], T], device: torch.device) -> T:
    """``fn()``, run on the thread where autograd computes ``device``'s gradients (the calling thread for the CPU, or
    where this thread already runs a backward), with its result returned and its exception raised here.

    ``fn`` runs outside autograd (grad mode off) in a thread whose other thread-local switches (autocast, the hook's
    own) are that thread's: it sets what it needs itself."""
    if in_backward() or torch.is_inference_mode_enabled():
        return fn()
    box: dict[str, Any] = {"fn": fn}
    with torch.enable_grad():
        seed = torch.zeros((), device=device, requires_grad=True)
        out = _RunInBackward.apply(seed, box)
        torch.autograd.grad(out, seed)
    if "error" in box:
        raise box["error"]
    return box["result"]
