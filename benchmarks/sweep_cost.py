"""Where a sweep's time goes, phase by phase, on a few representative problems (GPU).

    python benchmarks/sweep_cost.py [--grid 20]

Prints, per problem: candidates enumerated, seconds to enumerate (heuristic queries), to prepare
(build) every plan, and to measure the whole problem; then the sweep rate over the first ``--grid`` grid cases.
Use it to size ``algosel sweep --time-budget-s`` chunks.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

from algosel.measure.grid import GridSpec, sample_grid
from algosel.measure.sweep import SweepCase, Sweeper
from algosel.measure.timing import CudaEventTimer
from algosel.problem import ConvProblem
from algosel.records.environment import collect_environment
from algosel.spaces import make_space
from algosel.spaces.cudnn_graph import CudnnGraphSpace

PROBLEMS = {
    "resnet 3x3 fp16": ConvProblem(32, 64, 64, 56, 56, 3, 3, 1, 1, dtype="float16"),
    "resnet 1x1 fp32": ConvProblem(32, 256, 64, 56, 56, 1, 1, dtype="float32"),
    "fpn 3x3 fp32": ConvProblem(1, 256, 256, 25, 38, 3, 3, 1, 1, dtype="float32"),
    "alexnet fc6 fp16": ConvProblem(1600, 256, 4096, 6, 6, 6, 6, dtype="float16"),
    "depthwise fp16": ConvProblem(32, 144, 144, 56, 56, 3, 3, 1, 1, groups=144, dtype="float16"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", type=int, default=20)
    args = parser.parse_args()
    env = collect_environment()
    print(env)
    timer = CudaEventTimer()
    for label, fwd in PROBLEMS.items():
        for problem in fwd.directions():
            space = CudnnGraphSpace()
            t0 = time.perf_counter()
            cands = space.enumerate(problem)
            t_enum = time.perf_counter() - t0
            built = 0
            for c in cands:
                try:
                    space.prepare(problem, c)
                    built += 1
                except Exception as exc:  # noqa: BLE001
                    print("   build failed", c.name, exc)
            t_build = time.perf_counter() - t0 - t_enum
            space.release(problem)
            note_count = collections.Counter(n for c in cands for n in c.notes)
            sweeper = Sweeper([make_space(n) for n in ("cudnn", "gemm", "pytorch")], timer, env)
            t0 = time.perf_counter()
            rows = sweeper.measure_problem(problem, "probe")
            t_all = time.perf_counter() - t0
            ok = [r for r in rows if r["status"] == "ok"]
            best = min(ok, key=lambda r: r["time_ms_median"])
            a0 = [r for r in ok if r["rank_a"] == 0]
            pt = [r for r in ok if r["space"] == "pytorch"]
            print(
                f"{label:18s} {problem.direction:10s} cands={len(cands):3d} built={built:3d} "
                f"enum={t_enum:.3f}s build={t_build:.3f}s measure={t_all:.2f}s "
                f"best={best['candidate_id']} {best['time_ms_median']:.4f}ms "
                f"A0={a0[0]['time_ms_median'] / best['time_ms_median'] if a0 else float('nan'):.2f}x "
                f"torch={pt[0]['time_ms_median'] / best['time_ms_median'] if pt else float('nan'):.2f}x "
                f"statuses={collections.Counter(r['status'] for r in rows)} notes={dict(note_count)}"
            )
    if args.grid:
        sweeper = Sweeper([make_space(n) for n in ("cudnn", "gemm", "pytorch")], timer, env)
        shapes = sample_grid(GridSpec(count=args.grid, seed=123))
        t0 = time.perf_counter()
        for p in shapes:
            t1 = time.perf_counter()
            rows = sweeper.measure_case(SweepCase(p.replace(dtype="float16"), "grid"))
            print(f"  {time.perf_counter() - t1:6.2f}s {len(rows):4d} rows  {p.shape_key}  flops={p.flops:.2e}")
        dt = time.perf_counter() - t0
        print(f"grid: {args.grid} cases in {dt:.1f}s = {dt / args.grid:.2f}s per case (3 directions)")
    print("max memory allocated GiB", torch.cuda.max_memory_allocated() / 2**30)


if __name__ == "__main__":
    main()
