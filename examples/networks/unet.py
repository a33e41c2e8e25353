"""A U-Net (Ronneberger et al., 2015) for segmentation, written out here rather than taken from a zoo: the GPU-bound
zoo's network of wide 3x3 convolutions at full resolution (benchmarks/zoo_gpu.py).

Four levels down (max pooling) and four up, two 3x3 conv + batch norm + ReLU per level, 64 channels at the top
doubling to 1024 at the bottom, skip connections concatenated. The way up is nearest upsampling then a 3x3
convolution (not a transposed convolution), so that every convolution is an ``F.conv2d`` the hook routes. A 1x1
head over ``NUM_CLASSES`` classes. At batch 16 on 256x256 images a training step keeps an H100 busy.

``algosel layers --model examples/networks/unet.py:make_model --input 16,3,256,256 --out unet.csv`` lists its
layers.
"""

from __future__ import annotations

import torch
from torch import nn

#: Classes of the segmentation head.
NUM_CLASSES = 21


def double_conv(c_in: int, c_out: int) -> nn.Sequential:
    """Two 3x3 convolutions (no bias: batch norm has one), each with batch norm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class Up(nn.Module):
    """Nearest upsampling by 2, a 3x3 convolution halving the channels, the skip concatenated, a double conv."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c_in, c_in // 2, 3, padding=1))
        self.conv = double_conv(c_in, c_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = NUM_CLASSES, base: int = 64):
        super().__init__()
        widths = [base * 2**i for i in range(5)]  # 64, 128, 256, 512, 1024
        self.inc = double_conv(in_channels, widths[0])
        self.downs = nn.ModuleList(double_conv(widths[i], widths[i + 1]) for i in range(4))
        self.ups = nn.ModuleList(Up(widths[i + 1], widths[i]) for i in reversed(range(4)))
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(self.pool(skips[-1])))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.head(x)


def make_model() -> nn.Module:
    """The U-Net of this file (inputs: N x 3 x H x W, H and W multiples of 16)."""
    return UNet()
