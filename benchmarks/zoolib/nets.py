"""The zoo's networks and the training step every job times.

A network is a name in :attr:`ZooConfig.nets <zoolib.config.ZooConfig.nets>` (``name -> (batch, input size,
kind)``); its kind says how it is built: a builder of :attr:`ZooConfig.builders` where one is registered for the kind
(benchmarks/zoo_gpu.py registers its own), else the detection FPN head (``fpn``), the tutorial's MyNet
(``example``), or torchvision's classification (``cls``) and segmentation (``seg``) networks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoolib.config import ZooConfig

#: name -> (batch, input size, kind)
NETS = MappingProxyType({
    "resnet50": (32, 224, "cls"),
    "resnext50_32x4d": (32, 224, "cls"),
    "efficientnet_b0": (64, 224, "cls"),
    "efficientnet_v2_s": (32, 224, "cls"),
    "mobilenet_v3_large": (64, 224, "cls"),
    "regnet_y_800mf": (64, 224, "cls"),
    "convnext_tiny": (32, 224, "cls"),
    "densenet121": (32, 224, "cls"),
    "squeezenet1_1": (64, 224, "cls"),
    "shufflenet_v2_x1_0": (64, 224, "cls"),
    "deeplabv3_resnet50": (4, 384, "seg"),
    "fcn_resnet50": (4, 384, "seg"),
    "fpn": (1, 0, "fpn"),
    "mynet": (16, 128, "example"),
})  # fmt: skip
DTYPES = ("float32", "amp")
#: 20 detection input sizes (multiples of 32 around 672x1024, a common multi-scale training range), none of them
#: among the FPN suite's 20 sizes around 800x1216 that the records hold.
FPN_SIZES = tuple((h, w) for h in (608, 640, 672, 704, 736) for w in (960, 992, 1024, 1088))
EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def build_network(cfg: ZooConfig, name: str, dtype: str, device: str):
    """``(step, inputs)``: a training step of the network (``step(i)`` takes the ``i``-th input in turn: forward,
    loss, backward, SGD) and how many inputs it turns over, in ``dtype`` (``float32``: NCHW, TF32 allowed; ``amp``:
    float16 autocast, channels_last)."""
    import torch

    batch, size, kind = cfg.nets[name]
    torch.manual_seed(0)
    amp = dtype == "amp"
    mf = torch.channels_last if amp else torch.contiguous_format
    if kind in cfg.builders:
        model, inputs = cfg.builders[kind](name, batch, size, mf, device)
    elif kind == "fpn":
        model, inputs = fpn_head(batch, mf, device, smoke=cfg.smoke)
    elif kind == "example":
        model, inputs = example_net(batch, size, mf, device, smoke=cfg.smoke)
    else:
        model, inputs = torchvision_net(name, kind, batch, size, mf, device)
    return training_step(model, inputs, amp, device), len(inputs)


def fpn_head(batch: int, mf, device: str, smoke: bool = False):
    """The detection head (algosel.measure.suites.FPNHead) over :data:`FPN_SIZES` (the smoke run: three of them at a
    32nd of their size, a few ms a step)."""
    from algosel.measure.suites import FPNHead

    model = FPNHead().to(device).to(memory_format=mf)
    sizes = [(h // 32, w // 32) for h, w in FPN_SIZES[:3]] if smoke else FPN_SIZES
    inputs = [[t.contiguous(memory_format=mf) for t in model.example_inputs(h, w, batch, device=device)]
              for h, w in sizes]  # fmt: skip
    return model, inputs


def example_net(batch: int, size: int, mf, device: str, smoke: bool = False):
    """The tutorial's MyNet (examples/mynet.py; the smoke run: batch 2 at 32x32)."""
    import torch

    sys.path.insert(0, str(EXAMPLES))
    from mynet import make_model

    model = make_model().to(device).to(memory_format=mf)
    batch, size = (2, 32) if smoke else (batch, size)
    return model, [[torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=mf)]]


def torchvision_net(name: str, kind: str, batch: int, size: int, mf, device: str):
    """torchvision's network ``name`` (``seg``: of its segmentation models), without weights."""
    import torch
    import torchvision

    factory = getattr(torchvision.models.segmentation if kind == "seg" else torchvision.models, name)
    # no weights of any kind (the GPU machine has no network): segmentation models load their backbone's ImageNet
    # weights unless told not to
    extra = {"aux_loss": False, "weights_backbone": None} if kind == "seg" else {}
    model = factory(weights=None, **extra).to(device)
    model = model.to(memory_format=mf)
    return model, [[torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=mf)]]


def training_step(model, inputs: list, amp: bool, device: str):
    """``step(i)``: one SGD step of ``model`` on ``inputs[i % len(inputs)]`` (autocast where ``amp``)."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    # a CPU run (the smoke run) autocasts to bfloat16: the CPU's float16 convolutions are reference kernels, 5x
    # slower than float32 there, and the smoke run checks the driver, not the kernels
    half = torch.float16 if device.startswith("cuda") else torch.bfloat16

    def step(i: int):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=half, enabled=amp):
            out = model(*inputs[i % len(inputs)])
        if isinstance(out, dict):
            out = out["out"]
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum(o.float().square().mean() for o in outs)
        loss.backward()
        opt.step()

    return step
