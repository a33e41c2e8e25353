"""What querying cuDNN's live list of a problem costs, per heuristic mode (GPU): what verify mode pays far from the
records (``VERIFY_LIVE_MODES`` in algosel/runtime/executor.py).

    python benchmarks/live_list_cost.py

On 9 problems of the zoo's float32 networks (RegNetY-800MF's 20-group 3x3 convolution, SqueezeNet's last 1x1, a
ConvNeXt-T depthwise 7x7; each direction), in this order per problem: the three lists together
(``CudnnGraphSpace.enumerate``, as the runtime queries them), then each mode's list alone. Prints, per query, the
median and largest wall time (ms) and every problem's. The first query of the process also pays cuDNN's
initialisation.

The figures docs/hook.md quotes (H200, 2026-12-03: the three lists 10-101 ms a problem after a first of 471 ms, mode
A 0-3 ms, FALLBACK 1-2 ms, B 8-46 ms) came from an earlier form of this script that built each mode's list alone
without reading its configs' behaviour notes (``CudnnGraphSpace._graph``); this form has not run on a GPU yet.
"""

from __future__ import annotations

import statistics
import time


def problems():
    from algosel.problem import ConvProblem

    out = []
    for d in ("fwd", "bwd_data", "bwd_filter"):
        out += [
            ConvProblem(n=64, c=320, k=320, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, groups=20, direction=d),
            ConvProblem(n=64, c=512, k=1000, h=13, w=13, r=1, s=1, direction=d),
            ConvProblem(n=32, c=384, k=384, h=14, w=14, r=7, s=7, pad_h=3, pad_w=3, groups=384, direction=d),
        ]
    return out


def main() -> int:
    from algosel.spaces import get_space

    space = get_space("cudnn")
    times_ms: dict[str, list[float]] = {q: [] for q in ("a, b, fallback", "a", "b", "fallback")}
    for p in problems():
        t0 = time.perf_counter()
        space.enumerate(p)
        space.release(p)
        times_ms["a, b, fallback"].append(1e3 * (time.perf_counter() - t0))
        for mode in ("a", "b", "fallback"):
            t0 = time.perf_counter()
            space.enumerate(p, modes=(mode,))
            space.release(p)
            times_ms[mode].append(1e3 * (time.perf_counter() - t0))
    for query, ms in times_ms.items():
        print(f"live list {query}: median {statistics.median(ms):.1f} ms, largest {max(ms):.1f};",
              " ".join(f"{t:.0f}" for t in ms))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
