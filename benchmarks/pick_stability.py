"""Does a layer's fastest candidate stay the fastest at its other input sizes? (CPU, the records, about a minute)

    python benchmarks/pick_stability.py [--data D ...] [--near 1.35]

A layer is a problem without its batch and input size (channels, kernel, padding, stride, dilation, groups, dtype,
layout, direction). For every pair of recorded problems of one layer (A, B), the candidate fastest on A is timed on
B against B's fastest and B's PyTorch default: all pairs, then *near* pairs (the same batch, height and width within
``--near`` times each other: the sizes of multi-scale training). Split by what A's pick was: PyTorch's default
(would "the default is fastest here" carry to B?), or a switch that beat the default by 3% or more on A (would the
switch carry?). This is the measurement behind whether the runtime may carry a layer's decision across its input
sizes (docs/results/2026-12-06-gpu-bound-zoo-h100.md).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.records import load_records

H200 = [f"data/sweeps/h200{s}" for s in ("", "-nhwc", "-layers", "-zoo-f32", "-zoo-nhwc", "-loss")]
LAYER = ["c", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups", "dtype",
         "layout", "direction"]  # fmt: skip
DEFAULT = DEFAULT_ID


def pairs(frame: pd.DataFrame, near: float | None) -> pd.DataFrame:
    """One row per (A, B) pair of problems of one layer: A's pick, its time on B over B's best and over B's default,
    and A's own default over A's pick."""
    ok = frame[(frame["status"] == "ok") & np.isfinite(frame["time_ms_median"])]
    times = ok.pivot_table(index="problem_key", columns="candidate_id", values="time_ms_median", aggfunc="min")
    first = ok.drop_duplicates("problem_key").set_index("problem_key")
    info = first[[*LAYER, "n", "h", "w"]].copy()
    info["pick"] = times.idxmin(axis=1)
    info["best_ms"] = times.min(axis=1)
    info["default_ms"] = times[DEFAULT] if DEFAULT in times else np.nan
    info["layer"] = info[LAYER].astype(str).agg("_".join, axis=1)
    rows = []
    for _, group in info.groupby("layer"):
        if len(group) < 2:
            continue
        for a, pa in group.iterrows():
            for b, pb in group.iterrows():
                if a == b:
                    continue
                if near is not None and (pa.n != pb.n or max(pa.h, pb.h) > near * min(pa.h, pb.h)
                                         or max(pa.w, pb.w) > near * min(pa.w, pb.w)):  # fmt: skip
                    continue
                t = times.at[b, pa.pick] if pa.pick in times.columns else np.nan
                rows.append({"a_pick_is_default": pa.pick == DEFAULT,
                             "a_gain": pa.default_ms / pa.best_ms,
                             "over_best": t / pb.best_ms if np.isfinite(t) else np.inf,
                             "over_default": t / pb.default_ms if np.isfinite(t) else np.inf,
                             "b_default_over_best": pb.default_ms / pb.best_ms})  # fmt: skip
    return pd.DataFrame(rows)


def describe(p: pd.DataFrame, label: str) -> list[str]:
    if p.empty:
        return [f"{label}: no pairs"]
    over_best = p["over_best"]
    finite = over_best[np.isfinite(over_best)]
    lines = [
        f"{label}: {len(p):,} pairs; A's pick on B within 3% of B's best {np.mean(over_best <= 1.03):.3f}, "
        f"within 10% {np.mean(over_best <= 1.10):.3f}, failed or unrecorded {np.mean(~np.isfinite(over_best)):.3f}, "
        f"geomean over best {np.exp(np.mean(np.log(finite))):.4f}"
    ]
    d = p[p["a_pick_is_default"]]
    within = np.mean(d["b_default_over_best"] <= 1.03)
    lines.append(f"  A's pick the default ({len(d):,}): the default within 3% of B's best {within:.3f}")
    s = p[~p["a_pick_is_default"] & (p["a_gain"] >= 1.03)]
    over_default = s["over_default"]
    fin = over_default[np.isfinite(over_default)]
    lines.append(
        f"  A's pick a switch 3% or more faster than A's default ({len(s):,}): on B slower than B's default "
        f"{np.mean(over_default > 1.0):.3f}, 3% or more faster {np.mean(over_default <= 1 / 1.03):.3f}, "
        f"geomean over the default {np.exp(np.mean(np.log(fin))):.3f}"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=H200)
    parser.add_argument("--near", type=float, default=1.35, help="near pairs: h and w within this ratio, same batch")
    args = parser.parse_args()
    frame, _ = load_records(*args.data)
    print("\n".join(describe(pairs(frame, None), "all sizes")))
    print("\n".join(describe(pairs(frame, args.near), f"near sizes (same batch, h and w within {args.near:g}x)")))


if __name__ == "__main__":
    main()
