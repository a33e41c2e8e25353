"""Layer suites: the convolution shapes of real networks, as committed CSV files.

A selector is only useful if it is right on the convolutions people actually run, so besides synthetic sweeps
algosel evaluates on the ``Conv2d`` layers of a few well-known networks. The shapes are extracted by running
each model once with forward hooks on every ``nn.Conv2d`` -- on meta tensors, so no memory is allocated and
no arithmetic is done -- and written to ``data/suites/<name>.csv``. The CSV files are committed so that CI and
everything downstream need no torchvision; only regenerating them does (``python -m algosel.measure.suites OUTDIR``).

Every CSV has the columns :data:`SUITE_COLUMNS`: the network, the layer's qualified module name, the
shape fields of :class:`~algosel.problem.ConvProblem` and ``size``, the network input size as ``"HxW"``
(the FPN suite holds one block of rows per input size). Rows are in execution order of the forward pass,
one per convolution call, so summing over rows gives whole-network totals.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from algosel.files import write_text
from algosel.problem import SHAPE_FIELDS, ConvProblem, same_padding
from algosel.resources import shipped_path

#: Where the committed suite CSVs live: the package's shipped data (``data/suites`` of the repository links there),
#: found through the installed package so that it does not depend on the working directory or an editable install.
DEFAULT_SUITES_DIR: Path = shipped_path("suites")

#: Shape fields recorded for each convolution call (the integer fields of :class:`ConvProblem`).
LAYER_FIELDS: tuple[str, ...] = SHAPE_FIELDS
#: Columns of a suite CSV / of :func:`extract_suite`'s frame, in order.
SUITE_COLUMNS: tuple[str, ...] = ("network", "layer", *LAYER_FIELDS, "size")
#: The optional column of a suite or layers file: the memory layout the network ran the call in (``nchw`` or
#: ``nhwc``; empty: not recorded). PyTorch runs a convolution channels_last where its input or its weight is
#: channels_last-strided, which networks do inside themselves whatever their input: torchvision's ConvNeXt permutes
#: each block's output back to NHWC strides, so its depthwise convolutions are NHWC problems.
LAYOUT_COLUMN = "layout"
#: The optional column of a layers file: 1 where the call's input needs a gradient in a training step (autograd
#: computes its ``bwd_data``), 0 where it does not (a network's first convolution over its images), empty where not
#: recorded (:mod:`algosel.measure.steps` then tells it from the call's position).
INPUT_GRAD_COLUMN = "input_grad"
_TEXT_COLUMNS: tuple[str, ...] = ("network", "layer", "size")

#: Feature-map strides of a ResNet backbone's C2..C5 outputs, which an FPN consumes.
FPN_STRIDES: tuple[int, ...] = (4, 8, 16, 32)
#: Channels of ResNet-50's C2..C5 outputs.
FPN_IN_CHANNELS: tuple[int, ...] = (256, 512, 1024, 2048)


def _fpn_sizes() -> tuple[tuple[int, int], ...]:
    """Twenty detection input sizes around 800x1216.

    Detection inputs vary per batch (aspect-ratio grouping, multi-scale training) and are padded to a multiple
    of 32 so every FPN level has an integral size. We take heights 736..864 and widths 1152..1280 in steps of
    32 (a 5 x 5 grid) and keep 20 of the 25 pairs: row ``t`` pairs height ``t`` with widths ``t + j`` (mod 5)
    for ``j`` in 0..3, i.e. one wrap-around diagonal is dropped. That keeps each height and each width exactly
    four times (no size is over-represented) and includes 800x1216 (``t = 2, j = 0``). Sorted, for stable CSVs.
    """
    heights = [736 + 32 * i for i in range(5)]
    widths = [1152 + 32 * i for i in range(5)]
    return tuple(sorted((heights[t], widths[(t + j) % 5]) for j in range(4) for t in range(5)))


@dataclass(frozen=True)
class SuiteSpec:
    """What one suite runs: the model, its input sizes and batch.

    Parameters
    ----------
    name : str
        Suite name; also the CSV file stem and the ``network`` column.
    builder : str
        Human-readable description of how the model is built (documentation only; the build itself is done by
        :func:`build_suite_model`).
    sizes : tuple of (int, int)
        Input spatial sizes ``(h, w)``; one block of rows per size.
    batch : int
        Batch size ``n`` of the input.
    in_channels : int
        Channels of the (first) input tensor; informational for the FPN, whose inputs are four feature maps.
    needs_torchvision : bool
        Whether building the model imports torchvision.
    input_needs_grad : bool
        Whether the network's inputs need a gradient in training: features of a backbone trained with it (the FPN
        head, AlexNet's classifier), rather than images. Where they do not, the input gradient of the first
        convolution never runs (:mod:`algosel.measure.steps`).
    """

    name: str
    builder: str
    sizes: tuple[tuple[int, int], ...]
    batch: int
    in_channels: int = 3
    needs_torchvision: bool = True
    input_needs_grad: bool = False

    @property
    def size(self) -> tuple[int, int]:
        """The first (for single-size suites: the only) input size."""
        return self.sizes[0]


def _torchvision_spec(name: str) -> SuiteSpec:
    # ImageNet classification at its standard training/inference resolution and a typical training batch.
    return SuiteSpec(name, f"torchvision.models.{name}(weights=None)", ((224, 224),), 32)


#: The suites, by name.
SUITES: dict[str, SuiteSpec] = {
    **{
        name: _torchvision_spec(name)
        for name in ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vgg16", "alexnet", "densenet121")
    },
    # AlexNet's classifier written as convolutions (as in the "one weird trick" / convnet-benchmarks style): fc6
    # is a 6x6 convolution covering the whole 256x6x6 pool5 output, fc7 and fc8 are 1x1 on a 1x1 map. These are
    # the fully-connected corner cases (is_fully_connected / is_pointwise) where GEMM-like algorithms should win.
    "alexnet_fc": SuiteSpec(
        "alexnet_fc",
        "AlexNet classifier as convolutions: fc6 Conv2d(256, 4096, 6) on 6x6, fc7 Conv2d(4096, 4096, 1) and "
        "fc8 Conv2d(4096, 1000, 1) on 1x1",
        ((6, 6),),
        1600,
        in_channels=256,
        needs_torchvision=False,
        input_needs_grad=True,
    ),
    "fpn": SuiteSpec(
        "fpn",
        "algosel.measure.suites.FPNHead(): 1x1 laterals to 256 and 3x3 outputs on ResNet C2..C5 (strides 4..32)",
        _fpn_sizes(),
        1,
        in_channels=FPN_IN_CHANNELS[0],
        needs_torchvision=False,
        input_needs_grad=True,
    ),
}


class FPNHead(nn.Module):
    """The convolutions of a Feature Pyramid Network (Lin et al., 2017) on top of a ResNet backbone.

    Same structure as torchvision's ``FeaturePyramidNetwork`` (without the extra max-pool level, which has no
    convolution): per level a 1x1 lateral convolution to ``out_channels`` and a 3x3 output convolution, with a
    nearest-neighbour upsampled top-down pathway. Written in plain torch so the suite needs no torchvision and
    so benchmarks can run it end to end.

    Parameters
    ----------
    in_channels : sequence of int
        Channels of the input feature maps, finest level first.
    out_channels : int
        Channels of every pyramid level.
    """

    def __init__(self, in_channels: Sequence[int] = FPN_IN_CHANNELS, out_channels: int = 256) -> None:
        super().__init__()
        self.strides = FPN_STRIDES[: len(in_channels)]
        self.in_channels = tuple(in_channels)
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, kernel_size=1) for c in in_channels)
        self.output = nn.ModuleList(
            nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1) for _ in in_channels
        )

    def forward(self, *features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Pyramid levels P2..P5 (finest first) from feature maps C2..C5 (finest first).

        Accepts the maps as separate arguments or as one list/tuple.
        """
        if len(features) == 1 and isinstance(features[0], (list, tuple)):
            features = tuple(features[0])
        if len(features) != len(self.lateral):
            raise ValueError(f"FPNHead expects {len(self.lateral)} feature maps, got {len(features)}")
        # Top-down, coarsest level first, as torchvision does (this is also the order of the CSV rows).
        top = self.lateral[-1](features[-1])
        results = [self.output[-1](top)]
        for i in range(len(features) - 2, -1, -1):
            lateral = self.lateral[i](features[i])
            # Upsample to the lateral's exact size rather than by 2x, so sizes that are not multiples of 32
            # (odd feature sizes) still line up.
            top = lateral + F.interpolate(top, size=lateral.shape[-2:], mode="nearest")
            results.insert(0, self.output[i](top))
        return tuple(results)

    def example_inputs(
        self,
        h: int,
        w: int,
        batch: int = 1,
        device: torch.device | str = "meta",
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.Tensor, ...]:
        """Feature maps a ResNet backbone produces for an ``h x w`` image.

        ResNet halves the size with ``ceil`` at each stride-2 stage (conv1 7x7/2 pad 3, max-pool 3x3/2 pad 1,
        3x3/2 pad 1 convolutions), so the level of stride ``t`` is ``ceil(h / t) x ceil(w / t)``.
        """
        return tuple(
            torch.empty(batch, c, math.ceil(h / t), math.ceil(w / t), device=device, dtype=dtype)
            for c, t in zip(self.in_channels, self.strides)
        )


