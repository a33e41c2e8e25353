"""Host time per call by candidate, as the sweep's records measured it, against PyTorch's default (CPU).

    python benchmarks/host_cost_records.py [--data data/sweeps/h200] [--min-gain-us 20]
    python benchmarks/host_cost_records.py --transfer [--model models/h200-cudnn91900]

Every timed record carries ``host_overhead_us``: the host time of one call made while the stream was blocked (the
sweeper's timer). Per engine (cuDNN engine id, GEMM lowering): the distribution over its records of its host time
minus PyTorch's default's on the same problem. Then the switches the runtime's least gain allows on the recorded
problems (the fastest candidate saves >= ``--min-gain-us`` of device time a call) and how many of them take more
host time than PyTorch's default: a host-bound training step pays that extra in full (docs/hook.md), which is why
the executor adds it to the gain a switch must make (``executor.host_extra_us``).

``--transfer``: how well a problem the records lack can borrow it. For every candidate of the model's held-out
problems, the extra its nearest training problem records (what ``Selector.host_us`` reads for an unrecorded
problem) and its engine's median extra over the training problems, against its own: the absolute error of the
charged extra (negative extras charge nothing), and how many of the candidates that take > 20 us more are charged
> 10 us by each.
"""

from __future__ import annotations

import argparse

import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.records.store import load_records


def host_extra(frame: pd.DataFrame) -> pd.DataFrame:
    """The timed rows with ``extra_us`` (host us over PyTorch's default on the same problem) and the default's
    time, for the problems where the default was timed."""
    ok = frame[frame["status"] == "ok"]
    default = ok[ok["candidate_id"] == DEFAULT_ID].drop_duplicates("problem_key").set_index("problem_key")
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
    best = best[best["candidate_id"] != DEFAULT_ID].copy()
    best["gain_us"] = 1e3 * (best["default_ms"] - best["time_ms_median"])
    return best[best["gain_us"] >= min_gain_us]


def transfer(sel) -> dict:
    """The nearest training problem's host extra, and the engine's median, as estimates of a held-out one's."""
    import numpy as np
    from switch_rule import held_out_problems, training_catalogue

    from algosel.runtime.executor import host_extra_us

    train = training_catalogue(sel)
    rows = host_extra(train.frame)
    rows = rows.assign(engine=rows["space"] + ":" + rows["engine_id"].astype(str))
    engine_median = rows.groupby("engine")["extra_us"].median()
    near_err, engine_err, large, near_hit, engine_hit = [], [], 0, 0, 0
    for p in held_out_problems(sel):
        own = {r["candidate_id"]: r for r in sel.catalogue.rows(p.key) or () if r["status"] == "ok"}
        nearest = train.nearest(p)
        if DEFAULT_ID not in own or nearest is None:
            continue
        borrowed = train.host_us(nearest, list(own))
        for c, r in own.items():
            if c == DEFAULT_ID or c not in borrowed or DEFAULT_ID not in borrowed:
                continue
            true = r["host_overhead_us"] - own[DEFAULT_ID]["host_overhead_us"]
            near = borrowed[c] - borrowed[DEFAULT_ID]
            engine = engine_median.get(f"{r['space']}:{r['engine_id']}", np.nan)
            if np.isnan(true) or np.isnan(near) or np.isnan(engine):
                continue
            charged = host_extra_us(borrowed, c)  # what the executor charges
            own_extra = max(true, 0.0)
            near_err.append(abs(charged - own_extra))
            engine_err.append(abs(max(engine, 0.0) - own_extra))
            if true > 20:
                large += 1
                near_hit += charged > 10
                engine_hit += engine > 10
    return {"candidates": len(near_err), "nearest_median_abs_err_us": float(np.median(near_err)),
            "engine_median_abs_err_us": float(np.median(engine_err)), "taking_20us_more": large,
            "charged_10us_by_nearest": near_hit, "charged_10us_by_engine_median": engine_hit}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    p.add_argument("--min-gain-us", type=float, default=20.0)
    p.add_argument("--transfer", action="store_true", help="score the nearest problem's host times (held-out)")
    p.add_argument("--model", default=None, help="with --transfer: a model directory (default: the shipped one)")
    args = p.parse_args()
    if args.transfer:
        from algosel.learn.models import load_default
        from algosel.learn.selector import Selector

        try:
            sel = Selector.load(args.model) if args.model else load_default()
        except (OSError, ValueError) as exc:
            p.error(str(exc))
        t = transfer(sel)
        print(f"{t['candidates']} candidates of held-out problems: |charged - own| host extra, median "
              f"{t['nearest_median_abs_err_us']:.1f} us from the nearest training problem, "
              f"{t['engine_median_abs_err_us']:.1f} us from the engine's median; of the {t['taking_20us_more']} "
              f"taking > 20 us more, {t['charged_10us_by_nearest']} are charged > 10 us by the nearest problem, "
              f"{t['charged_10us_by_engine_median']} by the engine's median")  # fmt: skip
        return
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
