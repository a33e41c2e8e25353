"""Whether prediction mode's switches on zoo networks are real: each switched direction timed against PyTorch's
default (GPU).

    python benchmarks/switch_check.py --nets efficientnet_b0:amp,mobilenet_v3_large:amp [--far-margin 1.5]

Per network and dtype of benchmarks/zoo.py: one pass of training steps under a fresh executor in prediction mode
(no persistent cache), then every direction it switched away from PyTorch's default is timed with the sweeper's
timer at a generous budget (20 ms per candidate, 10-50 repeats): the chosen candidate against the default. Prints
one line per switch (predicted and measured ratio default / chosen, the problem's distance from the records) and a
table per network; ``--out`` keeps the lines as JSON. ``--far-margin`` overrides ``MIN_PREDICTED_RATIO_FAR`` (the
margin far from the records), to see what another rule switches.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import zoo

from algosel.candidates import DEFAULT_ID


def switches(net: str, dtype: str, sweeper) -> list[dict]:
    """The switched directions of one network's pass, each with its predicted and measured times."""
    import torch

    from algosel.runtime import hook
    from algosel.runtime.executor import Executor
    from algosel.spaces import get_space, split_candidate_id

    step, n = zoo._build(net, dtype, "cuda")
    ex = Executor(cache=False)
    with hook.enabled(ex):
        for i in range(n):
            step(i)
    torch.cuda.synchronize()
    out = []
    for problem, plan in list(ex._plans.items()):
        if not plan.path.startswith(("cudnn", "gemm")):
            continue
        decision = ex.decide(problem, torch.device("cuda"))
        pairs = []
        for cid in (DEFAULT_ID, decision.candidate_id):
            space_name, name = split_candidate_id(cid)
            space = get_space(space_name)
            pairs.append((space, space.candidate(name, problem.direction)))
        rows = {r["candidate_id"]: r for r in sweeper.measure_candidates(problem, pairs, source="switch_check")}
        measured = {c: (r["time_ms_median"] if r["status"] == "ok" else None) for c, r in rows.items()}
        pred = decision.times_ms
        out.append({
            "net": net, "dtype": dtype, "problem": problem.key, "candidate_id": decision.candidate_id,
            "source": decision.source, "distance": ex.selector.records_distance(problem),
            "predicted_ms": {c: pred.get(c) for c in (DEFAULT_ID, decision.candidate_id)},
            "measured_ms": measured, "status": {c: r["status"] for c, r in rows.items()},
        })  # fmt: skip
    return out


def ratio(times: dict, candidate_id: str) -> float:
    """default / candidate (nan where either is missing)."""
    d, c = times.get(DEFAULT_ID), times.get(candidate_id)
    return d / c if d and c and not math.isnan(c) else math.nan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", default="efficientnet_b0:amp,mobilenet_v3_large:amp,deeplabv3_resnet50:amp",
                   help="net:dtype pairs (dtype: float32 or amp)")  # fmt: skip
    p.add_argument("--far-margin", type=float, default=None, help="MIN_PREDICTED_RATIO_FAR for this run")
    p.add_argument("--out", default=None, help="write the switches as JSON lines here")
    args = p.parse_args()
    from algosel.measure.sweep import Sweeper
    from algosel.measure.timing import CudaEventTimer
    from algosel.runtime import executor

    if args.far_margin is not None:
        executor.MIN_PREDICTED_RATIO_FAR = args.far_margin
    sweeper = Sweeper([], CudaEventTimer(budget_ms=20.0, min_repeats=10, max_repeats=50), {"env_id": "switch_check"},
                      operand_sets=1)  # fmt: skip
    everything = []
    for pair in args.nets.split(","):
        net, dtype = pair.split(":")
        if net not in zoo.NETS or dtype not in zoo.DTYPES:
            raise SystemExit(f"switch_check.py: unknown net:dtype {pair!r} (nets: {', '.join(sorted(zoo.NETS))})")
        found = switches(net, dtype, sweeper)
        everything += found
        for s in found:
            print(f"{net} {dtype} {s['problem']} -> {s['candidate_id']}: distance {s['distance']:.2f}, predicted "
                  f"x{ratio(s['predicted_ms'], s['candidate_id']):.2f}, measured "
                  f"x{ratio(s['measured_ms'], s['candidate_id']):.2f}", flush=True)  # fmt: skip
    print("\n| network | dtype | switched | measured faster | default / chosen, measured (geomean) | worst |")
    print("| --- | --- | --- | --- | --- | --- |")
    for pair in args.nets.split(","):
        net, dtype = pair.split(":")
        rs = [ratio(s["measured_ms"], s["candidate_id"]) for s in everything if (s["net"], s["dtype"]) == (net, dtype)]
        ok = [r for r in rs if not math.isnan(r)]
        gm = math.exp(statistics.fmean(math.log(r) for r in ok)) if ok else math.nan
        print(f"| {net} | {dtype} | {len(rs)} | {sum(r > 1 for r in ok)} | {gm:.3f} | "
              f"{min(ok) if ok else math.nan:.2f} |")  # fmt: skip
    if args.out:
        with open(args.out, "w") as fh:
            for s in everything:
                fh.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