def alexnet_fc() -> nn.Module:
    """AlexNet's classifier (fc6, fc7, fc8) as convolutions; input ``(n, 256, 6, 6)``."""
    return nn.Sequential(
        OrderedDict(
            fc6=nn.Conv2d(256, 4096, kernel_size=6),
            relu6=nn.ReLU(inplace=True),
            fc7=nn.Conv2d(4096, 4096, kernel_size=1),
            relu7=nn.ReLU(inplace=True),
            fc8=nn.Conv2d(4096, 1000, kernel_size=1),
        )
    )


# --------------------------------------------------------------------------------------------- extraction
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


def _size_label(h: int, w: int) -> str:
    return f"{h}x{w}"


def build_suite_model(name: str, device: torch.device | str = "meta") -> nn.Module:
    """Build the (randomly initialised) model of suite ``name`` on ``device``.

    Raises
    ------
    KeyError
        For an unknown suite name.
    RuntimeError
        When the suite needs torchvision and it is not installed.
    """
    _spec(name)
    with torch.device(device):
        if name == "fpn":
            return FPNHead()
        if name == "alexnet_fc":
            return alexnet_fc()
        try:
            # Imported here, not at module level: only regenerating the CSVs needs torchvision.
            import torchvision.models
        except ImportError as exc:
            raise RuntimeError(
                f"suite {name!r} needs the 'torchvision' package, which is not installed; it is only needed to "
                f"regenerate the suite CSVs (python -m algosel.measure.suites OUTDIR), not to load them"
            ) from exc
        return getattr(torchvision.models, name)(weights=None)


