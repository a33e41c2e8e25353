"""Where verify mode's cold first pass and prediction mode's first pass spend their time (cProfile, GPU).

    python benchmarks/cold_profile.py --net efficientnet_b0 --dtype amp [--rows 40]

One network of benchmarks/zoo.py, in one process: PyTorch's default's first step (its plans are then warm), then
verify mode's (``verify=3``) passes until every call signature is decided (as zoo.py counts a cold first pass) and
prediction mode's first pass, each with an executor of its own and no persistent cache, under cProfile. Prints each
mode's wall time, the problems verify mode timed and the seconds it spent deciding, the hook's routes, and the
functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import zoo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", default="efficientnet_b0", choices=sorted(zoo.NETS))
    p.add_argument("--dtype", default="amp", choices=zoo.DTYPES)
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", type=int, default=40, help="rows of each profile table")
    args = p.parse_args()
    import torch

    from algosel.runtime import hook
    from algosel.runtime.executor import Executor

    step, _ = zoo._build(args.net, args.dtype, args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    step(0)
    sync()
    print(f"{args.net} {args.dtype}: default first pass {time.perf_counter() - t0:.2f} s")
    for verify in (3, 0):
        ex = Executor(verify=verify, cache=False)
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        passes = 0
        # as zoo.py counts a cold first pass: passes until every signature is decided (looking at the device first
        # routes a new call to PyTorch, and times it on a later pass)
        while passes == 0 or (passes < zoo.SETTLE_PASSES and ex.deciding()):
            with hook.enabled(ex):
                step(1)
            sync()
            passes += 1
        profile.disable()
        print(f"== verify={verify}: {passes} passes {time.perf_counter() - t0:.2f} s, measured "
              f"{ex.measured_problems}, planning {ex.planning_s:.2f} s, stats {hook.stats()}")  # fmt: skip
        hook.reset_stats()
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.rows)
        stats.sort_stats("tottime").print_stats(args.rows // 2)


if __name__ == "__main__":
    main()
