"""Where verify mode's cold first pass and prediction mode's first pass spend their time (cProfile, GPU).

    python benchmarks/cold_profile.py --net efficientnet_b0 --dtype amp [--rows 40]

One network of benchmarks/zoo.py, in one process: PyTorch's default's first step (its plans are then warm), then
verify mode's (``verify=3``) passes until every call signature is decided (as zoo.py counts a cold first pass) and
prediction mode's first pass, each with an executor of its own and no persistent cache, under cProfile. Prints each
mode's wall time, the problems verify mode timed and the seconds it spent deciding, the hook's routes, the
functions by cumulative and by own time, and every candidate verify mode measured: its direction, cuDNN's
behaviour notes, the seconds its build (``prepare``) and its whole measurement took, and its median time, with
totals for PyTorch's default, runtime-compiled configs and the others.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import defaultdict

import zoo

from algosel.candidates import DEFAULT_ID


def measured_candidates() -> list[dict]:
    """Patch the sweeper so that each candidate it measures leaves a row here: direction, candidate, notes, build and
    measurement seconds, status and median time."""
    from algosel.measure import sweeper

    rows: list[dict] = []
    measure = sweeper.Sweeper._measure_candidate

    def timed(self, space, problem, source, cand, opsets, ref, best_ms, kept, built_s=None):
        built: list[float] = []  # the sweeper's own timing of the candidate's preparation
        t0 = time.perf_counter()
        row = measure(self, space, problem, source, cand, opsets, ref, best_ms, kept, built)
        wall_s = time.perf_counter() - t0
        if built_s is not None:  # the slow-build rule's list
            built_s.extend(built)
        rows.append({"direction": problem.direction, "problem": problem.key, "candidate": cand.candidate_id,
                     "notes": ",".join(cand.notes), "build_s": sum(built), "wall_s": wall_s,
                     "status": row["status"], "time_ms": row.get("time_ms_median")})  # fmt: skip
        return row

    sweeper.Sweeper._measure_candidate = timed
    return rows


def print_candidates(rows: list[dict]) -> None:
    print(f"{'direction':10s} {'candidate':58s} {'notes':28s} {'build s':>8s} {'wall s':>7s} {'ms':>8s} status")
    for r in sorted(rows, key=lambda r: -r["wall_s"]):
        ms = r["time_ms"] if r["time_ms"] is not None else float("nan")
        print(f"{r['direction']:10s} {r['candidate'][:58]:58s} {r['notes'][:28]:28s} {r['build_s']:8.3f} "
              f"{r['wall_s']:7.3f} {ms:8.3f} {r['status']}")  # fmt: skip
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        kind = (DEFAULT_ID if r["candidate"] == DEFAULT_ID
                else "runtime-compiled" if "runtime_compilation" in r["notes"] else "other")  # fmt: skip
        g = groups[f"{kind} {r['direction']}"]
        g[0] += 1
        g[1] += r["build_s"]
        g[2] += r["wall_s"]
    for name, (n, build_s, wall_s) in sorted(groups.items()):
        print(f"total {name}: {n} candidates, build {build_s:.2f} s, measurement {wall_s:.2f} s")


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

    candidates = measured_candidates()

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
        skipped = ex._sweeper.skipped_slow_builds if ex._sweeper is not None else 0
        print(f"== verify={verify}: {passes} passes {time.perf_counter() - t0:.2f} s, measured "
              f"{ex.measured_problems}, planning {ex.planning_s:.2f} s, candidates left out for their engine's "
              f"slow build {skipped}, stats {hook.stats()}")  # fmt: skip
        hook.reset_stats()
        if candidates:
            print_candidates(candidates)
            candidates.clear()
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.rows)
        stats.sort_stats("tottime").print_stats(args.rows // 2)


if __name__ == "__main__":
    main()
