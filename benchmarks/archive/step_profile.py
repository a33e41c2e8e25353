"""Where a hook mode's training step spends its time against PyTorch's default: per-op tables (GPU or CPU).

    python benchmarks/step_profile.py --net regnet_y_800mf --dtype amp [--mode predict] [--rounds 16]

One network of benchmarks/zoo.py, in one process: the default (D), the hook in the mode asked (P: ``predict``,
``verify`` or ``native``, the pass-through control) and the control (N), side by side in ABBA rotation of
single steps (the median ratios to D); then two steps of D and two of P under torch.profiler, and the ops whose
time per step differs most between them: host ops by self CPU time, then GPU kernels by duration. P's routes (per
direction, by what they run: ``Executor.route_reasons``) say what it switched. Steps profiled in a process's first
profiler session carry its start-up ("Activity Buffer Request"), so D is profiled once before the tables are taken.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

import zoo


def _profile(step, ctx, steps: int, sync) -> tuple[dict, dict]:
    """(host ops, GPU kernels) of ``steps`` steps: name -> [calls, microseconds], per step."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        zoo.run_steps(step, ctx, steps)
        sync()
    host: dict = collections.defaultdict(lambda: [0.0, 0.0])
    kernels: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for e in prof.events():
        on_gpu = e.device_type == DeviceType.CUDA
        table = kernels if on_gpu else host
        table[e.name][0] += 1 / steps
        table[e.name][1] += (e.time_range.elapsed_us() if on_gpu else e.self_cpu_time_total) / steps
    return dict(host), dict(kernels)


def differences(a: dict, b: dict, most: int) -> list[tuple[str, float, float, float, float]]:
    """(name, calls in a, us in a, calls in b, us in b) for the ``most`` entries whose time differs most."""
    names = sorted(set(a) | set(b), key=lambda n: -abs(b.get(n, [0, 0])[1] - a.get(n, [0, 0])[1]))
    return [(n, *a.get(n, [0.0, 0.0]), *b.get(n, [0.0, 0.0])) for n in names[:most]]


def run(args) -> dict:
    import torch

    from algosel.runtime import hook

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    step, n = zoo.build_network(args.net, args.dtype, device)
    ctx = {"D": zoo.mode_context("default", hook), "P": zoo.mode_context(args.mode, hook),
           "N": zoo.mode_context("native", hook)}
    for c in ctx.values():
        zoo.run_steps(step, c, max(2, n))
    times = zoo.rotate(step, ctx, args.rounds, n, sync)
    result: dict = {"net": args.net, "dtype": args.dtype, "mode": args.mode, "device": device}
    for m in ctx:
        result[f"{m}_step_ms"] = statistics.median(times[m])
    for m in ("P", "N"):
        result[f"{m}_vs_D"] = statistics.median(a / b for a, b in zip(times[m], times["D"]))
    with ctx["P"]() as ex:
        result["P_routes"], result["P_blocks_aside"] = ex.route_reasons(), ex.blocks_aside
    _profile(step, ctx["D"], n, sync)  # the profiler's own start-up, outside the tables
    host_d, gpu_d = _profile(step, ctx["D"], 2 * n, sync)
    host_p, gpu_p = _profile(step, ctx["P"], 2 * n, sync)
    result["host_ops"] = differences(host_d, host_p, args.most)
    result["kernels"] = differences(gpu_d, gpu_p, args.most)
    result["kernel_ms_per_step"] = {"D": sum(v[1] for v in gpu_d.values()) / 1e3,
                                    "P": sum(v[1] for v in gpu_p.values()) / 1e3}  # fmt: skip
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", default="regnet_y_800mf", choices=sorted(zoo.NETS))
    p.add_argument("--dtype", default="amp", choices=zoo.DTYPES)
    p.add_argument("--mode", default="predict", choices=zoo.MODES[1:])
    p.add_argument("--rounds", type=int, default=16, help="rotations of the three modes' single steps")
    p.add_argument("--most", type=int, default=18, help="rows of each table")
    p.add_argument("--out", default=None, help="also write the result as JSON here")
    args = p.parse_args()
    result = run(args)
    print(f"{args.net} {args.dtype}: D {result['D_step_ms']:.2f} ms, {args.mode} x{result['P_vs_D']:.3f}, "
          f"control x{result['N_vs_D']:.3f}; {args.mode}'s routes {result['P_routes']}")  # fmt: skip
    for title, rows in (("host ops, self time", result["host_ops"]), ("GPU kernels", result["kernels"])):
        print(f"--- {title} per step: D calls, D us -> {args.mode} calls, {args.mode} us")
        for name, ca, ta, cb, tb in rows:
            print(f"  {ca:7.1f} {ta:9.0f} -> {cb:7.1f} {tb:9.0f}  {name[:100]}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
