"""Fully connected mode: a convolution whose kernel covers its input, against ``nn.Linear``'s matrix product (GPU).

    CODE=<commit> python benchmarks/fc_mode.py [--dtypes float16,float32] [--rounds 12] [--out fc_mode.jsonl]

AlexNet's fc6 as a 6x6 convolution (256 x 6 x 6 -> 4096, batch 1600), forward and backward (input and weight
gradients), three arms in one process: PyTorch's default convolution, the hook's default mode (``hook.enabled()``:
the rule; its decisions are made before the timed blocks, counted in ``settle_steps``), and ``F.linear`` on the
same tensors reshaped. Blocks of ``--block`` steps rotate in ABBA order over ``--rounds`` rounds, each timed on the
device's timeline (CUDA events); reported: each arm's median ms a step, the ratios to ``nn.Linear``, and the host
time a step of each arm (the step's thread's CPU time), whether the step is host- or GPU-bound.
Float32 runs under TF32 for the convolution and the matrix product alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARMS = ("default", "rule", "linear")


def steps(dtype: str):
    """Each arm's step (a callable) on fc6's tensors of ``dtype``, and the hook's executor."""
    import torch
    import torch.nn.functional as F

    from algosel.runtime import hook

    dt = getattr(torch, dtype)
    torch.manual_seed(0)
    x = torch.randn(1600, 256, 6, 6, device="cuda", dtype=dt, requires_grad=True)
    w = (torch.randn(4096, 256, 6, 6, device="cuda", dtype=dt) / 40).requires_grad_()
    g = torch.randn(1600, 4096, 1, 1, device="cuda", dtype=dt)
    x2 = x.detach().reshape(1600, -1).requires_grad_()
    w2 = w.detach().reshape(4096, -1).requires_grad_()
    g2 = g.reshape(1600, 4096)

    def default():
        torch.autograd.backward(F.conv2d(x, w), g)

    def rule():
        with hook.enabled():
            torch.autograd.backward(F.conv2d(x, w), g)

    def linear():
        torch.autograd.backward(F.linear(x2, w2), g2)

    with hook.enabled() as ex:
        pass
    return {"default": default, "rule": rule, "linear": linear}, ex


def block_ms(step, n: int) -> tuple[float, float]:
    """Device ms a step over ``n`` steps (CUDA events), and the step's thread's CPU ms a step."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    cpu0 = time.thread_time()
    start.record()
    for _ in range(n):
        step()
    end.record()
    cpu = time.thread_time() - cpu0
    end.synchronize()
    return start.elapsed_time(end) / n, 1e3 * cpu / n


def run(dtype: str, rounds: int, block: int) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    arms, ex = steps(dtype)
    settle = 0
    ex.model.wait()
    while settle < 200 and (settle < 20 or ex.deciding()):  # the rule's decisions, its probation and step trial
        arms["rule"]()
        settle += 1
    for name in ARMS:
        block_ms(arms[name], 3)
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    host: dict[str, list[float]] = {a: [] for a in ARMS}
    for r in range(rounds):
        order = ARMS if r % 2 == 0 else ARMS[::-1]
        for name in order:
            ms, host_ms = block_ms(arms[name], block)
            times[name].append(ms)
            host[name].append(host_ms)
    out = {"dtype": dtype, "gpu": torch.cuda.get_device_name(), "settle_steps": settle,
           "routes": ex.route_reasons(), "rounds": rounds, "block": block}  # fmt: skip
    for name in ARMS:
        out[f"{name}_step_ms"] = statistics.median(times[name])
        out[f"{name}_host_ms"] = statistics.median(host[name])
    for name in ("default", "rule"):
        out[f"{name}_vs_linear"] = statistics.median(a / b for a, b in zip(times[name], times["linear"]))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="float16,float32")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("fc_mode.py: needs a CUDA GPU")
    code = os.environ.get("CODE", "unknown")  # the commit measured (the device's copy of the tree has no .git)
    for dtype in args.dtypes.split(","):
        row = {**run(dtype, args.rounds, args.block), "code": code, "date": time.strftime("%Y-%m-%d")}
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
