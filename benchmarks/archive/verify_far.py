"""Verify mode far from the records: which list its shortlist comes from and where its predicted-gain filter applies,
scored on sweeps of problems the model's records lack (CPU).

    python benchmarks/verify_far.py data/sweeps/h200-zoo-f32 data/sweeps/h200-layers data/sweeps/h200-mynet \
        [--layers data/layers/regnet_y_800mf-b64.csv ...]

Every candidate of these sweeps' problems was timed, so a problem's swept list stands in for cuDNN's live list of it
(what ``Executor._live_choices`` ranks on a GPU) and its records score what timing a shortlist would find: the
fastest of the shortlist and PyTorch's default, kept where it saves at least the least gain (20 us) and 3%
(``MIN_MEASURED_RATIO``), else the default. Problems the shipped model's records hold are left out. Rules compared,
each through the executor's own ``shortlist_to_time``:

- ``nearest list, filter everywhere``: the rule before ``far_from_records`` (every problem treated as near: the
  nearest recorded list, the predicted-gain filter, pruning);
- ``far rule (nearest list near)``: the rule after it (far problems: the live list of heuristic modes
  ``VERIFY_LIVE_MODES``, by the ranks the sweep recorded, pruned, no predicted-gain filter);
- ``executor``: the executor's rule (every problem: the live list, pruned, no predicted-gain filter), and
  ``executor, unpruned`` (every candidate of the model's top, also those predicted slower than the default).

Per rule: problems timed (each costs the cold first pass ~20-45 ms on the H200), live lists queried (a query of the
lists of modes A and FALLBACK costs a few ms, of all three 10-100 ms), and the summed time of the problems against
PyTorch's default's and the best's. With ``--layers`` (``algosel layers`` files), the same per network, each problem
weighted by its calls per step (float32 NCHW).
"""

from __future__ import annotations

import argparse
import collections
import math
from pathlib import Path

from standins import Unrecorded

from algosel.candidates import DEFAULT_ID
from algosel.problem import SHAPE_FIELDS, ConvProblem


class Near(Unrecorded):
    """The selector with every problem near its records: the rule before ``far_from_records``."""

    def records_distance(self, problem):
        return 0.0


def swept_problems(paths: list[str]) -> dict[ConvProblem, list[dict]]:
    """Every problem of the sweeps with its timed rows (PyTorch's default among them)."""
    from algosel.records.analysis import ok_rows
    from algosel.records.store import RecordsError, load_records

    try:
        frame, _ = load_records(*paths)
    except RecordsError as exc:
        raise SystemExit(f"verify_far: {exc}") from None
    out = {}
    for key, sub in ok_rows(frame).groupby("problem_key"):
        if DEFAULT_ID in set(sub.candidate_id):
            out[ConvProblem.from_key(key)] = sub.to_dict("records")
    return out


def listed(rows: list[dict], modes: tuple[str, ...] | None) -> list[dict]:
    """The rows of the heuristic ``modes``' lists (by the ranks the sweep recorded), with the candidates of other
    spaces (GEMM lowering, PyTorch's default), their ranks in the other modes' lists cleared; all of them as
    recorded where ``modes`` is None."""
    if modes is None:
        return rows
    out = []
    for r in rows:
        if r["space"] == "cudnn" and not any(r.get(f"rank_{m}", -1) >= 0 for m in modes):
            continue
        # as a live query of these modes only gives them: no rank in the lists not asked (the model's list-context
        # features read them)
        out.append({**r, **{f"rank_{m}": -1 for m in ("a", "b", "fallback") if m not in modes}})
    return out


def executors(sel, lists: dict[ConvProblem, list[dict]]) -> dict[str, tuple]:
    """Per rule: an executor whose live list of a problem is its swept list, ``shortlist_to_time``'s keywords, and
    the executor's settings it changes (``VERIFY_MAX_PREDICTED_RATIO_FAR``, ``VERIFY_LIVE_MODES``,
    ``VERIFY_WHOLE_LIST_MS``)."""
    from algosel.runtime.executor import Executor

    def make(selector):
        ex = Executor(selector=selector, verify=3, cache=False, native=False, live=True)
        ex._live_ok = lambda: True
        ex.live_queries = 0

        def live_choices(p, k, modes=None):
            ex.live_queries += 1
            return sel.rank_rows(p, listed(lists[p], modes), None)[:k]

        ex._live_choices = live_choices
        return ex

    ex = make(sel)
    filtered = {"gain_filter": True, "live": False, "prune": True}
    before = {"VERIFY_MAX_PREDICTED_RATIO_FAR": 1.0, "VERIFY_WHOLE_LIST_MS": math.inf}
    rules = {
        "nearest list, filter everywhere": (make(Near(sel)), lambda p: filtered, before),
        "far rule (nearest list near)": (
            ex, lambda p: {"prune": True} if ex.verifier.far_from_records(p) else filtered, before
        ),
        "executor": (ex, lambda p: {}, {}),
        "executor, unpruned": (ex, lambda p: {"prune": False}, {}),
    }
    for ratio in FAR_RATIOS:
        rules[f"executor, far pruned at {ratio:g}x"] = (ex, lambda p: {}, {"VERIFY_MAX_PREDICTED_RATIO_FAR": ratio})
    for modes in (("a",), ("a", "fallback"), ("a", "b", "fallback")):
        name = f"executor, live lists {'+'.join(m.upper() for m in modes)}"
        rules[name] = (ex, lambda p: {}, {"VERIFY_LIVE_MODES": modes})
    for ms in WHOLE_LIST_MS:
        rules[f"executor, whole list from {ms:g} ms"] = (ex, lambda p: {}, {"VERIFY_WHOLE_LIST_MS": ms})
    return rules


