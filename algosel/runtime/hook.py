"""The runtime hook: PyTorch's ``conv2d`` runs the candidate the selector predicts, forward and backward.

Turn it on for a block (``with algosel.hook.enabled(): ...``), for the process (:func:`enable` /
:func:`disable`), or for one model's ``Conv2d`` modules (:func:`patch_model`). User code does not change:
``torch.nn.functional.conv2d`` (which every ``nn.Conv2d`` calls) is routed through :func:`conv2d`.

For each convolution the forward pass, the input gradient and the weight gradient are three problems, each with
its own predicted candidate (a custom autograd Function; where all three are GEMM lowering and the forward is one
matrix product, plain differentiable ``addmm`` on views, as ``nn.Linear``, whose autograd backward is the lowering
of both gradients). Per problem, once:

- a cuDNN engine config: the graph is planned and only the chosen plan is built, then cached; it runs on the
  current stream with workspace from PyTorch's caching allocator;
- GEMM lowering: ``torch.matmul`` on views of the operands;
- pass-through to PyTorch's own convolution where that is the prediction, where the problem is outside what the
  selector covers (dtype, device, padding it cannot express), or where the recorded gain is smaller than the
  hook's own host overhead per call.

Every pass-through and every fallback (a chosen candidate that failed) is counted with its reason: :func:`stats`.
Inputs PyTorch would reject (mismatched devices, dtypes, shapes) go to PyTorch unchanged, so users get PyTorch's
own error.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from algosel.learn.selector import candidate_row, offline_rows
from algosel.operands import OUTPUT_ROLE, Operands, conv_args, empty_like_layout, pytorch_direction
from algosel.problem import ConvProblem, dtype_of
from algosel.spaces import CandidateError, PreparedCandidate, get_space, split_candidate_id
from algosel.spaces.gemm import gemm_conv, gemm_kind

log = logging.getLogger(__name__)

_original_conv2d: Callable[..., torch.Tensor] = F.conv2d
_state = threading.local()
_counts: Counter[str] = Counter()
#: Host time the hook adds per call over PyTorch's own conv call, in microseconds: below this recorded gain a
#: candidate is not worth leaving PyTorch's path for. benchmarks/hook_bench.py on the H200 (2026-11-30): a tiny
#: float16 conv cost 90 us per call through the hook's cuDNN path against 33 us through F.conv2d (+57 us), and
#: 69 us through its GEMM path against 18 us (+51 us).
DEFAULT_MIN_GAIN_US = 60.0


def stats() -> dict[str, int]:
    """Calls per path: ``gemm``, ``cudnn``, ``pytorch:<reason>`` (pass-through), ``fallback:<error>``.

    A convolution whose every needed direction passes through runs natively in PyTorch (no autograd Function);
    its directions are counted at the forward call: one, or three where gradients are needed.
    """
    total = Counter(_counts)
    for route in _counted_routes:
        for reason in route.reasons:
            total[reason] += route.calls
    return dict(+total)


def reset_stats() -> None:
    _counts.clear()
    for route in _counted_routes:
        route.calls = 0


@dataclass
class _Route:
    """What one call signature (shapes, strides, dtypes, geometry, grad, autocast and TF32 state) does.

    ``kind``:

    - ``"native"``: PyTorch's own conv2d (every direction the call needs passes through);
    - ``"gemm"``: every direction is GEMM lowering and the lowering is one matrix product (fully connected mode, or
      a channels-last pointwise conv): the forward runs as differentiable ``addmm``/``matmul`` on views, whose
      autograd backward *is* the lowering of both gradients, as ``nn.Linear`` runs, with no Python in backward;
    - ``"function"``: the autograd Function, each direction through its own plan.

    Native and GEMM routes count their directions under ``reasons``, per call here and expanded by :func:`stats`
    (one integer increment keeps the per-call cost down).
    """

    kind: str
    problem: ConvProblem | None = None
    reasons: tuple[str, ...] = ()
    calls: int = 0


#: Routes counted by call (native and GEMM routes of every executor), for :func:`stats`.
_counted_routes: list[_Route] = []


# ------------------------------------------------------------------------------------------------ executors
@dataclass
class _Plan:
    """What the hook runs for one problem: a prepared candidate, or ``None`` with the pass-through reason."""

    runner: PreparedCandidate | None
    path: str  # "gemm", "cudnn" or "pytorch:<reason>"


class Executor:
    """Chooses, prepares and caches the candidate of every problem it meets.

    Parameters
    ----------
    selector : Selector, optional
        Default: the shipped model for this GPU (:func:`algosel.learn.models.load_default`).
    live : bool, optional
        Rank cuDNN's live candidate list (default: when a GPU and the frontend are present).
    min_gain_us : float
        Pass through where the records say the chosen candidate saves less than this per call.
    max_workspace_bytes : int, optional
    """

    def __init__(self, selector=None, live: bool | None = None, min_gain_us: float = DEFAULT_MIN_GAIN_US,
                 max_workspace_bytes: int | None = None):  # fmt: skip
        if selector is None:
            from algosel.learn.models import load_default  # noqa: PLC0415

            selector = load_default()
        self.selector = selector
        self.min_gain_us = min_gain_us
        self.max_workspace_bytes = max_workspace_bytes
        self._live = live
        self._plans: dict[ConvProblem, _Plan] = {}
        self._routes: dict[tuple, _Route] = {}
        self._directions: dict[ConvProblem, dict[str, ConvProblem]] = {}
        self._dtypes = set(selector.manifest.get("dtypes", ("float32", "float16")))

    def _live_ok(self) -> bool:
        if self._live is None:
            from algosel.runtime.api import live_available  # noqa: PLC0415

            self._live = live_available(self.selector)
        return self._live

    def plan(self, problem: ConvProblem, device: torch.device) -> _Plan:
        cached = self._plans.get(problem)
        if cached is None:
            cached = self._plans[problem] = self._make_plan(problem, device)
        return cached

    def _make_plan(self, problem: ConvProblem, device: torch.device) -> _Plan:
        if problem.dtype not in self._dtypes:
            return _Plan(None, "pytorch:dtype not covered")
        live = device.type == "cuda" and self._live_ok()
        recorded = self.selector.is_recorded(problem)
        # A recorded problem is ranked from its records (the same list cuDNN gives live, with no heuristic query);
        # cuDNN is asked only when a config must be built, or for a problem never measured.
        if recorded or not live:
            choice = self.selector.choose(problem, self.max_workspace_bytes, top_k=1, live=False)[0]
            reason = self._pass_through_reason(problem, choice)
            if reason or choice.space == "gemm":
                return _Plan(None, reason) if reason else _offline_plan(problem, choice.candidate_id)
            if not live:
                return _Plan(None, "pytorch:cudnn config needs the live GPU list")
        space = get_space("cudnn")
        try:
            try:
                cands = space.enumerate(problem)
            except CandidateError:
                cands = []
            if not recorded:
                rows = [candidate_row(c) for c in cands] + offline_rows(problem, self.selector.spaces)
                choice = self.selector.rank_rows(problem, rows, self.max_workspace_bytes)[0]
                reason = self._pass_through_reason(problem, choice)
                if reason or choice.space == "gemm":
                    return _Plan(None, reason) if reason else _offline_plan(problem, choice.candidate_id)
            cand = next((c for c in cands if c.candidate_id == choice.candidate_id), None)
            if cand is None:
                return _Plan(None, "pytorch:choice not in cuDNN's list")
            try:
                return _Plan(space.prepare(problem, cand), "cudnn")
            except CandidateError as exc:
                _counts[f"fallback:build {exc.status}"] += 1
                return _Plan(None, "pytorch:chosen config did not build")
        finally:
            space.release(problem)

    def _pass_through_reason(self, problem: ConvProblem, choice) -> str:
        if choice.space == "pytorch":
            return "pytorch:predicted best"
        gain_us = self.selector.recorded_gain_us(problem, choice.candidate_id)
        if gain_us is not None and gain_us < self.min_gain_us:
            return "pytorch:gain below hook overhead"
        return ""

    def directions_of(self, problem: ConvProblem) -> dict[str, ConvProblem]:
        """The problem in each direction, built once (validating a problem costs microseconds per call)."""
        dirs = self._directions.get(problem)
        if dirs is None:
            dirs = self._directions[problem] = {p.direction: p for p in problem.directions()}
        return dirs

    def route(self, key: tuple, problem: ConvProblem, device: torch.device, grads: tuple[bool, bool]) -> _Route:
        """How calls with signature ``key`` run: natively in PyTorch when every direction the call needs passes
        through (no autograd Function or plan lookup on later calls), else through the Function. Memoised by
        ``key``, which the caller builds from the call's arguments without validating a problem."""
        route = self._routes.get(key)
        if route is None:
            # The forward, and each gradient the call's autograd will compute: (input, weight) requires_grad.
            dirs = self.directions_of(problem)
            directions = [problem] + [dirs[d] for d, g in zip(("bwd_data", "bwd_filter"), grads) if g]
            plans = [self.plan(p, device) for p in directions]
            if all(p.runner is None for p in plans):
                route = _Route("native", None, tuple(p.path for p in plans))
                _counted_routes.append(route)
            elif all(p.path == "gemm" for p in plans) and _one_matrix_product(problem):
                route = _Route("gemm", problem, tuple(p.path for p in plans))
                _counted_routes.append(route)
            else:
                route = _Route("function", problem)
            self._routes[key] = route
        return route


