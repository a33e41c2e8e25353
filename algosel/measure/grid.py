"""A seeded grid of convolution shapes covering what networks use.

The grid is sampled, not enumerated (the full product of the axes is astronomically large): each shape first
draws a *family* (the kinds of layer networks are made of), then its sizes within that family. Axes covered:
channels 1 to 4096, spatial sizes 1 to 600, kernels 1/3/5/7/11 plus asymmetric 1xk/kx1 and fully-connected-mode
kernels, strides 1, 2 and 4, 'same' and 'valid' padding, dilation 1 to 6 and beyond, groups 1 and depthwise,
batch 1 to 1600. Shapes whose operands would not fit the memory budget, or whose FLOPs exceed the sweep's time
budget, are redrawn. The same seed and mix always give the same list, and a longer list starts with the shorter.

Three mixes of families (:data:`MIXES`): ``networks``, the shares of layers in CNNs (the shipped records' grid),
``loss``, the shares of the selector's held-out loss (where more records teach the model most), and ``targeted``,
where the 2026-12-05 selector loses and is least sure, strided stems over few channels among them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from algosel.problem import ConvProblem, same_padding

#: (family, probability). Families mirror the layers of CNNs: plain 3x3, pointwise 1x1, large kernels
#: (stems, AlexNet), dilated (segmentation), depthwise (mobile nets), fully connected mode, and odd shapes.
FAMILIES: tuple[tuple[str, float], ...] = (
    ("conv3x3", 0.30),
    ("pointwise", 0.20),
    ("large_kernel", 0.10),
    ("dilated", 0.08),
    ("depthwise", 0.12),
    ("fully_connected", 0.08),
    ("odd", 0.12),
)
#: (family, probability) where the shipped selector loses time: each family's share of the summed log time ratio
#: (pick over best) of the shipped model on the held-out grid problems of its records (the models/h200-cudnn91900 of
#: 2026-12-01, trained on data/sweeps/h200 alone; 792 problems; `python benchmarks/archive/family_loss.py --model M`,
#: CPU, 2026-12-05, with the family told from the shape by :func:`family_of`): pointwise 35.5%, conv3x3 24.6%, large
#: kernels 16.6%, depthwise 10.2%, dilated 8.7%, odd 2.3%, fully connected 2.1% (per problem, large kernels lose
#: 0.131, pointwise 0.110, dilated 0.086, conv3x3 0.072, depthwise 0.065, odd 0.060, fully connected 0.011).
#: Fully connected and odd keep a floor of 0.04 so that every family still grows; the rest is shared as the loss is.
LOSS_FAMILIES: tuple[tuple[str, float], ...] = (
    ("conv3x3", 0.237),
    ("pointwise", 0.342),
    ("large_kernel", 0.160),
    ("dilated", 0.084),
    ("depthwise", 0.097),
    ("fully_connected", 0.04),
    ("odd", 0.04),
)
#: (family, probability) where the shipped selector of 2026-12-05 loses and where it is least sure, on the 1,750
#: held-out problems of its six datasets that a training step runs (`python benchmarks/family_loss.py`, CPU,
#: 2026-12-06, every source: grid, suites and layers files; the family told by :func:`family_of`, which now tells
#: ``stem``, a strided kernel of 3 or more over at most 4 channels): the mean of each family's share of the summed
#: log time ratio (pointwise 30.7%, conv3x3 23.5%, large kernels 11.1%, depthwise 10.6%, stems 8.5%, dilated 7.4%,
#: fully connected 4.8%, odd 3.4%) and its share of the summed mean loss per problem (stems 0.198, dilated 0.095,
#: large kernels 0.094, odd 0.083, depthwise 0.060, conv3x3 0.042, pointwise 0.036, fully connected 0.016). Swept in
#: float16 and bfloat16 (float16 holds 60% of the loss; bfloat16 has the fewest records), both layouts.
TARGETED_FAMILIES: tuple[tuple[str, float], ...] = (
    ("stem", 0.201),
    ("pointwise", 0.182),
    ("conv3x3", 0.151),
    ("large_kernel", 0.131),
    ("dilated", 0.113),
    ("depthwise", 0.101),
    ("odd", 0.084),
    ("fully_connected", 0.037),
)
#: The family mixes a grid can draw from (:attr:`GridSpec.mix`).
MIXES: dict[str, tuple[tuple[str, float], ...]] = {
    "networks": FAMILIES,
    "loss": LOSS_FAMILIES,
    "targeted": TARGETED_FAMILIES,
}
_NICE_CHANNELS = np.array(
    [
        3,
        8,
        16,
        24,
        32,
        40,
        48,
        64,
        80,
        96,
        112,
        128,
        160,
        192,
        256,
        320,
        384,
        480,
        512,
        576,
        640,
        768,
        960,
        1024,
        1280,
        1536,
        2048,
        2560,
        3072,
        4096,
    ]
)
_BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])


@dataclass(frozen=True)
class GridSpec:
    """Parameters of the grid.

    ``max_operand_bytes`` bounds x + w + y of one problem; ``max_flops`` bounds its FLOPs (the sweep times
    every candidate several times, so this bounds the sweep's time per problem). ``mix`` names the family shares
    of :data:`MIXES`. ``max_count`` bounds ``count`` before anything is drawn (None: no bound, for ``algosel
    grid``, which prints each shape as it is drawn): a sweep's cases are all drawn before the first is measured or
    counted (about 0.1 ms a shape; the shipped H200 records hold 1,914 shapes), so ten million would be minutes of
    silence before a dry run's count and GPU-years after it.
    """

    count: int = 400
    seed: int = 0
    max_operand_bytes: int = 256 << 20
    max_flops: float = 5e10
    mix: str = "networks"
    max_count: int | None = 100_000

    def __post_init__(self) -> None:
        if self.mix not in MIXES:
            raise ValueError(f"grid mix must be one of {', '.join(MIXES)}; got {self.mix!r}")
        if self.count < 0 or (self.max_count is not None and self.count > self.max_count):
            raise ValueError(
                f"grid count {self.count}: must be 0 to {self.max_count:,} shapes (all are drawn before the first "
                "case, about 0.1 ms each; the shipped H200 records hold 1,914)"
            )

    @property
    def source(self) -> str:
        """The records' ``source`` of this grid's cases: ``grid`` for the networks mix, ``grid:<mix>`` otherwise."""
        return "grid" if self.mix == "networks" else f"grid:{self.mix}"


def _channels(rng: np.random.Generator, odd_share: float = 0.15) -> int:
    if rng.random() < odd_share:
        return int(rng.integers(1, 4097)) if rng.random() < 0.3 else int(rng.integers(1, 300))
    return int(rng.choice(_NICE_CHANNELS))


def _spatial(rng: np.random.Generator, low: int = 1, high: int = 600) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _draw(rng: np.random.Generator, family: str) -> dict:
    """Fields of one shape of ``family`` (not yet validated)."""
    n = int(rng.choice(_BATCHES))
    h = _spatial(rng, 4, 600)
    w = h if rng.random() < 0.7 else _spatial(rng, 4, 600)
    c, k = _channels(rng), _channels(rng)
    stride = int(rng.choice([1, 1, 1, 2, 2, 4]))
    f = {"n": n, "c": c, "k": k, "h": h, "w": w, "groups": 1, "dilation_h": 1, "dilation_w": 1}
    if family == "conv3x3":
        f.update(r=3, s=3, pad_h=1, pad_w=1, stride_h=min(stride, 2), stride_w=min(stride, 2))
    elif family == "pointwise":
        f.update(r=1, s=1, pad_h=0, pad_w=0, stride_h=1, stride_w=1)
        if rng.random() < 0.2:  # downsampling projection shortcut
            f.update(stride_h=2, stride_w=2)
    elif family == "large_kernel":
        kernel = int(rng.choice([5, 7, 11]))
        pad = same_padding(kernel) if rng.random() < 0.6 else 0
        f.update(r=kernel, s=kernel, pad_h=pad, pad_w=pad, stride_h=stride, stride_w=stride)
    elif family == "dilated":
        d = int(rng.choice([2, 3, 4, 5, 6, 8, 12, 18]))
        f.update(r=3, s=3, pad_h=d, pad_w=d, stride_h=1, stride_w=1, dilation_h=d, dilation_w=d)
    elif family == "depthwise":
        kernel = int(rng.choice([3, 3, 5, 7]))
        f.update(
            k=c,
            groups=c,
            r=kernel,
            s=kernel,
            pad_h=same_padding(kernel),
            pad_w=same_padding(kernel),
            stride_h=min(stride, 2),
            stride_w=min(stride, 2),
        )
        if rng.random() < 0.15:  # depth multiplier 2
            f["k"] = 2 * c
    elif family == "fully_connected":
        size = int(rng.choice([1, 2, 3, 4, 5, 6, 7, 7, 8, 13]))
        f.update(h=size, w=size, r=size, s=size, pad_h=0, pad_w=0, stride_h=1, stride_w=1)
        f["n"] = int(rng.choice([1, 8, 32, 64, 128, 256, 512, 1024, 1600]))
        f["c"] = int(rng.choice([64, 128, 256, 512, 1024, 2048])) if size > 1 else _channels(rng)
    elif family == "stem":
        # A network's first convolution: a strided kernel over the image's few channels (ResNet's 7x7/2, MobileNet's
        # 3x3/2, ConvNeXt's 4x4/4 patches), at image sizes.
        kernel = int(rng.choice([3, 4, 5, 6, 7, 7]))
        stride = int(rng.choice([2, 2, 4])) if kernel != 4 else 4
        pad = same_padding(kernel) if kernel % 2 and rng.random() < 0.8 else 0
        f.update(r=kernel, s=kernel, pad_h=pad, pad_w=pad, stride_h=stride, stride_w=stride, h=_spatial(rng, 32, 600))
        f["w"] = f["h"] if rng.random() < 0.7 else _spatial(rng, 32, 600)
        f["c"], f["k"] = int(rng.choice([1, 2, 3, 3, 3, 4])), int(rng.choice([16, 24, 32, 48, 64, 96, 128]))
    else:  # odd: asymmetric kernels, odd channel counts, anything goes
        r, s = (int(v) for v in rng.choice([1, 2, 3, 4, 5, 7], size=2))
        if rng.random() < 0.3:
            r, s = (1, 7) if rng.random() < 0.5 else (7, 1)
        pad_h, pad_w = (same_padding(r), same_padding(s)) if rng.random() < 0.5 else (0, 0)
        f.update(r=r, s=s, pad_h=pad_h, pad_w=pad_w, stride_h=stride, stride_w=int(rng.choice([1, 2, stride])))
        f["c"], f["k"] = _channels(rng, 0.6), _channels(rng, 0.6)
        if rng.random() < 0.2 and f["c"] % 2 == 0 and f["k"] % 2 == 0:
            f["groups"] = 2
    return f


def family_of(p: ConvProblem) -> str:
    """The family of :data:`MIXES` a grid shape was drawn from, told from the shape alone (the families' shapes
    overlap only where a shape of one family happens to look like another's: a large kernel or 3x3 drawn strided over
    at most 4 channels is told a ``stem``). Used to measure where a selector loses
    time per family (``benchmarks/archive/family_loss.py``, which gave :data:`LOSS_FAMILIES`)."""
    if p.is_fully_connected:
        return "fully_connected"
    if p.is_depthwise:
        return "depthwise"
    if p.c <= 4 and p.groups == 1 and min(p.stride_h, p.stride_w) >= 2 and min(p.r, p.s) >= 3:
        return "stem"
    if p.dilation_h > 1:
        return "dilated"
    if p.r == p.s == 1:
        return "pointwise"
    if p.r == p.s == 3 and p.pad_h == 1:
        return "conv3x3"
    if p.r == p.s and p.r in (5, 7, 11):
        return "large_kernel"
    return "odd"


def iter_grid(spec: GridSpec, dtype: str = "float32", layout: str = "nchw") -> Iterator[ConvProblem]:
    """The shapes of :func:`sample_grid`, one by one as they are drawn: what prints a large grid at once
    (``algosel grid --count 100000000`` starts printing instead of drawing for minutes first).

    Raises
    ------
    ValueError
        Once ``200 * spec.count`` draws have not found ``spec.count`` distinct shapes within the budgets.
    """
    rng = np.random.default_rng(spec.seed)
    families = MIXES[spec.mix]
    names = [f for f, _ in families]
    probs = np.array([p for _, p in families])
    seen: set[str] = set()
    attempts = 0
    while len(seen) < spec.count:
        attempts += 1
        if attempts > 200 * spec.count:
            raise ValueError(
                f"could not draw {spec.count} distinct grid shapes within max_flops={spec.max_flops:g} and "
                f"max_operand_bytes={spec.max_operand_bytes} ({len(seen)} found in {attempts - 1} draws); raise "
                "the budgets or lower the count"
            )
        fields = _draw(rng, str(rng.choice(names, p=probs / probs.sum())))
        try:
            p = ConvProblem(**fields, dtype=dtype, layout=layout, direction="fwd")
        except ValueError:
            continue  # e.g. a kernel larger than a small input: redraw
        if p.bytes_moved > spec.max_operand_bytes or p.flops > spec.max_flops or p.shape_key in seen:
            continue
        seen.add(p.shape_key)
        yield p


def sample_grid(spec: GridSpec, dtype: str = "float32", layout: str = "nchw") -> list[ConvProblem]:
    """``spec.count`` distinct forward problems, deterministic in ``spec.seed``."""
    return list(iter_grid(spec, dtype, layout))
