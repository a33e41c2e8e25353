"""Routes: what every call of one call signature runs, memoised so that a call costs one key and one lookup.

A signature's route bundles the plans of its directions (forward, and each gradient its autograd computes):

- ``native``: PyTorch's own ``conv2d`` (every direction passes through);
- ``gemm``: every direction is GEMM lowering and the forward is one matrix product (``addmm`` on views, as
  ``nn.Linear`` runs; autograd's backward is the lowering of both gradients);
- ``compiled``: the C++ autograd Function of the compiled path, a cuDNN plan or PyTorch's kernel per direction;
- ``function``: the Python autograd Function (:mod:`algosel.runtime.function`), each direction through its plan.

:class:`RouteBook` keeps an executor's routes by signature; :class:`Dispatch` lets the compiled path's dispatch
table run native, compiled and GEMM routes without entering Python.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from algosel.operands import conv_args
from algosel.problem import ConvProblem
from algosel.spaces.gemm import gemm_kind


@dataclass
class Route:
    """What one call signature does (see the module docstring for the kinds)."""

    kind: str
    problem: ConvProblem | None = None
    reasons: tuple[str, ...] = ()  # per direction: "gemm", "cudnn" or "pytorch:<reason>"
    calls: int = 0
    native_route: int = -1  # the compiled path's route id
    run_native: Callable[..., torch.Tensor] | None = None  # the compiled path's entry point
    unseen: Any = None  # the recorder of problems the model's records lack, where this route's problem is one
    slots: list = field(default_factory=list)  # (dispatch table, slot) pairs that run this route's calls in C++
    probe: Any = None  # on probation: its Looks so far (None: decided)
    key: tuple | None = None  # looking before timing: its call signature
    looked: Any = None  # probation's Looks once they decided (a step trial that cannot tell reads them)

    def pass_through(self, reason: str) -> None:
        """PyTorch's own convolution from now on, each direction for ``reason``. Its plans stay loaded: the compiled
        path never frees one (a backward queued by an earlier call may still run it)."""
        self.kind = "native"
        self.reasons = (f"pytorch:{reason}",) * len(self.reasons)


def one_matrix_product(problem: ConvProblem) -> bool:
    """Whether the forward lowering is a single GEMM on views (so autograd's backward is the lowering of both
    gradients), in the math mode the records measured: TF32 for ``float32``, which in autograd's backward follows
    ``torch.backends.cuda.matmul.allow_tf32``. NCHW pointwise is a batched product whose autograd weight gradient
    is not the measured lowering."""
    kind = gemm_kind(problem)
    if kind is None or (kind == "pointwise" and problem.layout != "nhwc"):
        return False
    if problem.dtype in ("float16", "bfloat16"):
        return True
    return torch.backends.cuda.matmul.allow_tf32 == (problem.dtype == "float32")


def compiled_route(ext: Any, problem: ConvProblem, native_ids: list[int], grads: tuple[bool, bool],
                   reasons: tuple[str, ...]) -> Route:  # fmt: skip
    """A ``compiled`` route registered with the compiled path: its directions' loaded plan ids (-1: PyTorch's)."""
    ids = iter(native_ids)
    fwd = next(ids)
    dgrad = next(ids) if grads[0] else -1
    wgrad = next(ids) if grads[1] else -1
    args = conv_args(problem)
    rid = ext.register_route(fwd, dgrad, wgrad, list(args["stride"]), list(args["padding"]),
                             list(args["dilation"]), args["groups"], problem.layout == "nhwc")  # fmt: skip
    return Route("compiled", problem, reasons, native_route=int(rid), run_native=ext.run_route)


class RouteBook:
    """An executor's routes by call signature, and the signatures that looked at the device before timing."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, Route] = {}
        #: Signatures whose looks before timing found the device busy: timed when met next ...
        self.looked: set[tuple] = set()
        #: ... and those looks, for the routes their timing makes (``Route.looked``).
        self.looks_of: dict[tuple, Any] = {}
        self._all_native: bool | None = None  # memo of all_native(), None once a route changed

    def __len__(self) -> int:
        return len(self.by_key)

    def add(self, key: tuple, route: Route) -> None:
        self.by_key[key] = route
        self._all_native = None

    def forget(self, key: tuple, route: Route) -> None:
        """Drop ``route`` so that the next call of ``key`` plans it again."""
        if self.by_key.get(key) is route:
            del self.by_key[key]
        self._all_native = None

    def changed(self) -> None:
        """A route was decided again (probation, a trial's verdict)."""
        self._all_native = None

    def undecided(self) -> int:
        """Signatures still on probation or looking at the device, and those that looked and are timed next."""
        return sum(r.probe is not None for r in self.by_key.values()) + len(self.looked - set(self.by_key))

    def switches(self) -> bool:
        """Whether any route leaves PyTorch's own convolution."""
        return any(r.kind != "native" for r in self.by_key.values())

    def all_native(self) -> bool:
        """Whether there are routes and every one is PyTorch's own and decided."""
        if self._all_native is None:
            self._all_native = bool(self.by_key) and all(r.kind == "native" and r.probe is None
                                                         for r in self.by_key.values())  # fmt: skip
        return self._all_native

    def reasons(self) -> dict[str, int]:
        """Directions of every signature by what they run (``cudnn``, ``gemm`` or ``pytorch:<reason>``)."""
        return dict(Counter(reason for route in self.by_key.values() for reason in route.reasons))


class Dispatch:
    """The compiled path's dispatch table of one executor (``RouteTable``): signatures whose route is PyTorch's own
    kernel, a compiled route or GEMM lowering, keyed and run in C++; :attr:`fast_run` is its entry point."""

    def __init__(self, make_table: Callable[[], Any], on_new_table: Callable[[Any], None]):
        self._make_table = make_table  # a new RouteTable, or None (no compiled path, or not wanted)
        self._on_new_table = on_new_table
        self.table: Any = None
        self.fast_run: Callable[..., torch.Tensor | None] | None = None
        self._owners: dict[int, Route] = {}

    def current(self) -> Any:
        """The table, made on first use; None where there is none."""
        if self.table is None:
            table = self._make_table()
            if table is not None:
                self.table, self.fast_run = table, table.run
                self._on_new_table(table)
        return self.table

    def hold(self, route: Route, x, w, b, stride, padding, dilation, groups) -> None:
        """Let the table run calls of this signature (native, compiled and GEMM routes, decided and not recording)."""
        if route.kind not in ("native", "compiled", "gemm") or route.unseen is not None or route.probe is not None:
            return
        table = self.current()
        if table is None:
            return
        if route.kind == "gemm":  # the table computes what gemm_conv does, in C++
            kind, rid = (2 if gemm_kind(route.problem) == "fc" else 3), -1
        else:
            kind, rid = (0, -1) if route.kind == "native" else (1, route.native_route)
        slot = table.add(x, w, b, stride, padding, dilation, groups, kind, rid)
        if slot < 0:  # a call the table cannot key ("same" padding...): Python's path keeps it
            return
        owner = self._owners.get(slot)
        if owner is route:
            return
        if owner is not None:  # two spellings of one signature (stride=1 and (1, 1)): counted once
            owner.slots.remove((table, slot))
        self._owners[slot] = route
        route.slots.append((table, slot))

    def renew(self) -> bool:
        """Start a new table, so that routes made PyTorch's after they were held run as such (the old table keeps
        its slots and their call counts); True where there was one."""
        if self.table is None:
            return False
        self.table, self.fast_run, self._owners = None, None, {}
        return True
