"""Verify mode's own timing against a sweep's: the (problem, candidate) times a zoo run's verify mode measured
(``verify_measured`` of benchmarks/zoo.py's paired rows) beside the sweep's median of the same pair (CPU).

    python benchmarks/verify_vs_sweep.py benchmarks/results/zoo-h200-20261203-float32-02abf33.jsonl \
        data/sweeps/h200-zoo-f32

Prints how many pairs both hold, the median and 90th percentile of |log(verify / sweep)|, the share within 3%, and
the pair furthest apart.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("zoo", help="a zoo.py results file (JSON lines)")
    ap.add_argument("sweeps", nargs="+", help="record folders (algosel sweep --out)")
    args = ap.parse_args(argv)
    from algosel.records.analysis import ok_rows
    from algosel.records.store import RecordsError, load_records

    try:
        frame, _ = load_records(*args.sweeps)
    except RecordsError as exc:
        raise SystemExit(f"verify_vs_sweep: {exc}") from None
    sweep = {k: dict(zip(g.candidate_id, g.time_ms_median)) for k, g in ok_rows(frame).groupby("problem_key")}
    measured: dict[str, dict[str, float]] = {}
    with open(args.zoo) as f:
        for line in f:
            row = json.loads(line)
            measured.update(row.get("verify_measured", {}))
    pairs = [(t / sweep[k][c], k, c) for k, times in measured.items() if k in sweep
             for c, t in times.items() if c in sweep[k] and t > 0]  # fmt: skip
    if not pairs:
        raise SystemExit("verify_vs_sweep: no (problem, candidate) pair is in both")
    logs = sorted(abs(math.log(r)) for r, *_ in pairs)
    worst = max(pairs, key=lambda p: abs(math.log(p[0])))
    print(f"{len(pairs)} pairs; |log(verify / sweep)| median {statistics.median(logs):.4f}, "
          f"p90 {logs[int(0.9 * len(logs))]:.4f}; within 3%: {sum(v < 0.03 for v in logs) / len(logs):.3f}; "
          f"furthest: {worst[1]} {worst[2]} ratio {worst[0]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