#: Pruning ratios far from the records, and default's times from which the rest of the list is timed, that
#: ``score`` compares with the executor's.
FAR_RATIOS = (1.0, 1.5, 2.0, 3.0, math.inf)
WHOLE_LIST_MS = (0.1, 0.25, 0.5, 1.0, math.inf)


def timing_cost_ms(times: dict[str, float], ids: list[str]) -> float:
    """Device time verify mode's timer spends on PyTorch's default and ``ids`` (in that order), by the recorded
    ``times``: per candidate one checked run, the warm-up estimate's two, and the repeats ``planned_repeats`` gives
    with verify mode's timer settings (``VERIFY_TIMER``). Candidates without a time (not built) cost nothing here;
    plan builds are counted apart."""
    from algosel.measure.timing import planned_repeats
    from algosel.runtime.executor import VERIFY_TIMER

    cost_ms, best_ms = 0.0, None
    for cid in [DEFAULT_ID, *ids]:
        t = times.get(cid)
        if t is None:
            continue
        cost_ms += t * (3 + planned_repeats(t, best_ms, **VERIFY_TIMER))
        best_ms = t if best_ms is None else min(best_ms, t)
    return cost_ms


def found_ms(times: dict[str, float], ids: list[str], min_gain_us: float) -> float:
    """What timing ``ids`` finds, by the recorded ``times``: the fastest of them where it pays the least gain and 3%,
    else the default (also where ``ids`` is empty: nothing timed)."""
    from algosel.runtime.executor import MIN_MEASURED_RATIO

    default_ms = times[DEFAULT_ID]
    timed = [times[c] for c in ids if c in times]
    best = min(timed, default=default_ms)
    pays = 1e3 * (default_ms - best) >= min_gain_us and default_ms >= MIN_MEASURED_RATIO * best
    return best if pays else default_ms


def score(sel, lists, weights: dict[ConvProblem, int] | None = None) -> list[str]:
    lines = []
    import algosel.runtime.executor as executor_mod

    for name, (ex, kw, settings) in executors(sel, lists).items():
        total = collections.Counter()
        timed = built = 0
        queried_before = ex.live_queries  # one executor serves several rules
        # each rule from a clean slate: the selector keeps the predicted times of the list it ranked last per
        # problem, which the rule before may have ranked from other lists
        for cache in (sel._times, sel._ranked_rows):
            cache.clear()
        saved = {k: getattr(executor_mod, k) for k in settings}
        for k, v in settings.items():
            setattr(executor_mod, k, v)
        try:
            for p, rows in lists.items():
                w = 1 if weights is None else weights.get(p, 0)
                if not w:
                    continue
                times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows}
                ids, _ = ex.shortlist_to_time(p, **kw(p))
                # as Executor._measure: the rest of the list after a long default (timed with the default again)
                rest = ex.verifier.rest_of_list_to_time(p, ids, times[DEFAULT_ID]) if ids else []
                timed += bool(ids)
                built += len(ids) + len(rest)
                total["default"] += w * times[DEFAULT_ID]
                total["best"] += w * min(times.values())
                total["found"] += w * found_ms(times, ids + rest, ex.min_gain_us)
                # once a problem, whatever its calls per step
                total["cost"] += (timing_cost_ms(times, ids) if ids else 0.0) + (
                    timing_cost_ms(times, rest) if rest else 0.0)  # fmt: skip
        finally:
            for k, v in saved.items():
                setattr(executor_mod, k, v)
        live = ex.live_queries - queried_before
        lines.append(f"  {name:36s} timed {timed:4d}  built {built:4d}  timing {total['cost'] / 1e3:6.2f} s  "
                     f"live lists {live:4d}  total / default {total['found'] / total['default']:.3f}"
                     f"  / best {total['found'] / total['best']:.3f}"
                     f"  (best / default {total['best'] / total['default']:.3f})")  # fmt: skip
    return lines


def layer_weights(path: str, lists) -> dict[ConvProblem, int]:
    """Calls per step of each swept float32 problem (every direction) of a layers file, in the layout the file
    recorded for the call (NCHW where it recorded none)."""
    from algosel.measure.layers import load_layers

    calls = collections.Counter()
    for row in load_layers(path).to_dict("records"):
        calls[(tuple(int(row[k]) for k in SHAPE_FIELDS), row["layout"] or "nchw")] += int(row["calls"])
    return {p: calls[(tuple(getattr(p, k) for k in SHAPE_FIELDS), p.layout)] for p in lists
            if p.dtype == "float32"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", help="record folders (algosel sweep --out)")
    ap.add_argument("--model", help="model directory (default: the shipped one)")
    ap.add_argument("--layers", action="append", default=[], help="a layers file: the same per network")
    every = ("let the model score every listed config (its manifest's shortlist_rank off), FALLBACK's alone too; "
             "by default it scores configs of mode A's or B's top shortlist_rank only")  # fmt: skip
    ap.add_argument("--score-every-listed", action="store_true", help=every)
    args = ap.parse_args(argv)
    from algosel.learn.models import load_default
    from algosel.learn.selector import Selector
    from algosel.runtime.executor import NEAR_RECORDS_DISTANCE

    sel = Selector.load(args.model) if args.model else load_default()
    if args.score_every_listed:
        sel.manifest["shortlist_rank"] = None  # on_shortlist: every candidate scored
    lists = {p: rows for p, rows in swept_problems(args.sweeps).items() if not sel.is_recorded(p)}
    far = sum(sel.records_distance(p) > NEAR_RECORDS_DISTANCE for p in lists)
    print(f"{len(lists)} problems the records lack ({far} far from them)")
    for line in score(sel, lists):
        print(line)
    for path in args.layers:
        print(f"{Path(path).stem}, weighted by calls per step:")
        for line in score(sel, lists, layer_weights(path, lists)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