def _spec(name: str) -> SuiteSpec:
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES))}")
    return SUITES[name]


def extract_suite(name: str) -> pd.DataFrame:
    """Extract the convolution layers of suite ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`SUITES`.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS`, one row per convolution call, per input size in :attr:`SuiteSpec.sizes`
        order, in execution order within a size.

    Raises
    ------
    KeyError
        For an unknown suite.
    RuntimeError
        If the suite needs torchvision and it is not installed (only regenerating the CSVs needs it).
    """
    spec = _spec(name)
    model = build_suite_model(name, device="meta")
    rows: list[dict[str, Any]] = []
    for h, w in spec.sizes:
        if isinstance(model, FPNHead):
            inputs: torch.Tensor | tuple[torch.Tensor, ...] = model.example_inputs(h, w, spec.batch, device="meta")
        else:
            inputs = torch.empty(spec.batch, spec.in_channels, h, w, device="meta")
        for record in extract_layers(model, inputs):
            rows.append({"network": name, **record, "size": _size_label(h, w)})
    return _typed(pd.DataFrame(rows, columns=list(SUITE_COLUMNS)))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Fix column order and dtypes (int64 shape fields, str text columns), whatever the source."""
    frame = frame.loc[:, list(SUITE_COLUMNS)].copy()
    for column in LAYER_FIELDS:
        try:
            frame[column] = frame[column].astype("int64")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"suite column {column!r} holds non-integer values: {exc}") from exc
    for column in _TEXT_COLUMNS:
        frame[column] = frame[column].astype(str)
    return frame.reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ storage
def write_suites(directory: str | Path, names: Iterable[str] | None = None) -> list[Path]:
    """Extract suites and write ``<directory>/<name>.csv`` for each.

    Parameters
    ----------
    directory : str or Path
        Output directory (created if missing).
    names : iterable of str, optional
        Suites to write; all of :data:`SUITES` by default. Processed in sorted order so the output (and any
        failure) is deterministic.

    Returns
    -------
    list of Path
        The files written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    selected = sorted(SUITES if names is None else set(names))
    for name in selected:
        _spec(name)  # fail on a typo before spending time on the others
    paths = []
    for name in selected:
        path = directory / f"{name}.csv"
        # Explicit "\n" so the committed files are byte-identical whatever platform regenerates them; written
        # atomically, as every file algosel writes.
        write_text(path, extract_suite(name).to_csv(index=False, lineterminator="\n"))
        paths.append(path)
    return paths


