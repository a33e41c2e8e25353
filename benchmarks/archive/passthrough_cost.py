"""Where the hook's pass-through cost comes from, in real training steps (GPU; ``--device cpu`` runs it anywhere).

    python benchmarks/passthrough_cost.py --nets mynet,resnet50 --dtypes float32,amp --rounds 150 --processes 3 \
        --out passthrough.jsonl
    python benchmarks/passthrough_cost.py --summarize passthrough.jsonl

Slots of a few training steps of one of the zoo's networks (benchmarks/zoo.py builds them), in ABBA rotation, of
variants in which every convolution runs PyTorch's own kernel (so all of them share PyTorch's plans):

- ``default``: PyTorch's ``F.conv2d``;
- ``again``: the default a second time, in the slot farthest from the first: what two identical variants read
  apart is this measurement's floor (noise and position in the rotation);
- ``python-wrapper``: ``F.conv2d`` replaced by a Python function that only calls PyTorch's (what any Python-level
  hook costs);
- ``python-wrapper-per-step``: the same wrapper, put in ``F.conv2d`` at each step's start and taken out at its end
  (what an ``enabled()`` block's switching of ``F.conv2d`` costs, without the hook);
- ``hook-enable``: the hook switched on for the slot (``algosel.hook.enable``) with an executor that passes every
  convolution through (``min_gain_us=inf``): the compiled dispatch alone;
- ``hook-enabled-per-step``: the same executor, ``with algosel.hook.enabled(ex):`` around every step (as the zoo's
  hook modes and most users write it);
- ``hook-python-path``: ``hook-enable`` without the compiled dispatch table (``native=False``);
- ``hook-stepping-aside``: ``with algosel.hook.enabled(ex):`` around every step with an executor that may step aside
  (the default): once it has met every convolution and switched none, its blocks leave ``F.conv2d`` alone.

The executors of the other hook variants never step aside (``step_aside=False``): they measure the dispatch.

Each (network, dtype) runs in a process of its own, ``--processes`` times. A row per process holds every slot's
wall time per step (to the device's end) and host CPU time per step (every thread of the process, to the last
step's return); the summary pools the processes (zoo.py's ``pooled_ratio``: medians of the ratios of neighbouring
slots to the default's, with a 95% interval that resamples processes and then slots).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import zoo

VARIANTS = (
    "default",
    "again",
    "python-wrapper",
    "python-wrapper-per-step",
    "hook-enable",
    "hook-enabled-per-step",
    "hook-python-path",
    "hook-stepping-aside",
)


def _variants(hook, functional):
    """Per variant: (the context of each of its slots, the context of each step)."""
    original = functional.conv2d

    def wrapper(*args, **kwargs):
        return original(*args, **kwargs)

    @contextlib.contextmanager
    def conv_is(fn):
        functional.conv2d = fn
        try:
            yield
        finally:
            functional.conv2d = original

    @contextlib.contextmanager
    def switched_on(ex):
        hook.enable(ex)
        try:
            yield
        finally:
            hook.disable()

    ex = hook.Executor(cache=False, min_gain_us=math.inf, step_aside=False)  # every convolution passes through
    ex_python = hook.Executor(cache=False, min_gain_us=math.inf, native=False, step_aside=False)
    ex_aside = hook.Executor(cache=False, min_gain_us=math.inf)
    none = contextlib.nullcontext
    return {
        "default": (none, none),
        "again": (none, none),
        "python-wrapper": (lambda: conv_is(wrapper), none),
        "python-wrapper-per-step": (none, lambda: conv_is(wrapper)),
        "hook-enable": (lambda: switched_on(ex), none),
        "hook-enabled-per-step": (none, lambda: hook.enabled(ex)),
        "hook-python-path": (lambda: switched_on(ex_python), none),
        "hook-stepping-aside": (none, lambda: hook.enabled(ex_aside)),
    }


def _order(variants: tuple[str, ...]) -> list[str]:
    """The variants' order in the first pair of rounds (``again`` in the middle, farthest from ``default``), and the
    order the rows record; ``zoo.rotate`` draws each later pair's order at random (``zoo.round_order``)."""
    rest = [v for v in variants if v not in ("default", "again")]
    half = len(rest) // 2
    return ["default", *rest[:half], *(["again"] if "again" in variants else []), *rest[half:]]


