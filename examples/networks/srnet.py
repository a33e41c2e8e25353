"""A super-resolution network (EDSR-baseline's design, Lim et al., 2017), written out here rather than taken from a
zoo: the GPU-bound zoo's network of many same-size 3x3 convolutions at 64 channels (benchmarks/zoo_gpu.py).

A 3x3 head to 64 channels, 16 residual blocks (3x3 conv, ReLU, 3x3 conv, the residual scaled by 0.1; no batch
norm), a 3x3 conv with a long skip, and a x4 upsampler of two stages (a 3x3 conv to 256 channels and a pixel
shuffle by 2), then a 3x3 conv to RGB. 37 convolutions, all 3x3. At batch 32 on 96x96 low-resolution patches
(384x384 out) a training step keeps an H100 busy.

``algosel layers --model examples/networks/srnet.py:make_model --input 32,3,96,96 --out srnet.csv`` lists its
layers.
"""

from __future__ import annotations

import torch
from torch import nn

#: Feature channels of the body.
WIDTH = 64
#: Residual blocks of the body.
BLOCKS = 16
#: Upscaling factor (two pixel-shuffle stages of 2).
SCALE = 4


class ResBlock(nn.Module):
    def __init__(self, width: int, res_scale: float = 0.1):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True),
                                  nn.Conv2d(width, width, 3, padding=1))  # fmt: skip
        self.res_scale = res_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.res_scale * self.body(x)


class SRNet(nn.Module):
    def __init__(self, width: int = WIDTH, blocks: int = BLOCKS):
        super().__init__()
        self.head = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(*(ResBlock(width) for _ in range(blocks)), nn.Conv2d(width, width, 3, padding=1))
        stages = []
        for _ in range(SCALE // 2):
            stages += [nn.Conv2d(width, 4 * width, 3, padding=1), nn.PixelShuffle(2)]
        self.up = nn.Sequential(*stages, nn.Conv2d(width, 3, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        return self.up(x + self.body(x))


def make_model() -> nn.Module:
    """The super-resolution network of this file (inputs: N x 3 x H x W; outputs N x 3 x 4H x 4W)."""
    return SRNet()
