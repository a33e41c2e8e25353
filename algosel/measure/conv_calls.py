"""The convolution calls of one forward pass: run a network once with hooks and record every 2-D convolution.

Each model runs once with forward hooks on every ``nn.Conv2d`` and a torch function mode that sees every
``F.conv2d`` -- on meta tensors, so no memory is allocated and no arithmetic is done (on a CPU copy where an
operator has no meta kernel). A record holds the call's layer name, the shape fields of
:class:`~algosel.problem.ConvProblem`, the layout the call ran in and whether its input needs a gradient: a row of
a layer table (:mod:`algosel.measure.layer_table`). The suites (:mod:`algosel.measure.suites`) and ``algosel
layers`` (:mod:`algosel.measure.layers`) are both extracted this way.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from algosel.measure.layer_table import INPUT_GRAD_COLUMN, LAYOUT_COLUMN
from algosel.problem import same_padding


def _conv_padding(conv: nn.Conv2d, h: int, w: int) -> tuple[int, int, int, int]:
    """``(h, w, pad_h, pad_w)`` of the convolution the kernel actually receives.

    - ``'valid'`` is zero padding.
    - ``'same'`` needs total padding ``d * (k - 1)`` per axis. When that is even PyTorch passes half of it to
      the convolution; when it is odd (even kernel, odd dilation) PyTorch first pads the input by the one extra
      row/column and then convolves with the smaller half, so we record that larger input and smaller pad.
    - Any ``padding_mode`` other than ``'zeros'`` (reflect, replicate, circular): PyTorch pads the input explicitly
      first and calls the convolution with padding 0, so that is recorded (the padded input, pad 0): the problem
      the convolution runs, and the one the hook sees.
    """
    h, w, pad_h, pad_w = _resolve_padding(conv.padding, conv.kernel_size, conv.dilation, h, w)
    if conv.padding_mode == "zeros":
        return h, w, pad_h, pad_w
    return h + 2 * pad_h, w + 2 * pad_w, 0, 0


def _pair(value: Any) -> tuple[int, int]:
    """An int or a one- or two-element sequence (as ``F.conv2d`` accepts) as ``(height, width)``."""
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[-1])
    return int(value), int(value)


def _resolve_padding(
    padding: Any, kernel_size: tuple[int, int], dilation: Any, h: int, w: int
) -> tuple[int, int, int, int]:
    """``(h, w, pad_h, pad_w)`` for a padding as ``Conv2d`` or ``F.conv2d`` takes it (see :func:`_conv_padding`)."""
    if isinstance(padding, str):
        if padding == "valid":
            return h, w, 0, 0
        if padding != "same":
            raise ValueError(f"unknown Conv2d padding {padding!r}")
        sizes, pads = [h, w], [0, 0]
        dilations = _pair(dilation)
        for axis in range(2):
            kernel, axis_dilation = int(kernel_size[axis]), dilations[axis]
            total = axis_dilation * (kernel - 1)
            pads[axis] = same_padding(kernel, axis_dilation)  # == total // 2
            sizes[axis] += total % 2
        return sizes[0], sizes[1], pads[0], pads[1]
    pad_h, pad_w = _pair(padding)
    return h, w, pad_h, pad_w


def call_layout(x: torch.Tensor, weight: torch.Tensor) -> str:
    """The layout PyTorch runs a convolution of ``x`` and ``weight`` in: ``nhwc`` where either is channels_last-strided
    (as ``torch.nn.functional.conv2d`` suggests its memory format), else ``nchw``."""

    def channels_last(t: torch.Tensor) -> bool:
        return t.dim() == 4 and t.shape[1] > 1 and not t.is_contiguous() and t.is_contiguous(
            memory_format=torch.channels_last)  # fmt: skip

    return "nhwc" if channels_last(x) or channels_last(weight) else "nchw"


def _layer_record(name: str, conv: nn.Conv2d, x: torch.Tensor) -> dict[str, Any]:
    # Conv2d also accepts unbatched (c, h, w) input, which is a batch of one.
    n = int(x.shape[0]) if x.dim() == 4 else 1
    c, h, w = (int(v) for v in x.shape[-3:])
    h, w, pad_h, pad_w = _conv_padding(conv, h, w)
    return {
        "layer": name,
        "n": n,
        "c": c,
        "k": int(conv.out_channels),
        "h": h,
        "w": w,
        "r": int(conv.kernel_size[0]),
        "s": int(conv.kernel_size[1]),
        "pad_h": pad_h,
        "pad_w": pad_w,
        "stride_h": int(conv.stride[0]),
        "stride_w": int(conv.stride[1]),
        "dilation_h": int(conv.dilation[0]),
        "dilation_w": int(conv.dilation[1]),
        "groups": int(conv.groups),
        LAYOUT_COLUMN: call_layout(x, conv.weight),
        INPUT_GRAD_COLUMN: int(x.requires_grad),
    }


#: ``F.conv2d``'s parameters in order, to read a functional call's arguments however they were passed.
_CONV2D_PARAMS: tuple[str, ...] = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV2D_DEFAULTS: dict[str, Any] = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
#: Convolutions algosel does not cover (1-D, 3-D, transposed): counted, not recorded.
_OTHER_CONVS: dict[Any, str] = {
    F.conv1d: "conv1d",
    F.conv3d: "conv3d",
    F.conv_transpose1d: "conv_transpose1d",
    F.conv_transpose2d: "conv_transpose2d",
    F.conv_transpose3d: "conv_transpose3d",
}


def _bound_conv2d_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """An ``F.conv2d`` call's arguments by parameter name, defaults filled in."""
    bound = dict(_CONV2D_DEFAULTS)
    bound.update(zip(_CONV2D_PARAMS, args))
    bound.update(kwargs)
    return bound


