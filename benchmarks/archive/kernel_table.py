"""GPU kernel time per convolution of a zoo network's training step, by mode (torch.profiler): where one mode's
kernels are shorter than another's, convolution by convolution.

    python benchmarks/kernel_table.py regnet_y_800mf float32 default d.json    # GPU, one process per mode
    python benchmarks/kernel_table.py regnet_y_800mf float32 benchmark b.json
    python benchmarks/kernel_table.py --compare d.json b.json [--top 20]       # anywhere

A mode (``default``, ``benchmark``: ``cudnn.benchmark``, ``verify``: the hook in verify mode as benchmarks/zoo.py
runs it) warms up (3 steps; verify mode 14, so that its looks and timing are done), then 3 steps run under
torch.profiler with ``record_shapes``. Each ``aten::convolution`` (forward) and ``aten::convolution_backward``
(both gradients) op is keyed by its input shapes and geometry, with the kernel time of its subtree per step, and the
kernels by name. ``--compare`` prints the ops whose kernel time per step differs most between two files, with the
kernels of each.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROFILED_STEPS = 3
CONV_OPS = ("aten::convolution", "aten::convolution_backward")


def record(net: str, dtype: str, mode: str, out: str) -> None:
    import torch
    import zoo
    from torch.profiler import ProfilerActivity, profile

    from algosel.runtime import hook

    if mode == "benchmark":
        torch.backends.cudnn.benchmark = True
    step, _ = zoo.build_network(net, dtype, "cuda")
    ctx = zoo.mode_context("verify", hook) if mode == "verify" else contextlib.nullcontext
    t0 = time.perf_counter()
    for i in range(14 if mode == "verify" else 3):
        with ctx():
            step(i)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for i in range(PROFILED_STEPS):
            with ctx():
                step(i)
        torch.cuda.synchronize()
    ops: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    kernels: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def subtree_us(event, names: collections.Counter) -> float:
        for k in event.kernels:
            names[k.name[:100]] += k.duration / PROFILED_STEPS
        return sum(k.duration for k in event.kernels) + sum(subtree_us(c, names) for c in event.cpu_children)

    total_us = 0.0
    for e in prof.events():
        total_us += sum(k.duration for k in e.kernels)
        if e.name not in CONV_OPS or (e.cpu_parent is not None and e.cpu_parent.name in CONV_OPS):
            continue
        geometry = list(e.concrete_inputs[3:]) if getattr(e, "concrete_inputs", None) else ""
        key = f"{e.name} {e.input_shapes[:3]} {geometry}"
        ops[key][0] += 1 / PROFILED_STEPS
        ops[key][1] += subtree_us(e, kernels[key]) / PROFILED_STEPS
    result = {"net": net, "dtype": dtype, "mode": mode, "warm_s": warm_s,
              "kernel_us_per_step": total_us / PROFILED_STEPS, "ops": dict(ops),
              "kernels": {k: dict(v) for k, v in kernels.items()}}  # fmt: skip
    Path(out).write_text(json.dumps(result, indent=0))
    conv_ms = sum(v[1] for v in ops.values()) / 1e3
    print(f"{net} {dtype} {mode}: kernels {total_us / PROFILED_STEPS / 1e3:.2f} ms a step, of which convolutions "
          f"{conv_ms:.2f} ms in {len(ops)} ops")  # fmt: skip


def compare(a_path: str, b_path: str, top: int) -> None:
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    print(f"{a['net']} {a['dtype']}: kernels a step {a['mode']} {a['kernel_us_per_step'] / 1e3:.2f} ms, "
          f"{b['mode']} {b['kernel_us_per_step'] / 1e3:.2f} ms")  # fmt: skip
    rows = []
    for key in set(a["ops"]) | set(b["ops"]):
        (calls_a, us_a), (calls_b, us_b) = a["ops"].get(key, [0, 0]), b["ops"].get(key, [0, 0])
        rows.append((us_a - us_b, key, max(calls_a, calls_b), us_a, us_b))
    rows.sort(key=lambda r: -abs(r[0]))
    for diff, key, calls, us_a, us_b in rows[:top]:
        print(f"{diff:9.0f} us a step ({calls:.0f} calls): {a['mode']} {us_a:.0f}, {b['mode']} {us_b:.0f}  {key}")
        for side in (a, b):
            names = sorted(side["kernels"].get(key, {}).items(), key=lambda kv: -kv[1])[:3]
            print("    " + side["mode"] + ": " + "; ".join(f"{us:.0f} {name[:70]}" for name, us in names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("args", nargs="*", help="NET DTYPE MODE OUT.json (record), or nothing with --compare")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"))
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare, args.top)
        return 0
    if len(args.args) != 4 or args.args[2] not in ("default", "benchmark", "verify"):
        ap.error("record: NET DTYPE MODE OUT.json, MODE one of default, benchmark, verify")
    record(*args.args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
