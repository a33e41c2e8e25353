"""How the runtime's prediction mode decides on problems it has no record of, scored on held-out records (CPU).

    python benchmarks/switch_rule.py [--model models/h200-cudnn91900] [--margins 1.0,1.05,1.15,1.3,1.5]
    python benchmarks/switch_rule.py --margins 1.5 --min-gains-us 2,10,20,30,50
    python benchmarks/switch_rule.py --margins 1.5 --min-gains-us 20 --far-margins 1.5,2,2.5,3,4,inf
    python benchmarks/switch_rule.py --records data/sweeps/h200-mynet --margins 1.5 --far-margins 1.5,3
    python benchmarks/switch_rule.py --margins 1.5 --nearest-first

For every held-out problem of the model's records (the shapes its ranker and time model never trained on), the
executor decides as it would for a problem it has no record of: the model's top 3 from the problem's candidate
list, judged by their predicted times against PyTorch's default's with a margin (``MIN_PREDICTED_RATIO``) and the
least gain per call (``min_gain_us``; the compiled path's host cost, which is nothing measurable, is taken as 0),
and with the larger margin ``MIN_PREDICTED_RATIO_FAR`` (``--far-margins``) where the problem lies farther than
``NEAR_RECORDS_DISTANCE`` from the training shapes' problems (the held-out ones are not counted: each is at
distance 0 from itself). The decision is then scored by the recorded times: what the step would cost against
passing through.

Prints, per margin: the share of problems switched, the geomean and the total of (time of the decision / PyTorch's
default) over all problems, the share made slower than the default by more than 1% and 5%, and the geomean of the
switched problems alone. The margin the runtime ships is the one where the total time gains most without making
problems slower (the docs quote this table).

With ``--nearest-first``, each rule is also scored with the lists the runtime ranks now: the nearest training
problem's list, and the problem's own (standing in for cuDNN's live list, whose query costs ~50 ms a problem) only
where that predicts a gain worth a look (``executor.worth_a_closer_look``); "own lists ranked" is the share of
problems that needed it.

With ``--records DIR``, the problems are those of a dataset the model did not train on (e.g. a sweep of one's own
network), decided as the runtime decides problems its records lack, with distances to the model's records, and
scored by that dataset's times.

With several least gains (``--min-gains-us``), each is scored at each margin, and a second table gives, over every
recorded problem, the share of the device time the best candidates save over PyTorch's default that switches
saving at least that much per call keep, and the share of problems they switch: a higher floor switches far fewer
convolutions (each switch costs a host-bound step more than the micro-benchmarks show: docs/hook.md) for little of
the device time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from standins import NearestListed, Unrecorded

from algosel.candidates import DEFAULT_ID
from algosel.records.analysis import geomean


def held_out_problems(sel) -> list:
    from algosel.learn.evaluate import is_test_shape
    from algosel.problem import ConvProblem

    keys = sorted(sel.catalogue.frame["problem_key"].unique())
    problems = [ConvProblem.from_key(k) for k in keys]
    test = is_test_shape([p.shape_key for p in problems])
    return [p for p, t in zip(problems, test) if t]


def training_catalogue(sel):
    """The catalogue of the training shapes' problems alone (what a held-out problem's distance is taken to)."""
    from algosel.learn.evaluate import is_test_shape
    from algosel.problem import ConvProblem
    from algosel.records.catalogue import Catalogue

    frame = sel.catalogue.frame
    keys = frame["problem_key"].unique()
    test = dict(zip(keys, is_test_shape([ConvProblem.from_key(k).shape_key for k in keys])))
    return Catalogue(frame[~frame["problem_key"].map(test)])


def score(sel, problems, margin: float, min_gain_us: float, far_margin: float | None = None, reference=None,
          scored=None, nearest_first: bool = False) -> dict:  # fmt: skip
    """The decisions on ``problems`` scored by their records (``far_margin``: default ``MIN_PREDICTED_RATIO_FAR``;
    ``reference``: the catalogue distances are taken to, default the model's; ``scored``: the catalogue whose times
    score them, default the model's). Each problem's candidates are its own recorded list (cuDNN's live list, as the
    runtime ranked it for every problem before), or with ``nearest_first`` as the runtime ranks them now: the
    ``reference``'s nearest problem's list, and the problem's own only where that predicts a gain worth a look."""
    scored = scored or sel.catalogue
    from algosel.runtime import executor as ex_mod

    ex_mod.MIN_PREDICTED_RATIO = margin
    if far_margin is not None:
        ex_mod.MIN_PREDICTED_RATIO_FAR = far_margin
    stand_in = NearestListed(sel, reference) if nearest_first else Unrecorded(sel, reference)
    ex = ex_mod.Executor(selector=stand_in, cache=False, native=False, min_gain_us=min_gain_us,
                         live=nearest_first)  # fmt: skip
    ex.overhead_us = lambda problem, candidate_id: 0.0  # the compiled path (docs/hook.md: -1.8 to +0.9 us)
    if nearest_first:
        ex._live_choices = lambda problem, k: stand_in.own_choices(problem, k, ex.max_workspace_bytes)
    # The live list is ranked only where a GPU is (a device object: nothing here runs on one).
    device = torch.device("cuda" if nearest_first else "cpu")
    ratios, switched, picked_total, default_total, slower1, slower5 = [], [], 0.0, 0.0, 0, 0
    for p in problems:
        default_ms = scored.time_ms(p.key, DEFAULT_ID)
        if default_ms is None:
            continue
        d = ex._decide(p, device)
        t = scored.time_ms(p.key, d.candidate_id) if d.candidate_id != DEFAULT_ID else default_ms
        if t is None:
            continue
        r = t / default_ms
        ratios.append(r)
        picked_total += t
        default_total += default_ms
        slower1 += r > 1.01
        slower5 += r > 1.05
        if d.candidate_id != DEFAULT_ID:
            switched.append(r)
    n = len(ratios)
    return {"margin": margin, "far_margin": ex_mod.MIN_PREDICTED_RATIO_FAR, "problems": n,
            "switched": len(switched) / n, "geomean_vs_default": geomean(ratios),
            "total_vs_default": picked_total / default_total, "slower_1pct": slower1 / n,
            "slower_5pct": slower5 / n, "geomean_of_switched": geomean(switched),
            "own_lists_ranked": getattr(stand_in, "queried", len(problems)) / max(1, len(problems))}  # fmt: skip


def savings_kept(sel, min_gain_us: float) -> dict:
    """Over every recorded problem: the share of (default - best) device time kept by switching only where the
    recorded best saves at least ``min_gain_us`` per call, and the share of problems then switched."""
    frame = sel.catalogue.frame
    ok = frame[frame["status"] == "ok"]
    best = ok.groupby("problem_key")["time_ms_median"].min()
    default = ok[ok["candidate_id"] == DEFAULT_ID].set_index("problem_key")["time_ms_median"]
    gain_us = (1e3 * (default - best.reindex(default.index))).dropna().clip(lower=0.0)
    kept = (gain_us >= min_gain_us) & (gain_us > 0)  # where PyTorch's default is the best, nothing switches
    return {"problems": len(gain_us), "savings_kept": float(gain_us[kept].sum() / gain_us.sum()),
            "switched": float(kept.mean())}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a model directory (default: the shipped model)")
    p.add_argument("--margins", default="1.0,1.05,1.1,1.15,1.3,1.5,2.0")
    p.add_argument("--min-gains-us", default="20", help="least device time saved per call, us (comma-separated)")
    p.add_argument("--records", default=None, help="score on this dataset's problems instead of the held-out ones")
    p.add_argument("--far-margins", default=None,
                   help="margins where a problem lies far from the records (comma-separated; inf: never switch "
                        "there; default: the runtime's)")  # fmt: skip
    p.add_argument("--nearest-first", action="store_true",
                   help="also score each rule with the runtime's lists: the nearest training problem's, the "
                        "problem's own (cuDNN's live list) only where that predicts a gain worth a look")  # fmt: skip
    args = p.parse_args()
    if args.nearest_first and args.records:
        p.error("--nearest-first scores held-out problems (their own lists are in the records), not --records")
    from algosel.learn.models import load_default
    from algosel.learn.selector import Selector

    warnings.simplefilter("ignore")  # the model's coverage warnings: every problem here is inside its records
    sel = Selector.load(args.model) if args.model else load_default()
    if sel.time_model is None:
        raise SystemExit(f"{args.model or 'the shipped model'} has no time model: prediction mode passes through")
    if args.records:
        from algosel.problem import ConvProblem
        from algosel.records.catalogue import Catalogue
        from algosel.records.store import load_records

        scored = Catalogue.from_records(load_records(args.records)[0])
        problems, reference = [ConvProblem.from_key(k) for k in sorted(scored.frame["problem_key"].unique())], None
        print(f"{args.records}: {len(problems)} problems, decided as the runtime decides problems its records lack")
    else:
        problems, reference, scored = held_out_problems(sel), training_catalogue(sel), None
        print(f"{len(problems)} held-out problems, decided as if unrecorded")
    floors = [float(v) for v in args.min_gains_us.split(",")]
    fars = [float(v) for v in args.far_margins.split(",")] if args.far_margins else [None]
    print("| margin | far margin | min gain us | lists | own lists ranked | switched | geomean x default | "
          "total x default | slower > 1% | slower > 5% | switched: geomean |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in map(float, args.margins.split(",")):
        for far in fars:
            for floor in floors:
                for nearest_first in (False, True) if args.nearest_first else (False,):
                    t0 = time.perf_counter()
                    r = score(sel, problems, m, floor, far, reference, scored, nearest_first)
                    lists = "nearest, own where worth a look" if nearest_first else "own"
                    print(f"| {m:.2f} | {r['far_margin']:g} | {floor:g} | {lists} | {r['own_lists_ranked']:.1%} | "
                          f"{r['switched']:.1%} | {r['geomean_vs_default']:.3f} | {r['total_vs_default']:.3f} | "
                          f"{r['slower_1pct']:.1%} | {r['slower_5pct']:.1%} | {r['geomean_of_switched']:.3f} |  "
                          f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    if len(floors) > 1:
        print("\n| min gain us | recorded savings kept | recorded problems switched |\n| --- | --- | --- |")
        for floor in floors:
            k = savings_kept(sel, floor)
            print(f"| {floor:g} | {k['savings_kept']:.1%} | {k['switched']:.1%} |")


if __name__ == "__main__":
    main()
