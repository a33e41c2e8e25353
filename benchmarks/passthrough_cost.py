"""Where the hook's pass-through cost comes from, in a real training step (GPU).

    python benchmarks/passthrough_cost.py [--nets resnet50,efficientnet_b0] [--rounds 40]

Single training steps in rotation, each timed to its end, of four variants in one process (every convolution
takes PyTorch's own kernel in all four, so PyTorch's plans are shared):

- ``default``: PyTorch's ``F.conv2d``;
- ``python-wrapper``: ``F.conv2d`` replaced by a Python function that only calls PyTorch's (what any Python-level
  hook costs);
- ``hook-enable``: the hook switched on once (``algosel.hook.enable``) with an executor that passes everything
  through;
- ``hook-enabled-per-step``: the same executor, ``with algosel.hook.enabled(ex):`` around every step;
- ``hook-python-path``: ``hook-enable`` without the compiled path's dispatch table (``native=False``: every call
  keyed and looked up in Python).

Prints the median step time of each and the median ratio of neighbouring steps to the default.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from standins import Predicting

VARIANTS = ("default", "python-wrapper", "hook-enable", "hook-enabled-per-step", "hook-python-path")


def run(net: str, amp: bool, rounds: int) -> dict:
    import contextlib

    import torchvision

    from algosel.learn.models import load_default
    from algosel.runtime import hook

    torch.manual_seed(0)
    model = getattr(torchvision.models, net)(weights=None).cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    if amp:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    original = F.conv2d

    def wrapper(*args, **kwargs):
        return original(*args, **kwargs)

    ex = hook.Executor(selector=Predicting(load_default()), cache=False)
    ex_python = hook.Executor(selector=Predicting(load_default()), cache=False, native=False)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()

    def variant(name):
        if name == "python-wrapper":
            F.conv2d = wrapper
        elif name == "hook-enable":
            hook.enable(ex)
        elif name == "hook-python-path":
            hook.enable(ex_python)
        try:
            with hook.enabled(ex) if name == "hook-enabled-per-step" else contextlib.nullcontext():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                return 1e3 * (time.perf_counter() - t0)
        finally:
            hook.disable()
            F.conv2d = original

    for name in VARIANTS * 3:
        variant(name)
    times = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for name in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            times[name].append(variant(name))
    out = {"net": net, "amp": amp, "stats": hook.stats(), "table_signatures": len(ex._table or ())}
    for v in VARIANTS:
        out[f"{v}_ms"] = statistics.median(times[v])
        out[f"{v}_vs_default"] = statistics.median(a / b for a, b in zip(times[v], times["default"]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", default="resnet50,efficientnet_b0")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for net in args.nets.split(","):
        for amp in (False, True):
            row = run(net, amp, args.rounds)
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
