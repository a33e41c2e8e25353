"""Where the hook's pass-through time goes inside a real training step, on CPU (no GPU needed).

    python benchmarks/passthrough_breakdown_cpu.py

A 52-conv residual network (tiny spatial sizes, so that per-call overhead shows) trains with the hook switched
on and every convolution passing through; each part of the per-call routing is timed with perf_counter_ns inside
the step. Compare with benchmarks/hook_wrapper_cost.py, which times the same routing in a tight loop.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from standins import Predicting
from torch import nn

from algosel.learn.models import load_default
from algosel.runtime import executor as E
from algosel.runtime import hook

torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = nn.Conv2d(c, c, 1, bias=False)
        self.b = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.c = nn.Conv2d(c, c, 1, bias=False)
        self.n = nn.BatchNorm2d(c)

    def forward(self, x):
        return x + self.n(self.c(F.relu(self.b(F.relu(self.a(x))))))


def main() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), *[Block(8) for _ in range(17)])
    x = torch.randn(2, 3, 8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    ex = hook.Executor(selector=Predicting(load_default()), cache=False, step_aside=False)  # the routing is timed
    original = F.conv2d

    def wrapper(*a, **k):
        return original(*a, **k)

    def variant(name):
        if name == "python-wrapper":
            F.conv2d = wrapper
        if name == "hook":
            hook.enable(ex)
        try:
            t0 = time.perf_counter()
            step()
            return 1e3 * (time.perf_counter() - t0)
        finally:
            hook.disable()
            F.conv2d = original

    names = ["default", "python-wrapper", "hook"]
    for n in names * 5:
        variant(n)
    times = {n: [] for n in names}
    for r in range(200):
        for n in names if r % 2 == 0 else names[::-1]:
            times[n].append(variant(n))
    for n in names:
        ratio = statistics.median(a / b for a, b in zip(times[n], times["default"]))
        print(f"{n:15s} step {statistics.median(times[n]):7.3f} ms  x default {ratio:.3f}")
    breakdown(ex, step)


def breakdown(ex, step) -> None:
    pc = time.perf_counter_ns
    parts = [0] * 6
    calls = [0]

    def timed(ex, x, w, b, stride, padding, dilation, groups):
        t0 = pc()
        device_type = "cuda" if x.is_cuda else x.device.type
        t1 = pc()
        cast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
        t2 = pc()
        grads = (x.requires_grad, w.requires_grad) if torch.is_grad_enabled() else (False, False)
        t3 = pc()
        key = (
            x.shape,
            x.stride(),
            x.dtype,
            x.device,
            w.shape,
            w.stride(),
            w.dtype,
            w.device,
            None if b is None else (b.shape, b.dtype, b.device),
            stride,
            padding,
            dilation,
            groups,
            grads,
            cast,
            E._cudnn_tf32(),
            E._matmul_tf32(),
        )
        t4 = pc()
        route = ex._routes.get(key)
        t5 = pc()
        route.calls += 1
        r = E.original_conv2d(x, w, b, stride, padding, dilation, groups)
        t6 = pc()
        for i, (a, c) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6))):
            parts[i] += c - a
        calls[0] += 1
        return r

    with contextlib.ExitStack() as stack:
        hook.enable(ex)
        stack.callback(hook.disable)
        for _ in range(5):
            step()
        saved, hook.run_conv = hook.run_conv, timed
        stack.callback(setattr, hook, "run_conv", saved)
        for _ in range(100):
            step()
    names = ["device type", "autocast", "grads", "key", "lookup", "PyTorch's conv"]
    print(
        "per call, inside the step (us): "
        + ", ".join(f"{n} {parts[i] / calls[0] / 1e3:.2f}" for i, n in enumerate(names))
    )


if __name__ == "__main__":
    main()
