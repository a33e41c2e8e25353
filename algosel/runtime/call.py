"""One ``conv2d`` call through an executor: the hot path, and the first call of a new signature.

Everything a call's route depends on (shapes, strides, dtypes, devices, geometry, which inputs need gradients,
autocast, the TF32 and determinism switches) is its key, read without validating anything: a steady-state call costs
building the key and one dict lookup (or nothing in Python, where the compiled dispatch table holds it). The first
call of a key validates it, builds its :class:`~algosel.problem.ConvProblem` and asks the executor for a route;
anything PyTorch would reject goes to PyTorch, so the user gets PyTorch's own error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from algosel.problem import ConvProblem, dtype_of
from algosel.runtime.fallbacks import HOOK_ERROR, warn_once
from algosel.runtime.function import Conv2dFunction
from algosel.runtime.routes import Route
from algosel.runtime.state import STATE, original_conv2d, planning
from algosel.spaces.gemm import gemm_conv

if TYPE_CHECKING:
    from algosel.runtime.executor import Executor

# The TF32 and determinism switches are part of every call's key. Their public properties cost 0.5 and 1 us a read
# (Python descriptors over these C getters), a fifth of the routing's per-call cost: read the getters where torch
# has them.
_cudnn_tf32: Callable[[], bool] = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32
)
_matmul_tf32: Callable[[], bool] = getattr(torch._C, "_get_cublas_allow_tf32", None) or (
    lambda: torch.backends.cuda.matmul.allow_tf32
)
_cudnn_deterministic: Callable[[], bool] = getattr(torch._C, "_get_cudnn_deterministic", None) or (
    lambda: torch.backends.cudnn.deterministic
)
_deterministic_algorithms: Callable[[], bool] = getattr(torch._C, "_get_deterministic_algorithms", None) or (
    torch.are_deterministic_algorithms_enabled
)


#: The path of calls on a device the hook does not route (a CPU, ``meta``, or CUDA without cuDNN).
NOT_ROUTED = "pytorch:not a cuDNN device"


def deterministic_asked() -> bool:
    """Whether the process asked PyTorch for deterministic convolutions (``torch.backends.cudnn.deterministic`` or
    ``torch.use_deterministic_algorithms``): then every convolution is PyTorch's own, which honours it."""
    return _cudnn_deterministic() or _deterministic_algorithms()


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def run_conv(ex: Executor, x, w, b, stride, padding, dilation, groups) -> torch.Tensor:
    """One ``conv2d`` call through ``ex`` (see the module docstring)."""
    if x.is_cuda:  # is_cuda: a fifth of the cost of building a device
        device_type = "cuda"
    else:
        device_type = x.device.type
        if not ex.device_probe.routes(x.device):  # not cuDNN's (CPU, meta): PyTorch's own call, untouched
            ex.call_stats.count(NOT_ROUTED)
            return original_conv2d(x, w, b, stride, padding, dilation, groups)
    # Under autocast, conv2d runs in autocast's dtype (float32 inputs are cast below F.conv2d).
    cast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    grads = (x.requires_grad, w.requires_grad) if torch.is_grad_enabled() else (False, False)
    key = (x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device,
           None if b is None else (b.shape, b.dtype, b.device), stride, padding, dilation, groups, grads, cast,
           _cudnn_tf32(), _matmul_tf32(), deterministic_asked())  # fmt: skip
    routes = ex.routes.by_key
    try:
        route = routes.get(key)
    except TypeError:  # list arguments (F.conv2d accepts them)
        stride, padding, dilation = _hashable(stride), _hashable(padding), _hashable(dilation)
        key = key[:9] + (stride, padding, dilation) + key[12:]
        route = routes.get(key)
    if route is None:
        route = _first_call(ex, key, x, w, b, stride, padding, dilation, groups, cast, grads)
        if route is None:  # counted by _first_call
            return original_conv2d(x, w, b, stride, padding, dilation, groups)
        if routes.get(key) is route:  # memoised (not a decision deferred by a capture)
            ex.dispatch.hold(route, x, w, b, stride, padding, dilation, groups)
    if route.unseen is not None:
        route.unseen.add(route.problem, 1)
    if route.probe is not None:
        probe = route.probe
        if not ex.probation.call(route, x):
            out = original_conv2d(x, w, b, stride, padding, dilation, groups)
            if out.requires_grad:  # and look again when its gradient comes back
                out.register_hook(ex.probation.look_back(probe))
            return out
        ex.dispatch.hold(route, x, w, b, stride, padding, dilation, groups)
    kind = route.kind
    if kind == "native":
        route.calls += 1
        # PyTorch's native path gets the uncast tensors, so that autocast casts them itself and reuses its cache
        # of cast weights.
        return original_conv2d(x, w, b, stride, padding, dilation, groups)
    if cast is not None:
        x, w = x.to(cast), w.to(cast)
        b = b.to(cast) if b is not None else None
    with torch.autocast(device_type, enabled=False):
        if kind == "compiled":
            route.calls += 1
            return route.run_native(route.native_route, x, w, b)
        if kind == "gemm":
            route.calls += 1
            return gemm_conv(route.problem, x, w, b)
        return Conv2dFunction.apply(x, w, b, route.problem, ex)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def call_problem(
    x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, groups, compute_dtype: torch.dtype
) -> tuple[ConvProblem | None, str]:
    """The forward problem of a conv2d call computed in ``compute_dtype``, or None and why the hook does not
    handle it."""
    if deterministic_asked():
        return None, "pytorch:deterministic algorithms asked for"
    dtype = dtype_of(str(compute_dtype).removeprefix("torch."), torch.backends.cudnn.allow_tf32)
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