def load_suite(name: str, directory: str | Path = DEFAULT_SUITES_DIR) -> pd.DataFrame:
    """Read one suite CSV back.

    Parameters
    ----------
    name : str
        Suite name; the file read is ``<directory>/<name>.csv``.
    directory : str or Path
        Where the CSVs are; the repository's ``data/suites`` by default.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS` in order, int64 shape fields (extra columns are dropped).

    Raises
    ------
    ValueError
        As :func:`read_layer_table`: a missing file or column, a bad value or a row that is no valid convolution.
    """
    path = Path(directory) / f"{name}.csv"
    if not path.is_file():
        raise ValueError(
            f"suite file {path} does not exist; generate it with 'python -m algosel.measure.suites {Path(directory)}'"
        )
    return read_layer_table(path, "suite file")


def read_layer_table(
    path: str | Path, label: str = "layers file", extra_int_columns: Sequence[str] = ()
) -> pd.DataFrame:
    """Read and validate a CSV in the suite format (the columns :data:`SUITE_COLUMNS`).

    The one reader of suite and layers files: every row must be a valid convolution shape, so that a bad file is
    reported here, naming the line, before anything is measured.

    Parameters
    ----------
    path : str or Path
        The CSV file.
    label : str
        What the file is, for messages (``"suite file"``, ``"layers file"``).
    extra_int_columns : sequence of str
        Further columns kept when present, each of positive integers (a layers file's ``calls``).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS` in order (int64 shape fields, str text columns), then :data:`LAYOUT_COLUMN`
        where the file has it (``nchw``, ``nhwc`` or empty), then those of ``extra_int_columns`` the file has
        (int64), and :data:`INPUT_GRAD_COLUMN` (``"1"``, ``"0"`` or empty) where the file has it; other columns are
        dropped.

    Raises
    ------
    ValueError
        One line naming the file and, for a bad value, its line and column: a missing file or column, a file
        without rows, a value that is not an integer, an empty network name, or a row that is not a valid
        convolution (the message of :class:`~algosel.problem.ConvProblem` names the field).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{label} {path} is a directory; give the CSV file")
    if not path.is_file():
        raise ValueError(f"{label} {path} does not exist")
    # Text columns read as str, verbatim: a layer named "0" must not become a number, nor the root module's
    # empty name (a bare Conv2d) NaN.
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{label} {path} is not a readable CSV file: {' '.join(str(exc).split())}") from None
    missing = [column for column in SUITE_COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"{label} {path} is missing column(s): {', '.join(missing)}")
    if frame.empty:
        raise ValueError(f"{label} {path} holds no rows")
    int_columns = [*LAYER_FIELDS, *(c for c in extra_int_columns if c in frame.columns)]
    layout = [LAYOUT_COLUMN] if LAYOUT_COLUMN in frame.columns else []
    grad = [INPUT_GRAD_COLUMN] if INPUT_GRAD_COLUMN in frame.columns else []
    out = frame.loc[:, [*SUITE_COLUMNS, *layout, *grad, *int_columns[len(LAYER_FIELDS) :]]].copy()
    if grad:
        out[INPUT_GRAD_COLUMN] = out[INPUT_GRAD_COLUMN].str.strip()
        bad = ~out[INPUT_GRAD_COLUMN].isin(("", "0", "1"))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"{label} {path}, line {i + 2}, column {INPUT_GRAD_COLUMN!r}: "
                             f"{frame[INPUT_GRAD_COLUMN].iloc[i]!r} is not 1, 0 or empty")  # fmt: skip
    if layout:
        out[LAYOUT_COLUMN] = out[LAYOUT_COLUMN].str.strip().str.lower()
        bad = ~out[LAYOUT_COLUMN].isin(("", "nchw", "nhwc"))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"{label} {path}, line {i + 2}, column {LAYOUT_COLUMN!r}: "
                             f"{frame[LAYOUT_COLUMN].iloc[i]!r} is not nchw, nhwc or empty")  # fmt: skip
    for column in int_columns:
        # Line numbers as an editor shows them: the header is line 1.
        values = pd.to_numeric(out[column].str.strip(), errors="coerce")
        bad = values.isna() | (values != values.round())
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(
                f"{label} {path}, line {i + 2}, column {column!r}: {out[column].iloc[i]!r} is not an integer"
            )
        out[column] = values.astype("int64")
        if column in extra_int_columns and (out[column] <= 0).any():
            i = int((out[column] <= 0).to_numpy().nonzero()[0][0])
            raise ValueError(
                f"{label} {path}, line {i + 2}, column {column!r}: must be positive, got {out[column].iloc[i]}"
            )
    empty = out["network"].str.strip() == ""
    if empty.any():
        raise ValueError(f"{label} {path}, line {int(empty.to_numpy().nonzero()[0][0]) + 2}, column 'network' is empty")
    for i, row in enumerate(out[list(LAYER_FIELDS)].to_dict("records")):
        try:
            ConvProblem(**row)
        except ValueError as exc:
            raise ValueError(f"{label} {path}, line {i + 2}: not a valid convolution: {exc}") from None
    return out.reset_index(drop=True)


def load_suites(names: Iterable[str] | None = None, directory: str | Path = DEFAULT_SUITES_DIR) -> pd.DataFrame:
    """Read several suite CSVs into one frame.

    Parameters
    ----------
    names : iterable of str, optional
        Suites to read, in the given order. By default every ``*.csv`` present in ``directory``, in sorted
        order (so a checkout holding only some of the suites still loads what it has).
    directory : str or Path
        Where the CSVs are; the repository's ``data/suites`` by default.

    Raises
    ------
    ValueError
        As :func:`load_suite`, or when ``names`` is None and the directory holds no CSV.
    """
    directory = Path(directory)
    if names is None:
        names = sorted(path.stem for path in directory.glob("*.csv"))
        if not names:
            raise ValueError(f"no suite CSV files in {directory}")
    frames = [load_suite(name, directory) for name in names]
    if not frames:
        return pd.DataFrame({column: pd.Series(dtype=object) for column in SUITE_COLUMNS})
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------------------------- problems
def suite_layer_problems(
    frame: pd.DataFrame, dtype: str, layout: str = "nchw"
) -> list[tuple[dict[str, Any], ConvProblem]]:
    """Each row of a suite frame with its forward problem.

    Keeps the per-row (network, layer, size) identity, duplicates included, so that per-layer costs can be
    summed into whole-network totals.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows with (at least) :data:`LAYER_FIELDS`; typically from :func:`load_suite` / :func:`load_suites`.
    dtype, layout : str
        Numeric type and memory layout of the problems (see :data:`~algosel.problem.DTYPES`, ``LAYOUTS``).

    Returns
    -------
    list of (dict, ConvProblem)
        ``(row as a dict, problem with direction "fwd")`` in row order.

    Raises
    ------
    ValueError
        If a shape column is missing, or a row is not a valid problem.
    """
    missing = [column for column in LAYER_FIELDS if column not in frame.columns]
    if missing:
        raise ValueError(f"suite frame is missing column(s): {', '.join(missing)}")
    pairs = []
    for row in frame.to_dict("records"):
        fields = {field: int(row[field]) for field in LAYER_FIELDS}
        pairs.append((row, ConvProblem(**fields, dtype=dtype, layout=layout, direction="fwd")))
    return pairs


def suite_problems(frame: pd.DataFrame, dtype: str, layout: str = "nchw") -> list[ConvProblem]:
    """The distinct forward problems of a suite frame, in order of first appearance.

    Many layers share a shape (e.g. repeated ResNet blocks, or the same layer at several FPN sizes that
    coincide), and each shape needs measuring only once; deduplication is by :attr:`ConvProblem.shape_key`.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows with (at least) :data:`LAYER_FIELDS`.
    dtype, layout : str
        Numeric type and memory layout of the problems.

    Returns
    -------
    list of ConvProblem
        With direction ``"fwd"``.
    """
    seen: set[str] = set()
    problems = []
    for _, problem in suite_layer_problems(frame, dtype, layout):
        if problem.shape_key not in seen:
            seen.add(problem.shape_key)
            problems.append(problem)
    return problems


# ---------------------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m algosel.measure.suites [OUTDIR] [--suites NAME ...]``: extract and write suite CSVs."""
    parser = argparse.ArgumentParser(prog="python -m algosel.measure.suites", description=main.__doc__)
    parser.add_argument(
        "outdir", nargs="?", type=Path, default=DEFAULT_SUITES_DIR, help=f"default: {DEFAULT_SUITES_DIR}"
    )
    parser.add_argument("--suites", nargs="+", choices=sorted(SUITES), help="default: all suites")
    args = parser.parse_args(argv)
    try:
        paths = write_suites(args.outdir, args.suites)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        frame = load_suite(path.stem, path.parent)
        print(f"{path}: {len(frame)} conv calls, {len(suite_problems(frame, 'float32'))} distinct shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