def _one_matrix_product(problem: ConvProblem) -> bool:
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


def _offline_plan(problem: ConvProblem, candidate_id: str) -> _Plan:
    """The plan of a candidate whose space needs no live list (GEMM lowering): its space's runtime runner."""
    space_name, name = split_candidate_id(candidate_id)
    space = get_space(space_name)
    return _Plan(space.runner(problem, space.candidate(name, problem.direction)), space_name)


# ----------------------------------------------------------------------------------------- the Function
def _torch_dtype_name(dtype: torch.dtype) -> str | None:
    return dtype_of(str(dtype).removeprefix("torch."), torch.backends.cudnn.allow_tf32)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def _problem(
    x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, groups, compute_dtype: torch.dtype
) -> tuple[ConvProblem | None, str]:
    """The forward problem of a conv2d call computed in ``compute_dtype``, or None and why the hook does not
    handle it."""
    dtype = _torch_dtype_name(compute_dtype)
    if dtype is None:
        return None, "pytorch:dtype not covered"
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    r, s = w.shape[2], w.shape[3]
    if isinstance(padding, str):
        if padding == "valid":
            ph = pw = 0
        elif padding == "same":
            if (dh * (r - 1)) % 2 or (dw * (s - 1)) % 2 or (sh, sw) != (1, 1):
                return None, "pytorch:asymmetric same padding"
            ph, pw = dh * (r - 1) // 2, dw * (s - 1) // 2
        else:
            return None, "pytorch:unknown padding"
    else:
        ph, pw = _pair(padding)
    nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    try:
        p = ConvProblem(n=x.shape[0], c=x.shape[1], k=w.shape[0], h=x.shape[2], w=x.shape[3], r=r, s=s,
                        pad_h=ph, pad_w=pw, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, groups=groups,
                        dtype=dtype, layout="nhwc" if nhwc else "nchw")  # fmt: skip
    except ValueError as exc:
        return None, f"pytorch:invalid problem ({exc})"
    return p, ""


