"""Host cost of the runtime hook's per-call routing, on any machine (CPU is enough).

    python benchmarks/hook_wrapper_cost.py

Prints the best of 7 runs of 100,000 calls of ``algosel.hook.conv2d`` on a pass-through call signature with
PyTorch's own conv replaced by a no-op: the time the hook adds to every conv call once the call's route is known
(building the key, one dict lookup, counting the call). The GPU benchmark (hook_bench.py) measures the whole.
"""

from __future__ import annotations

import time

import torch

from algosel.runtime import executor as executor_mod
from algosel.runtime import hook


def main() -> None:
    x = torch.randn(1, 4, 4, 4, requires_grad=True)
    w = torch.randn(4, 4, 3, 3, requires_grad=True)
    args = (None, (1, 1), (1, 1), (1, 1), 1)
    ex = hook.Executor(cache=False)
    with hook.enabled(ex):
        hook.conv2d(x, w, *args)  # plans the route: pass-through for this tiny float32 conv
        route = next(iter(ex._routes.values()))
        original, executor_mod.original_conv2d = executor_mod.original_conv2d, lambda *a: None
        try:

            def run(n: int = 100_000) -> float:
                t0 = time.perf_counter()
                for _ in range(n):
                    hook.conv2d(x, w, *args)
                return 1e6 * (time.perf_counter() - t0) / n

            best_us = min(run() for _ in range(7))
        finally:
            executor_mod.original_conv2d = original
    print(f"route {route.kind!r}; the hook adds {best_us:.2f} us per call (best of 7 x 100,000 calls)")


if __name__ == "__main__":
    main()
