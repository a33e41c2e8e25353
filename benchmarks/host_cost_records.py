"""Host time per call by candidate, as the sweep's records measured it, against PyTorch's default (CPU).

    python benchmarks/host_cost_records.py [--data data/sweeps/h200] [--min-gain-us 20]

Every timed record carries ``host_overhead_us``: the host time of one call made while the stream was blocked (the
sweeper's timer). Per engine (cuDNN engine id, GEMM lowering): the distribution over its records of its host time
minus PyTorch's default's on the same problem. Then the switches the runtime's least gain allows on the recorded
problems (the fastest candidate saves >= ``--min-gain-us`` of device time a call) and how many of them take more
host time than PyTorch's default: a host-bound training step pays that extra in full (docs/hook.md), which is why
the executor adds it to the gain a switch must make (``executor.host_extra_us``).
"""

from __future__ import annotations

import argparse

import pandas as pd

from algosel.records.store import load_records


def host_extra(frame: pd.DataFrame) -> pd.DataFrame:
    """The timed rows with ``extra_us`` (host us over PyTorch's default on the same problem) and the default's
    time, for the problems where the default was timed."""
    ok = frame[frame["status"] == "ok"]
    default = ok[ok["candidate_id"] == "pytorch:default"].drop_duplicates("problem_key").set_index("problem_key")
    out = ok[ok["problem_key"].isin(default.index)].copy()
    out["default_ms"] = out["problem_key"].map(default["time_ms_median"])
    out["extra_us"] = out["host_overhead_us"] - out["problem_key"].map(default["host_overhead_us"])
    return out


def by_engine(rows: pd.DataFrame) -> pd.DataFrame:
    g = rows[rows["space"] != "pytorch"].groupby(["space", "engine_id"])["extra_us"]
    table = pd.DataFrame({"records": g.size(), "p25_us": g.quantile(0.25), "median_us": g.median(),
                          "p75_us": g.quantile(0.75), "p95_us": g.quantile(0.95)})  # fmt: skip
    return table.sort_values("median_us").round(1)


def switches(rows: pd.DataFrame, min_gain_us: float) -> pd.DataFrame:
    """Per problem, its fastest candidate where it saves >= ``min_gain_us`` of device time over the default."""
    best = rows.loc[rows.groupby("problem_key")["time_ms_median"].idxmin()]
    best = best[best["candidate_id"] != "pytorch:default"].copy()
    best["gain_us"] = 1e3 * (best["default_ms"] - best["time_ms_median"])
    return best[best["gain_us"] >= min_gain_us]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    p.add_argument("--min-gain-us", type=float, default=20.0)
    args = p.parse_args()
    try:
        frame, _ = load_records(*args.data)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    rows = host_extra(frame)
    pd.set_option("display.width", 160)
    print(f"host us per call over PyTorch's default, by engine ({len(rows)} timed records):")
    print(by_engine(rows).to_string())
    sw = switches(rows, args.min_gain_us)
    n = rows["problem_key"].nunique()
    print(f"\n{len(sw)} of {n} problems: the fastest candidate saves >= {args.min_gain_us:g} us of device time a call")
    for limit in (5, 10, 20):
        print(f"  of them, {int((sw['extra_us'] > limit).sum())} take > {limit} us more host time a call")
    print(f"  {int((sw['extra_us'] > sw['gain_us']).sum())} take more host time than the device time they save")
    kept = sw["gain_us"] >= args.min_gain_us + sw["extra_us"].clip(lower=0)
    saved, kept_saved = sw["gain_us"].sum(), sw.loc[kept, "gain_us"].sum()
    print(f"  with the extra added to the least gain: {int(kept.sum())} kept, "
          f"{100 * kept_saved / saved:.1f}% of their device time saved")  # fmt: skip


if __name__ == "__main__":
    main()
