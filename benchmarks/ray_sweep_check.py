"""Does a sweep on Ray measure what the plain sweep measures? The GPU check of ``algosel sweep --ray``.

    python benchmarks/ray_sweep_check.py PLAIN RAY [--reference PLAIN2]

PLAIN and RAY are the record folders of the same cases swept by the plain sweep and by ``--ray`` on the same GPU
(docs/sweeper.md, "Sweeping on a Ray cluster", has the commands). Prints the cases and candidates each has, the
statuses that differ, and how the times compare (ratio RAY / PLAIN of ``time_ms_median`` per candidate measured ``ok``
in both, and of the best time per problem); exits 1 where the cases or candidates differ, or the times differ by more
than noise. Noise is what a second plain sweep (``--reference PLAIN2``) differs by from the first: RAY passes if its
geomean ratio and its 95th percentile of ``|log ratio|`` are within 1.5 times that reference's (plus 1%); without a
reference, if its geomean ratio is within 3% of 1.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from algosel.records import load_records

KEY = ["problem_key", "candidate_id"]


def spread(plain: pd.DataFrame, other: pd.DataFrame) -> dict[str, float]:
    """How the times of ``other`` compare with ``plain``'s (both indexed by :data:`KEY`): the geomean ratio and the
    95th percentile of ``|log ratio|`` per candidate, the share within 10%, and the geomean ratio of the best time
    per problem."""
    columns = ["status", "time_ms_median"]
    both = plain[columns].merge(other[columns], left_index=True, right_index=True, suffixes=("_plain", "_other"))
    ok = both[(both["status_plain"] == "ok") & (both["status_other"] == "ok")]
    log_ratio = np.log(ok["time_ms_median_other"] / ok["time_ms_median_plain"])
    best = ok.groupby(level="problem_key")[["time_ms_median_plain", "time_ms_median_other"]].min()
    return {
        "candidates": float(len(ok)),
        "geomean": float(np.exp(log_ratio.mean())) if len(ok) else float("nan"),
        "p95_abs_log": float(np.percentile(np.abs(log_ratio), 95)) if len(ok) else float("nan"),
        "within_10pct": float((np.abs(log_ratio) <= np.log(1.1)).mean()) if len(ok) else float("nan"),
        "best_geomean": float(np.exp(np.log(best["time_ms_median_other"] / best["time_ms_median_plain"]).mean()))
        if len(best) else float("nan"),
    }  # fmt: skip


def check(plain_dir: str, other_dir: str, reference_dir: str | None = None) -> tuple[bool, list[str]]:
    """``(passed, lines)``: the comparison of the module docstring, as printed."""
    plain = load_records(plain_dir)[0].set_index(KEY)
    other = load_records(other_dir)[0].set_index(KEY)
    lines, passed = [], True
    cases = (set(plain["case_key"]), set(other["case_key"]))
    lines.append(f"cases: {len(cases[0])} plain, {len(cases[1])} ray, {len(cases[0] ^ cases[1])} in one only")
    alone = plain.index.symmetric_difference(other.index)
    lines.append(f"candidates: {len(plain)} plain, {len(other)} ray, {len(alone)} in one only")
    if cases[0] != cases[1] or len(alone):
        passed = False
    both = plain.index.intersection(other.index)
    differ = plain.loc[both, "status"] != other.loc[both, "status"]
    lines.append(f"statuses that differ: {int(differ.sum())} of {len(both)}")
    got = spread(plain, other)
    lines.append("ray / plain: " + _line(got))
    if reference_dir is None:
        passed &= abs(np.log(got["geomean"])) <= np.log(1.03)
    else:
        noise = spread(plain, load_records(reference_dir)[0].set_index(KEY))
        lines.append("plain2 / plain (noise): " + _line(noise))
        passed &= abs(np.log(got["geomean"])) <= 1.5 * abs(np.log(noise["geomean"])) + 0.01
        passed &= got["p95_abs_log"] <= 1.5 * noise["p95_abs_log"] + 0.01
    lines.append("PASS" if passed else "FAIL")
    return bool(passed), lines


def _line(s: dict[str, float]) -> str:
    return (f"{s['candidates']:.0f} candidates ok in both, geomean {s['geomean']:.4f}, p95 |log ratio| "
            f"{s['p95_abs_log']:.4f}, {100 * s['within_10pct']:.1f}% within 10%, best per problem geomean "
            f"{s['best_geomean']:.4f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plain", help="records of the plain sweep")
    parser.add_argument("ray", help="records of the same cases swept with --ray")
    parser.add_argument("--reference", help="records of a second plain sweep of the cases (the noise)")
    args = parser.parse_args()
    passed, lines = check(args.plain, args.ray, args.reference)
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
