"""MyNet: a small encoder-decoder segmentation CNN, the example network of docs/tutorial.md.

It is in none of algosel's suites on purpose, and made of the layers that make selection hard: channel counts that
are not multiples of 8 (29, 45, 77, 139), strided 3x3 downsampling, a 7x1 / 1x7 factorised pair, a depthwise
separable block, dilated context convolutions (rates 2, 3 and 5, as in DeepLab's ASPP), skip connections
concatenated in the decoder and a 1x1 classifier head over 11 classes. 22 convolutions; a training step at batch 16
on 128x128 images fits any GPU.

``algosel layers --model examples/mynet.py:make_model --input 16,3,128,128 --out mynet.csv`` lists its layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: Classes of the segmentation head.
NUM_CLASSES = 11


def conv_bn(c_in: int, c_out: int, kernel: int | tuple[int, int] = 3, stride: int = 1, dilation: int = 1,
            groups: int = 1) -> nn.Sequential:  # fmt: skip
    """Conv (no bias: the batch norm has one) + batch norm + ReLU, padded to keep the size at stride 1."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    padding = (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, (kh, kw), stride=stride, padding=padding, dilation=dilation, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DepthwiseSeparable(nn.Module):
    """A depthwise 3x3 then a pointwise 1x1 (MobileNet's block), with a residual connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = conv_bn(channels, channels, 3, groups=channels)
        self.pointwise = conv_bn(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pointwise(self.depthwise(x))


class Context(nn.Module):
    """Parallel dilated 3x3 branches and a 1x1 branch, concatenated and fused by a 1x1 (DeepLab's ASPP, without
    its image pooling)."""

    def __init__(self, c_in: int, c_branch: int, rates: tuple[int, ...] = (2, 3, 5)) -> None:
        super().__init__()
        self.point = conv_bn(c_in, c_branch, 1)
        self.dilated = nn.ModuleList(conv_bn(c_in, c_branch, 3, dilation=r) for r in rates)
        self.fuse = conv_bn(c_branch * (1 + len(rates)), c_in, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([self.point(x), *(branch(x) for branch in self.dilated)], dim=1))


class Up(nn.Module):
    """Bilinear 2x upsampling, concatenation with the encoder's skip, two 3x3 convolutions."""

    def __init__(self, c_in: int, c_skip: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(c_in + c_skip, c_out, 3)
        self.conv2 = conv_bn(c_out, c_out, 3)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.conv2(self.conv1(torch.cat([x, skip], dim=1)))


class MyNet(nn.Module):
    """The network: input ``(n, 3, h, w)``, output ``(n, NUM_CLASSES, h, w)`` logits (h, w multiples of 16)."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 29, 3, stride=2), conv_bn(29, 29, 3))  # 1/2
        self.down1 = nn.Sequential(conv_bn(29, 45, 3, stride=2), conv_bn(45, 45, (7, 1)), conv_bn(45, 45, (1, 7)))
        self.down2 = nn.Sequential(conv_bn(45, 77, 3, stride=2), DepthwiseSeparable(77))  # 1/8
        self.down3 = nn.Sequential(conv_bn(77, 139, 3, stride=2), conv_bn(139, 139, 3))  # 1/16
        self.context = Context(139, 48)
        self.up3 = Up(139, 77, 77)
        self.up2 = Up(77, 45, 45)
        self.up1 = Up(45, 29, 29)
        self.head = nn.Conv2d(29, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.stem(x)
        s2 = self.down1(s1)
        s3 = self.down2(s2)
        y = self.context(self.down3(s3))
        y = self.up1(self.up2(self.up3(y, s3), s2), s1)
        return F.interpolate(self.head(y), size=x.shape[-2:], mode="bilinear", align_corners=False)


def make_model() -> nn.Module:
    """MyNet with 11 classes (what ``algosel layers --model examples/mynet.py:make_model`` builds)."""
    return MyNet()