def _run(ex: Executor, problem: ConvProblem, ops: Operands, fallback: Callable[[], torch.Tensor],
         bias: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Run ``problem``'s plan on ``ops`` (whose output slot is allocated here, only for a cuDNN plan, which writes
    into it); ``bias`` is added (fused into the GEMM where the lowering allows). ``fallback`` (PyTorch, bias
    included) runs on pass-through and on failure."""
    plan = ex.plan(problem, ops.x.device if ops.x is not None else ops.y.device)
    if plan.runner is None:
        _counts[plan.path] += 1
        return fallback()
    try:
        if plan.path == "gemm":  # the GEMM runner adds the bias inside its product where the lowering allows
            out = plan.runner.run(ops, bias)
        else:
            role = OUTPUT_ROLE[problem.direction]
            like = ops.y if ops.y is not None else ops.x
            setattr(ops, role, empty_like_layout(getattr(problem, f"{role}_shape"), problem, like.device))
            out = plan.runner.run(ops)
            if bias is not None:
                out = out + bias.view(1, -1, 1, 1)
        _counts[plan.path] += 1
        return out
    except Exception as exc:  # noqa: BLE001 - any failure of a chosen candidate falls back, counted
        _counts[f"fallback:{type(exc).__name__}"] += 1
        log.warning("algosel: %s failed on %s (%s); falling back to PyTorch", plan.path, problem.key, exc)
        ex._plans[problem] = _Plan(None, "pytorch:chosen candidate failed")
        return fallback()


class _Conv2dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, problem: ConvProblem, ex: Executor):
        mf = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
        x = x.contiguous(memory_format=mf)
        weight = weight.contiguous(memory_format=mf)
        ctx.save_for_backward(x, weight)
        ctx.problem, ctx.ex, ctx.has_bias = problem, ex, bias is not None
        return _run(
            ex,
            problem,
            Operands(x, weight, None),
            lambda: _original_conv2d(x, weight, bias, **conv_args(problem)),
            bias,
        )

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        problem, ex = ctx.problem, ctx.ex
        mf = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
        grad_y = grad_y.contiguous(memory_format=mf)
        gx = gw = gb = None
        need_x, need_w, need_b = ctx.needs_input_grad[:3]

        dirs = ex.directions_of(problem)
        if need_x:
            p = dirs["bwd_data"]
            gx = _run(ex, p, Operands(None, weight, grad_y), lambda: pytorch_direction(p, x, weight, grad_y))
        if need_w:
            p = dirs["bwd_filter"]
            gw = _run(ex, p, Operands(x, None, grad_y), lambda: pytorch_direction(p, x, weight, grad_y))
        if need_b and ctx.has_bias:
            gb = grad_y.sum(dim=(0, 2, 3))
        return gx, gw, gb, None, None


# The TF32 switches are part of every call's key. Their public properties cost 0.5 and 1 us a read (Python
# descriptors over these C getters), a fifth of the hook's whole per-call cost: read the getters where torch has them.
_cudnn_tf32: Callable[[], bool] = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32
)
_matmul_tf32: Callable[[], bool] = getattr(torch._C, "_get_cublas_allow_tf32", None) or (
    lambda: torch.backends.cuda.matmul.allow_tf32
)


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002 - F.conv2d's names
    """Drop-in for ``torch.nn.functional.conv2d`` that runs the selector's choices (see the module docstring)."""
    ex: Executor | None = getattr(_state, "executor", None) or _global["executor"]
    if ex is None or not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return _original_conv2d(input, weight, bias, stride, padding, dilation, groups)
    x, w, b = input, weight, bias
    device_type = "cuda" if x.is_cuda else x.device.type  # is_cuda: a fifth of the cost of building a device
    # Under autocast, conv2d runs in autocast's dtype (float32 inputs are cast below F.conv2d).
    cast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    grads = (x.requires_grad, w.requires_grad) if torch.is_grad_enabled() else (False, False)
    # Everything the route depends on, read without validating anything: the steady-state cost of a call is
    # building this key and one dict lookup (the hook's host overhead is what decides whether it pays).
    key = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device,
           None if b is None else (b.shape, b.dtype, b.device), stride, padding, dilation, groups, grads, cast,
           _cudnn_tf32(), _matmul_tf32())  # fmt: skip
    try:
        route = ex._routes.get(key)
    except TypeError:  # list arguments (F.conv2d accepts them)
        stride, padding, dilation = _hashable(stride), _hashable(padding), _hashable(dilation)
        key = key[:9] + (stride, padding, dilation) + key[12:]
        route = ex._routes.get(key)
    if route is None:
        route = _first_call(ex, key, x, w, b, stride, padding, dilation, groups, cast, grads)
        if route is None:  # counted by _first_call
            return _original_conv2d(x, w, b, stride, padding, dilation, groups)
    if route.kind == "native":
        route.calls += 1
        # PyTorch's native path gets the uncast tensors, so that autocast casts them itself and reuses its cache
        # of cast weights.
        return _original_conv2d(x, w, b, stride, padding, dilation, groups)
    if cast is not None:
        x, w = x.to(cast), w.to(cast)
        b = b.to(cast) if b is not None else None
    with torch.autocast(device_type, enabled=False):
        if route.kind == "gemm":
            route.calls += 1
            return gemm_conv(route.problem, x, w, b)
        return _Conv2dFunction.apply(x, w, b, route.problem, ex)