def _functional_record(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The record of an ``F.conv2d`` call made outside any ``nn.Conv2d`` (a functional convolution)."""
    bound = _bound_conv2d_args(args, kwargs)
    x, weight = bound["input"], bound["weight"]
    n = int(x.shape[0]) if x.dim() == 4 else 1
    c, h, w = (int(v) for v in x.shape[-3:])
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    h, w, pad_h, pad_w = _resolve_padding(bound["padding"], kernel, bound["dilation"], h, w)
    (stride_h, stride_w), (dilation_h, dilation_w) = _pair(bound["stride"]), _pair(bound["dilation"])
    return {"layer": name, "n": n, "c": c, "k": int(weight.shape[0]), "h": h, "w": w, "r": kernel[0],
            "s": kernel[1], "pad_h": pad_h, "pad_w": pad_w, "stride_h": stride_h, "stride_w": stride_w,
            "dilation_h": dilation_h, "dilation_w": dilation_w, "groups": int(bound["groups"]),
            LAYOUT_COLUMN: call_layout(x, weight), INPUT_GRAD_COLUMN: int(x.requires_grad)}  # fmt: skip


@dataclass
class ConvCalls:
    """What one forward pass convolved: one record per 2-D convolution call, and the convolutions algosel does
    not cover (``skipped``: calls per function name, e.g. ``{"conv_transpose2d": 3}``)."""

    records: list[dict[str, Any]]
    skipped: dict[str, int]


class _FunctionalConvs(TorchFunctionMode):
    """Sees every ``F.conv2d`` call: records the ones no ``nn.Conv2d`` hook records, counts other convolutions."""

    def __init__(self, records: list[dict[str, Any]], names: list[str], inside_conv: list[int]) -> None:
        super().__init__()
        self.records, self.names, self.inside_conv = records, names, inside_conv
        self.skipped: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.conv2d and not self.inside_conv[0]:
            self.records.append(_functional_record(self.names[-1] if self.names else "", args, kwargs))
        elif func in _OTHER_CONVS:
            self.skipped[_OTHER_CONVS[func]] += 1
        out = func(*args, **kwargs)
        if func is F.conv2d and isinstance(out, torch.Tensor) and out.is_meta and out.dim() == 4:
            # The meta device's convolution returns a contiguous output whatever its input's layout, where CUDA's
            # (and the CPU's) keeps channels_last: without this, a network run on meta tensors records the call
            # after a channels_last one as NCHW (ConvNeXt-T: the first depthwise convolution of stages 2-4, behind
            # their downsampling convolutions, which the H200 runs NHWC).
            bound = _bound_conv2d_args(args, kwargs)
            if call_layout(bound["input"], bound["weight"]) == "nhwc":
                out = out.contiguous(memory_format=torch.channels_last)
        return out


def _run_hooked(model: nn.Module, args: tuple[Any, ...]) -> ConvCalls:
    """Run ``model(*args)`` once, recording every 2-D convolution call (see :func:`extract_conv_calls`)."""
    records: list[dict[str, Any]] = []
    names: list[str] = []  # qualified names of the modules running, innermost last
    inside_conv = [0]  # depth of nn.Conv2d forwards running: their F.conv2d is the module's own record
    handles = []

    def make_pre_hook(name: str, is_conv: bool) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            names.append(name)
            inside_conv[0] += is_conv

        return hook

    def make_hook(name: str, is_conv: bool) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            names.pop()
            if is_conv:
                inside_conv[0] -= 1
                records.append(_layer_record(name, module, inputs[0]))

        return hook

    # Per-module hooks (rather than the global register_module_forward_hook) give the qualified name for free
    # and cannot pick up convolutions of unrelated code running at the same time. The functional mode records
    # the F.conv2d calls of modules that convolve without an nn.Conv2d (weight standardisation, custom layers).
    for name, module in model.named_modules():
        is_conv = isinstance(module, nn.Conv2d)
        handles.append(module.register_forward_pre_hook(make_pre_hook(name, is_conv)))
        handles.append(module.register_forward_hook(make_hook(name, is_conv)))
    # Per-module modes, so a model with mixed train/eval submodules is restored exactly.
    modes = [(module, module.training) for module in model.modules()]
    functional = _FunctionalConvs(records, names, inside_conv)
    try:
        # Eval mode: suites describe inference shapes (e.g. no auxiliary heads), and eval avoids batch statistics
        # and random dropout masks we do not need. Gradients on (free on meta tensors): whether a call's input
        # requires a gradient is what tells a training step's input gradients (INPUT_GRAD_COLUMN).
        model.eval()
        with torch.enable_grad(), functional:
            model(*args)
    finally:
        for module, training in modes:
            module.training = training
        for handle in handles:
            handle.remove()
    return ConvCalls(records, dict(functional.skipped))


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # Meta tensors have no data to copy; zeros of the same shape and dtype are all the shapes need.
        return torch.zeros(value.shape, dtype=value.dtype) if value.is_meta else value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _materialise_on_cpu(model: nn.Module) -> nn.Module:
    """A CPU copy of ``model``; meta parameters become uninitialised CPU memory (only shapes matter)."""
    clone = copy.deepcopy(model)
    has_meta = any(t.is_meta for t in (*clone.parameters(), *clone.buffers()))
    return clone.to_empty(device="cpu") if has_meta else clone.cpu()


def extract_conv_calls(model: nn.Module, inputs: torch.Tensor | tuple[Any, ...]) -> ConvCalls:
    """Shapes of every 2-D convolution call of one forward pass, and the count of other convolutions.

    Parameters
    ----------
    model : nn.Module
        The network. Its parameters may live on the meta device (built under ``torch.device("meta")``).
    inputs : Tensor or tuple
        The forward arguments: one tensor, or a tuple passed as ``model(*inputs)``. Meta tensors are preferred:
        shapes propagate without allocating memory or computing anything.

    Returns
    -------
    ConvCalls
        ``records``: one dict per convolution call, in execution order (a module called twice gives two rows),
        with keys ``layer`` and :data:`LAYER_FIELDS`. Calls of an ``nn.Conv2d`` are named by the module's
        qualified name; an ``F.conv2d`` call made elsewhere by the innermost module running it. ``skipped``:
        1-D, 3-D and transposed convolution calls per function name (algosel covers 2-D convolutions).

    Notes
    -----
    If the forward pass fails on meta tensors (an operator without a meta kernel, or a device mismatch between
    model and inputs), it is run again on a CPU copy of the model with zero-filled CPU inputs of the same
    shapes. The model itself is never moved; its training mode is restored afterwards.
    """
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    try:
        return _run_hooked(model, args)
    except (NotImplementedError, RuntimeError, TypeError, ValueError) as meta_error:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        on_meta = any(t.is_meta for t in (*tensors, *model.parameters(), *model.buffers()))
        if not on_meta:
            raise
        try:
            return _run_hooked(_materialise_on_cpu(model), _to_cpu(args))
        except Exception as cpu_error:
            raise cpu_error from meta_error


def extract_layers(model: nn.Module, inputs: torch.Tensor | tuple[Any, ...]) -> list[dict[str, Any]]:
    """The records of :func:`extract_conv_calls`: one dict per 2-D convolution call of one forward pass.

    Parameters
    ----------
    model : nn.Module
        The network (parameters may be on the meta device).
    inputs : Tensor or tuple
        The forward arguments, preferably meta tensors.

    Returns
    -------
    list of dict
        Keys ``layer`` (qualified module name) and :data:`LAYER_FIELDS`, in execution order.
    """
    return extract_conv_calls(model, inputs).records