def run(net: str, dtype: str, device: str, rounds: int, slot_steps: int) -> dict:
    """One process's rotation over the variants: every slot's wall and host ms per step."""
    import torch
    import torch.nn.functional as F

    from algosel.runtime import hook

    step, n = zoo.build_network(net, dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    variants = _variants(hook, F)
    order = _order(VARIANTS)
    slots = {v: variants[v][0] for v in order}
    per_step = {v: variants[v][1] for v in order}
    steps = n if n > 1 else slot_steps
    for name in order:  # first passes: the hook plans every convolution once (passing it through)
        with slots[name]():
            zoo.run_steps(step, per_step[name], 2 * steps)
    hosts: dict[str, list[float]] = {}
    walls = zoo.rotate(step, per_step, rounds, steps, sync, hosts, slots)
    out: dict = {"net": net, "dtype": dtype, "device": device, "rounds": rounds, "slot_steps": steps,
                 "order": order, "stats": hook.stats()}  # fmt: skip
    for v in order:
        out[f"{v}_steps_ms"], out[f"{v}_hosts_ms"] = walls[v], hosts[v]
    return out


def summarize(path: Path) -> str:
    """Per (network, dtype): each variant's pooled ratio to the default, wall and host, with 95% intervals."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "error" in r:
            continue
        groups.setdefault((r["net"], r["dtype"]), []).append(r)
    lines = ["| network | dtype | processes | variant | wall x default (95%) | host x default (95%) | "
             "host ms/step |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for (net, dtype), group in sorted(groups.items()):
        as_host = [{f"{v}_steps_ms": r[f"{v}_hosts_ms"] for v in VARIANTS if f"{v}_hosts_ms" in r} for r in group]
        for v in VARIANTS[1:]:
            wall, host = zoo.pooled_ratio(group, v), zoo.pooled_ratio(as_host, v)
            if wall is None or host is None:
                continue
            host_ms = sorted(t for r in group for t in r[f"{v}_hosts_ms"])
            median_ms = host_ms[len(host_ms) // 2]
            lines.append(f"| {net} | {dtype} | {len(group)} | {v} | {wall[0]:.4f} ({wall[1]:.4f}-{wall[2]:.4f}) | "
                         f"{host[0]:.4f} ({host[1]:.4f}-{host[2]:.4f}) | {median_ms:.3f} |")  # fmt: skip
    for r in rows:
        if "error" in r:
            lines.append(f"  failed: {r['net']} {r['dtype']}: {r['error'][-300:]}")
    return "\n".join(lines)


def _drive(args) -> None:
    out = Path(args.out)
    for net in args.nets.split(","):
        for process in range(args.processes):
            for dtype in args.dtypes.split(","):
                cmd = [sys.executable, __file__, "--child", "--net", net, "--dtype", dtype, "--device", args.device,
                       "--rounds", str(args.rounds), "--slot-steps", str(args.slot_steps),
                       *(["--cpus", args.cpus] if args.cpus else [])]  # fmt: skip
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, check=False)
                    rows = [json.loads(ln[7:]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                    row = rows[0] if rows else {"net": net, "dtype": dtype, "error": proc.stderr[-1500:] or "no result"}
                except subprocess.TimeoutExpired:
                    row = {"net": net, "dtype": dtype, "error": f"timed out after {args.timeout_s} s"}
                row["process"], row["job_s"], row["cpus"] = process, round(time.perf_counter() - t0, 1), args.cpus
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{net:20s} {dtype:7s} process {process} {row['job_s']:6.1f}s {row.get('error', 'ok')[:200]}",
                      flush=True)  # fmt: skip
    print(summarize(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", default="mynet,resnet50", help=f"zoo networks ({','.join(zoo.NETS)})")
    p.add_argument("--dtypes", default="float32,amp", help="float32 (TF32, NCHW), amp (float16 autocast, NHWC)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rounds", type=int, default=150, help="rotations of the variants' slots")
    p.add_argument("--slot-steps", type=int, default=3, help="steps per slot")
    p.add_argument("--processes", type=int, default=3, help="new processes per (network, dtype)")
    p.add_argument("--timeout-s", type=float, default=300)
    p.add_argument("--cpus", default=None, help="pin every process to these cores (e.g. 0-7)")
    p.add_argument("--out", default="passthrough.jsonl")
    p.add_argument("--summarize", default=None, help="print the table of a results file and stop")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--net", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    nets = set(args.nets.split(",")) if not args.child else {args.net}
    unknown = sorted(nets - set(zoo.NETS)) + sorted(set(args.dtypes.split(",")) - set(zoo.DTYPES))
    if unknown:
        p.error(f"unknown network or dtype: {','.join(unknown)} (networks: {','.join(zoo.NETS)}; dtypes: "
                f"{','.join(zoo.DTYPES)})")  # fmt: skip
    if args.summarize:
        print(summarize(Path(args.summarize)))
    elif args.child:
        if args.cpus:
            os.sched_setaffinity(0, zoo.cpu_set(args.cpus))  # before torch starts its threads: they inherit it
        print("RESULT " + json.dumps(run(args.net, args.dtype, args.device, args.rounds, args.slot_steps)), flush=True)
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        _drive(args)


if __name__ == "__main__":
    main()