def _first_call(ex: Executor, key, x, w, b, stride, padding, dilation, groups, cast, grads) -> _Route | None:
    """Validate a new call signature and plan it; ``None`` (counted) when PyTorch should take it unmemoised."""
    # Anything PyTorch would reject goes to PyTorch, so the user gets PyTorch's own error.
    if (x.dim() != 4 or w.dim() != 4 or x.device != w.device or (b is not None and b.device != x.device)
            or x.shape[1] != w.shape[1] * groups or not x.is_floating_point()):  # fmt: skip
        _counts["pytorch:not a plain 4-D conv"] += 1
        return None

    def compute_dtype(t: torch.Tensor) -> torch.dtype:
        return cast if cast is not None and t.dtype == torch.float32 else t.dtype

    dtype = compute_dtype(x)
    if dtype != compute_dtype(w) or (b is not None and compute_dtype(b) != dtype):
        _counts["pytorch:mixed dtypes"] += 1
        return None
    problem, reason = _problem(x, w, stride, padding, dilation, groups, dtype)
    if problem is None:
        route = _Route("native", None, (reason,))
        _counted_routes.append(route)
        ex._routes[key] = route
        return route
    return ex.route(key, problem, x.device, grads)


# ------------------------------------------------------------------------------------------------ switches
_global: dict[str, Executor | None] = {"executor": None}


