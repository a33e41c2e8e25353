"""One convolution problem: the shape, numeric type, memory layout and direction of a 2-D convolution.

:class:`ConvProblem` is the single description of "what is computed" used by every part of algosel: the
sweeper measures candidates for it, the records store its fields as columns, the ranker derives features
from it and the runtime hook builds it from a ``Conv2d`` call.

Conventions (cuDNN's): ``n`` batch, ``c`` input channels, ``k`` output channels, ``h x w`` input size,
``r x s`` kernel size. The three directions of one convolution are

- ``fwd``:        y  = conv(x, w)
- ``bwd_data``:   dx = conv_dgrad(dy, w)     (the gradient with respect to the input)
- ``bwd_filter``: dw = conv_wgrad(x, dy)     (the gradient with respect to the weight)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DType:
    """One numeric type of a problem: its storage and its math mode.

    ``float32`` is PyTorch's default for convolutions: float32 storage with TF32 tensor-core math allowed;
    ``float32_strict`` forbids TF32. Both half types accumulate in float32.
    """

    name: str
    element_bytes: int
    torch_name: str  # the storage dtype's name in torch
    tf32: bool  # TF32 math allowed (cuDNN's and cuBLAS's switches are set to this while measuring)
    cudnn_data_type: str  # cuDNN's data type of the storage (CUDNN_DATA_<this>)
    #: Largest relative L2 error ``|out - ref| / |ref|`` accepted against the float32 (TF32 off) reference. TF32
    #: keeps a 10-bit mantissa (~5e-4 per product), half types 10/7 bits; the sums are accumulated in float32.
    tolerance: float


#: The dtype table: the one definition of every numeric type algosel knows (everything else derives from it).
DTYPE_TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 4, "float32", True, "FLOAT", 5e-3),
        DType("float32_strict", 4, "float32", False, "FLOAT", 1e-4),
        DType("float16", 2, "float16", False, "HALF", 5e-3),
        DType("bfloat16", 2, "bfloat16", False, "BFLOAT16", 3e-2),
    )
}
#: Numeric type names, in table order.
DTYPES: tuple[str, ...] = tuple(DTYPE_TABLE)
#: Bytes per element of each numeric type's storage.
DTYPE_BYTES: dict[str, int] = {name: d.element_bytes for name, d in DTYPE_TABLE.items()}


def dtype_of(torch_name: str, tf32: bool) -> str | None:
    """The problem dtype of a computation in torch dtype ``torch_name`` (``"float32"``...) with cuDNN's TF32 switch
    ``tf32``; ``None`` for a dtype algosel does not cover."""
    if torch_name == "float32":
        return "float32" if tf32 else "float32_strict"
    return torch_name if torch_name in DTYPE_TABLE and DTYPE_TABLE[torch_name].torch_name == torch_name else None


#: Memory layouts of activations and weights: ``nchw`` (PyTorch's contiguous) or ``nhwc`` (channels_last).
LAYOUTS: tuple[str, ...] = ("nchw", "nhwc")
DIRECTIONS: tuple[str, ...] = ("fwd", "bwd_data", "bwd_filter")

#: The integer (shape) fields of :class:`ConvProblem`, in order.
SHAPE_FIELDS: tuple[str, ...] = (
    "n",
    "c",
    "k",
    "h",
    "w",
    "r",
    "s",
    "pad_h",
    "pad_w",
    "stride_h",
    "stride_w",
    "dilation_h",
    "dilation_w",
    "groups",
)
#: The fields that must be at least 1 (the paddings may be 0).
_POSITIVE_FIELDS = tuple(f for f in SHAPE_FIELDS if f not in ("pad_h", "pad_w"))
_KEY_RE = re.compile(
    r"^n(?P<n>\d+)_c(?P<c>\d+)_k(?P<k>\d+)_h(?P<h>\d+)_w(?P<w>\d+)_r(?P<r>\d+)_s(?P<s>\d+)"
    r"_p(?P<pad_h>\d+)x(?P<pad_w>\d+)_u(?P<stride_h>\d+)x(?P<stride_w>\d+)"
    r"_d(?P<dilation_h>\d+)x(?P<dilation_w>\d+)_g(?P<groups>\d+)"
    r"_(?P<dtype>[a-z0-9_]+?)_(?P<layout>nchw|nhwc)_(?P<direction>fwd|bwd_data|bwd_filter)$"
)


@dataclass(frozen=True)
class ConvProblem:
    """A 2-D convolution problem, validated on construction.

    Parameters
    ----------
    n, c, k : int
        Batch size, input channels, output channels.
    h, w : int
        Input height and width.
    r, s : int
        Kernel height and width.
    pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w : int
        Zero padding (each side), stride and dilation per axis.
    groups : int
        Channel groups; ``groups == c == k`` is a depthwise convolution.
    dtype : str
        One of :data:`DTYPES`.
    layout : str
        One of :data:`LAYOUTS`.
    direction : str
        One of :data:`DIRECTIONS`.

    Raises
    ------
    ValueError
        Naming the field and its value, for non-positive sizes, negative padding, a kernel larger than the
        padded input, channels not divisible by ``groups`` or an unknown dtype, layout or direction.
    """

    n: int
    c: int
    k: int
    h: int
    w: int
    r: int
    s: int
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    dtype: str = "float32"
    layout: str = "nchw"
    direction: str = "fwd"

    def __post_init__(self) -> None:
        # Runs for every problem a dataset, a catalogue or a layer table holds (hundreds of thousands): plain ints,
        # the common case, skip the normalisation.
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            if type(value) is not int:
                # bool is an int subclass; numpy integers are accepted and normalised to int.
                if isinstance(value, bool) or not hasattr(value, "__index__"):
                    raise ValueError(f"ConvProblem.{name} must be an integer, got {value!r}")
                object.__setattr__(self, name, int(value.__index__()))
        for name in _POSITIVE_FIELDS:
            if getattr(self, name) <= 0:
                raise ValueError(f"ConvProblem.{name} must be positive, got {getattr(self, name)}")
        for name in ("pad_h", "pad_w"):
            if getattr(self, name) < 0:
                raise ValueError(f"ConvProblem.{name} must be >= 0, got {getattr(self, name)}")
        for name, allowed in (("dtype", DTYPES), ("layout", LAYOUTS), ("direction", DIRECTIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"ConvProblem.{name} must be one of {', '.join(allowed)}; got {value!r}")
        if self.c % self.groups:
            raise ValueError(f"ConvProblem.c={self.c} is not divisible by groups={self.groups}")
        if self.k % self.groups:
            raise ValueError(f"ConvProblem.k={self.k} is not divisible by groups={self.groups}")
        for axis, size, pad, kernel, dil in (
            ("r", self.h, self.pad_h, self.r, self.dilation_h),
            ("s", self.w, self.pad_w, self.s, self.dilation_w),
        ):
            extent = dil * (kernel - 1) + 1
            if extent > size + 2 * pad:
                raise ValueError(
                    f"ConvProblem.{axis}={kernel} (dilated extent {extent}) is larger than the padded input "
                    f"({size} + 2*{pad} = {size + 2 * pad})"
                )

    def __hash__(self) -> int:
        # Memoised: selectors key their caches by problem, and a repeated prediction must cost microseconds.
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash(tuple(getattr(self, f) for f in PROBLEM_FIELDS))
            object.__setattr__(self, "_hash", h)
            return h

    # ----------------------------------------------------------------------------------------------- derived
    @property
    def out_h(self) -> int:
        """Output height."""
        return (self.h + 2 * self.pad_h - self.dilation_h * (self.r - 1) - 1) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pad_w - self.dilation_w * (self.s - 1) - 1) // self.stride_w + 1

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        """Input activation shape, in NCHW order whatever the layout."""
        return (self.n, self.c, self.h, self.w)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        """Weight shape (K, C/groups, R, S), in KCRS order whatever the layout."""
        return (self.k, self.c // self.groups, self.r, self.s)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        """Output activation shape, in NCHW order whatever the layout."""
        return (self.n, self.k, self.out_h, self.out_w)

    @property
    def flops(self) -> int:
        """Multiply-adds x 2; the same for all three directions."""
        return 2 * self.n * self.k * self.out_h * self.out_w * (self.c // self.groups) * self.r * self.s

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def x_bytes(self) -> int:
        return math.prod(self.x_shape) * self.element_bytes

    @property
    def w_bytes(self) -> int:
        return math.prod(self.w_shape) * self.element_bytes

    @property
    def y_bytes(self) -> int:
        return math.prod(self.y_shape) * self.element_bytes

    @property
    def bytes_moved(self) -> int:
        """The fewest bytes any algorithm moves: both operands read once, the result written once."""
        return self.x_bytes + self.w_bytes + self.y_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of :attr:`bytes_moved`."""
        return self.flops / self.bytes_moved

    def gemm_mnk(self, direction: str | None = None) -> tuple[int, int, int]:
        """The (M, N, K) of the implicit GEMM of one direction (per group).

        ``fwd``: M = N*P*Q, N = K, K = C/g*R*S; ``bwd_data``: M = N*H*W, N = C/g, K = K/g*R*S;
        ``bwd_filter``: M = K/g, N = C/g*R*S, K = N*P*Q.
        """
        direction = direction or self.direction
        cg, kg = self.c // self.groups, self.k // self.groups
        npq = self.n * self.out_h * self.out_w
        if direction == "fwd":
            return (npq, kg, cg * self.r * self.s)
        if direction == "bwd_data":
            return (self.n * self.h * self.w, cg, kg * self.r * self.s)
        if direction == "bwd_filter":
            return (kg, cg * self.r * self.s, npq)
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}; got {direction!r}")

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c and self.k % self.c == 0

    @property
    def is_fully_connected(self) -> bool:
        """The kernel covers the whole unpadded input: the convolution is one matrix product."""
        return (
            self.groups == 1
            and self.r == self.h
            and self.s == self.w
            and self.pad_h == 0
            and self.pad_w == 0
            and self.dilation_h == 1
            and self.dilation_w == 1
        )

    @property
    def is_pointwise(self) -> bool:
        """A 1x1 kernel with stride 1 and no padding: a (batched) matrix product per image."""
        return (
            self.groups == 1
            and self.r == 1
            and self.s == 1
            and self.pad_h == 0
            and self.pad_w == 0
            and self.stride_h == 1
            and self.stride_w == 1
        )

    # ---------------------------------------------------------------------------------------- identities
    @property
    def shape_key(self) -> str:
        """Identity of the shape alone (no dtype, layout or direction)."""
        return (
            f"n{self.n}_c{self.c}_k{self.k}_h{self.h}_w{self.w}_r{self.r}_s{self.s}"
            f"_p{self.pad_h}x{self.pad_w}_u{self.stride_h}x{self.stride_w}"
            f"_d{self.dilation_h}x{self.dilation_w}_g{self.groups}"
        )

    @property
    def key(self) -> str:
        """Canonical identity of the whole problem, parseable by :meth:`from_key`."""
        return f"{self.shape_key}_{self.dtype}_{self.layout}_{self.direction}"

    @property
    def case_key(self) -> str:
        """Identity of the (shape, dtype, layout) case whose three directions the sweeper measures together."""
        return f"{self.shape_key}_{self.dtype}_{self.layout}"

    @classmethod
    def from_key(cls, key: str) -> ConvProblem:
        """Parse a :attr:`key` back into a problem (the same key gives the same, immutable, object: datasets and
        catalogues name each problem in many rows, and loading a model parses every key it holds)."""
        return _parsed_key(cls, key)

    def replace(self, **changes: Any) -> ConvProblem:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def directions(self) -> list[ConvProblem]:
        """This problem in each of the three directions."""
        return [self.replace(direction=d) for d in DIRECTIONS]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> ConvProblem:
        """Build from a mapping holding (at least) every field; extra keys are ignored."""
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in row]
        if missing:
            raise ValueError(f"problem fields missing: {', '.join(missing)}")
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})


@functools.lru_cache(maxsize=1 << 17)
def _parsed_key(cls: type[ConvProblem], key: str) -> ConvProblem:
    match = _KEY_RE.match(key)
    if match is None:
        raise ValueError(f"not a problem key: {key!r}")
    fields: dict[str, Any] = match.groupdict()
    return cls(**{f: (int(v) if f in SHAPE_FIELDS else v) for f, v in fields.items()})


#: The field names of :class:`ConvProblem`, in order (the problem columns of a records file).
PROBLEM_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ConvProblem))


def same_padding(kernel: int, dilation: int = 1) -> int:
    """Symmetric padding that keeps the size at stride 1 for an odd dilated kernel ('same')."""
    return dilation * (kernel - 1) // 2
