"""How often the device is still busy when a network's convolutions are called (GPU): what the runtime's probation
(algosel/runtime/executor.py, ``MIN_BUSY_FRACTION``) looks at, per network of benchmarks/zoo.py.

    python benchmarks/device_busy.py mynet:float32 efficientnet_v2_s:float32 resnet50:amp [--steps 6]

PyTorch's default runs every convolution; ``F.conv2d`` is wrapped to look at the current stream before each forward
call (``cudaStreamQuery``) and, through a gradient hook on its output, when the backward reaches it. Prints, per
network, one JSON line: wall and host ms per step (the wrapper's own host time included), the share of forward and
backward looks that found the device busy, and the forward calls per step. The first line is the cost of one look.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo  # noqa: E402


def busy_shares(spec: str, steps: int) -> dict:
    """``spec``: ``net:dtype`` as benchmarks/zoo.py names them."""
    import torch
    import torch.nn.functional as F

    from algosel.runtime.executor import device_busy

    net, _, dtype = spec.partition(":")
    original = F.conv2d
    looks: dict[str, list[int]] = {"fwd": [], "bwd": []}
    on = [False]

    def look(direction: str, t) -> None:  # the runtime's own look (what its probation counts)
        if on[0]:
            looks[direction].append(int(device_busy(t)))

    def wrapped(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        look("fwd", x)
        y = original(x, w, b, stride, padding, dilation, groups)
        if on[0] and y.requires_grad:
            y.register_hook(lambda g: look("bwd", g))
        return y

    step, n = zoo.build_network(net, dtype, "cuda")
    F.conv2d = wrapped
    try:
        for i in range(3):  # PyTorch's plans warm
            step(i)
        torch.cuda.synchronize()
        count = max(steps, n)
        on[0] = True
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(count):
            step(i)
        host_ms = 1e3 * (time.process_time() - c0) / count
        torch.cuda.synchronize()
        wall_ms = 1e3 * (time.perf_counter() - t0) / count
        on[0] = False
    finally:
        F.conv2d = original
    return {"net": net, "dtype": dtype, "wall_ms": round(wall_ms, 2), "host_ms": round(host_ms, 2),
            "fwd_busy": round(statistics.mean(looks["fwd"]), 3),
            "bwd_busy": round(statistics.mean(looks["bwd"]), 3) if looks["bwd"] else None,
            "calls_fwd": len(looks["fwd"]) / count}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("nets", nargs="+", help="net:dtype, e.g. mynet:float32 resnet50:amp")
    p.add_argument("--steps", type=int, default=6, help="steps looked at per network (at least one pass)")
    args = p.parse_args(argv)
    for spec in args.nets:
        net, _, dtype = spec.partition(":")
        if net not in zoo.NETS or dtype not in zoo.DTYPES:
            print(f"device_busy.py: {spec!r} is not net:dtype (nets: {', '.join(zoo.NETS)}; dtypes: "
                  f"{', '.join(zoo.DTYPES)})", file=sys.stderr)  # fmt: skip
            return 2
    import torch

    if not torch.cuda.is_available():
        print("device_busy.py: needs a CUDA GPU (it looks at a CUDA stream)", file=sys.stderr)
        return 2
    from algosel.runtime.executor import device_busy

    probe = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20000):
        device_busy(probe)
    print(json.dumps({"look_us": round((time.perf_counter() - t0) / 20000 * 1e6, 3)}), flush=True)
    for spec in args.nets:
        print(json.dumps(busy_shares(spec, args.steps)), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