def enable(executor: Executor | None = None, **kwargs: Any) -> Executor:
    """Route every ``F.conv2d`` of the process through the selector (``**kwargs`` go to :class:`Executor`)."""
    ex = executor or Executor(**kwargs)
    _global["executor"] = ex
    F.conv2d = conv2d
    return ex


def disable() -> None:
    """Restore PyTorch's own ``F.conv2d``."""
    _global["executor"] = None
    if getattr(_state, "executor", None) is None:
        F.conv2d = _original_conv2d


@contextlib.contextmanager
def enabled(executor: Executor | None = None, **kwargs: Any) -> Iterator[Executor]:
    """Route ``F.conv2d`` through the selector inside the block (this thread), restoring the previous state after."""
    ex = executor or Executor(**kwargs)
    previous, patched = getattr(_state, "executor", None), F.conv2d
    _state.executor = ex
    F.conv2d = conv2d
    try:
        yield ex
    finally:
        _state.executor = previous
        F.conv2d = patched


def patch_model(model: torch.nn.Module, executor: Executor | None = None, **kwargs: Any) -> Executor:
    """Make every ``nn.Conv2d`` of ``model`` run the selector's choices, whatever the global switch says."""
    ex = executor or Executor(**kwargs)
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.padding_mode == "zeros":
            module._conv_forward = _patched_forward(module, ex)  # type: ignore[method-assign]
    return ex


def _patched_forward(module: torch.nn.Conv2d, ex: Executor):
    def _conv_forward(input, weight, bias):  # noqa: A002
        previous = getattr(_state, "executor", None)
        _state.executor = ex
        try:
            return conv2d(input, weight, bias, module.stride, module.padding, module.dilation, module.groups)
        finally:
            _state.executor = previous

    return _conv_forward
