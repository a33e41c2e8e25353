"""Two network families where the joint model loses most on hidden layers, as models ``algosel layers`` reads:

- :func:`csp_backbone`: a CSP detector backbone (the YOLOv5/v8 family: a 6x6/2 stem, then stages of a 3x3/2
  downsample and a C3 block: two 1x1 halves, bottlenecks of 1x1 and 3x3 on one, a 1x1 over both), and SPPF's 1x1s;
  widths 32..512 (the small model's 0.5 width), every convolution without bias and followed by SiLU;
- :func:`aspp_head`: DeepLabV3's ASPP head (torchvision's ``DeepLabHead``) over a ResNet-50's output-stride-8
  features: a 1x1 and three 3x3 of dilation 12, 24 and 36 on 2048 channels, the pooled branch's 1x1, the 1x1
  projection of the five, a 3x3 and the 1x1 classifier. The input is the features themselves (2048 channels).

    algosel layers --model benchmarks/targeted_nets.py:csp_backbone --input 16,3,640,640 --out csp.csv
"""

from __future__ import annotations

import torch
from torch import nn


def _conv(c_in: int, c_out: int, k: int = 1, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    pad = dilation * (k - 1) // 2
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, pad, dilation=dilation, bias=False), nn.SiLU())


class _Bottleneck(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.cv1, self.cv2 = _conv(c, c, 1), _conv(c, c, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.cv2(self.cv1(x))


class _C3(nn.Module):
    """CSP block: two 1x1 halves, ``n`` bottlenecks on one, a 1x1 over both."""

    def __init__(self, c_in: int, c_out: int, n: int):
        super().__init__()
        half = c_out // 2
        self.cv1, self.cv2, self.cv3 = _conv(c_in, half), _conv(c_in, half), _conv(2 * half, c_out)
        self.m = nn.Sequential(*(_Bottleneck(half) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], dim=1))


class _SPPF(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.cv1, self.cv2 = _conv(c, c // 2), _conv(2 * c, c)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, dim=1))


def csp_backbone() -> nn.Module:
    """The CSP backbone of the module docstring (its stage outputs are what a detector's neck reads)."""
    widths, depths = (64, 128, 256, 512), (1, 2, 3, 1)
    layers: list[nn.Module] = [_conv(3, 32, 6, 2)]
    c = 32
    for width, depth in zip(widths, depths):
        layers += [_conv(c, width, 3, 2), _C3(width, width, depth)]
        c = width
    layers.append(_SPPF(c))
    return nn.Sequential(*layers)


class _ASPP(nn.Module):
    def __init__(self, c_in: int = 2048, c: int = 256, rates: tuple[int, ...] = (12, 24, 36), classes: int = 21):
        super().__init__()
        self.branches = nn.ModuleList([_conv(c_in, c, 1), *(_conv(c_in, c, 3, dilation=r) for r in rates)])
        self.pooled = _conv(c_in, c, 1)
        self.project = _conv(c * (len(rates) + 2), c, 1)
        self.head = nn.Sequential(_conv(c, c, 3), nn.Conv2d(c, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pooled(nn.functional.adaptive_avg_pool2d(x, 1)).expand(-1, -1, *x.shape[-2:])
        return self.head(self.project(torch.cat([*(b(x) for b in self.branches), pooled], dim=1)))


def aspp_head() -> nn.Module:
    """DeepLabV3's ASPP head of the module docstring."""
    return _ASPP()