def _first_call(ex: Executor, key, x, w, b, stride, padding, dilation, groups, cast, grads) -> Route | None:
    """Validate a new call signature and route it; ``None`` (counted) when PyTorch should take it unmemoised."""
    if not ex.device_probe.routes(x.device):  # CUDA without cuDNN: PyTorch's own, memoised as such
        route = Route("native", None, (NOT_ROUTED,))
        ex.call_stats.add_route(route)
        ex.routes.add(key, route)
        return route
    if (x.dim() != 4 or w.dim() != 4 or x.device != w.device or (b is not None and b.device != x.device)
            or x.shape[1] != w.shape[1] * groups or not x.is_floating_point()):  # fmt: skip
        ex.call_stats.count("pytorch:not a plain 4-D conv")
        return None

    def compute_dtype(t: torch.Tensor) -> torch.dtype:
        return cast if cast is not None and t.dtype == torch.float32 else t.dtype

    dtype = compute_dtype(x)
    if dtype != compute_dtype(w) or (b is not None and compute_dtype(b) != dtype):
        ex.call_stats.count("pytorch:mixed dtypes")
        return None
    problem, reason = call_problem(x, w, stride, padding, dilation, groups, dtype)
    if problem is None:
        route = Route("native", None, (reason,))
        ex.call_stats.add_route(route)
        ex.routes.add(key, route)
        return route
    # Deciding may measure candidates: outside the caller's autocast and autograd, and with the hook suspended in
    # this thread (the measurements' own convolutions are PyTorch's).
    with planning(), torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        try:
            return ex.route(key, problem, x.device, grads)
        except Exception as exc:  # noqa: BLE001 - the hook is never the reason a step fails: PyTorch's own, once said
            warn_once(f"{HOOK_ERROR} ({problem.key}: {type(exc).__name__}: {exc}); PyTorch's own convolution runs")
            route = Route("native", problem, (f"pytorch:{HOOK_ERROR}",))
            ex.call_stats.add_route(route)
            ex.routes.add(key, route)
            return route
        finally:
            STATE.planned_at_s = ex.clock()
