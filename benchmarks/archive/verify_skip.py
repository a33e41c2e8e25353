"""Which problems verify mode needs to time: the predicted gain of its shortlist as a filter, scored on held-out
records (CPU).

    python benchmarks/verify_skip.py [--model models/h200-cudnn91900] [--factors 1.5,2,3] [--always-ms 0.05,0.1,0.2,inf]
    python benchmarks/verify_skip.py --layers data/layers/*.csv

Verify mode times the model's top ``--verify`` candidates and PyTorch's default on every new problem (about 0.1 s
of the cold first pass each, on the H200). For every held-out problem of the model's records, decided as if
unrecorded: the shortlist the executor would time, its predicted times, and its recorded times. What timing finds
is the recorded best of the shortlist against the default: a switch where it saves at least the least gain (20 us)
and 3% (``MIN_MEASURED_RATIO``). A filter that times a problem only where the model predicts the shortlist's best
to save at least ``least gain / factor``, or predicts PyTorch's default to take at least ``--always-ms`` (long
problems, where a gain the model does not see can be large), is scored by the share of problems it still times, the
share of the found device time per call it keeps and the switches it loses. Problems the executor never times
(a default predicted under ``least gain / VERIFY_SKIP_FACTOR``) are left out. The executor's rule is factor
``VERIFY_SKIP_FACTOR`` with ``VERIFY_ALWAYS_TIME_MS``.

Then, for the problems the filter times, the shortlist pruned to the candidates the model predicts within a ratio
of the default's time (``VERIFY_MAX_PREDICTED_RATIO``; each candidate's plan build costs more than its timing):
candidates timed per problem and the found device time kept.

With ``--layers``, for the distinct convolutions of each layers file (``algosel layers``) in float32 NCHW and float16
NHWC, all three directions: how many problems the records lack, how many verify mode timed before the filter, and
how many it times with it (what its cold first pass measures).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from standins import Unrecorded
from switch_rule import held_out_problems, training_catalogue

from algosel.candidates import DEFAULT_ID


def _shortlists(sel, problems, verify: int, min_gain_us: float, gain_filter: bool):
    """Per problem that verify mode would time (``gain_filter``: with its predicted-gain filter): the problem, its
    shortlist before pruning, PyTorch's default's recorded time, the predicted times of the shortlist and the
    default (what the executor's filter reads) and the shortlist's recorded times (None: not timed there)."""
    from algosel.runtime import executor as ex_mod

    ex = ex_mod.Executor(selector=Unrecorded(sel, training_catalogue(sel)), cache=False, native=False,
                         min_gain_us=min_gain_us, live=False, verify=verify)  # fmt: skip
    for p in problems:
        default_ms = sel.catalogue.time_ms(p.key, DEFAULT_ID)
        ids, _ = ex.shortlist_to_time(p, gain_filter=gain_filter, prune=False)
        if default_ms is None or not ids:
            continue
        predicted = sel.predicted_time_ms(p, [*ids, DEFAULT_ID])
        yield p, ids, default_ms, predicted, {c: sel.catalogue.time_ms(p.key, c) for c in ids}


def shortlist_rows(sel, problems, verify: int, min_gain_us: float) -> list[dict]:
    """Per problem that verify mode would time today: the predicted and the found (recorded) gain, us per call."""
    from algosel.runtime import executor as ex_mod

    rows = []
    for p, ids, default_ms, predicted, recorded in _shortlists(sel, problems, verify, min_gain_us, False):
        best = min((t for t in recorded.values() if t is not None), default=math.inf)
        found_us = 1e3 * (default_ms - best) if best < default_ms / ex_mod.MIN_MEASURED_RATIO else 0.0
        rows.append({"problem": p.key, "predicted_default_ms": predicted[DEFAULT_ID],
                     "predicted_gain_us": 1e3 * (predicted[DEFAULT_ID] - min(predicted[c] for c in ids)),
                     "found_gain_us": found_us if found_us >= min_gain_us else 0.0})  # fmt: skip
    return rows


def layers_table(sel, paths, verify: int) -> str:
    """Markdown: per layers file and (dtype, layout), the problems verify mode times with and without the filter."""
    from algosel.measure.layers import layers_problems, load_layers
    from algosel.runtime import executor as ex_mod

    ex = ex_mod.Executor(selector=sel, cache=False, native=False, live=False, verify=verify)
    lines = ["| layers | dtype, layout | problems the records lack | timed before the filter | timed with it |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for path in paths:
        frame = load_layers(path)
        for dtype, layout in (("float32", "nchw"), ("float16", "nhwc")):
            new = before = after = 0
            for problem in layers_problems(frame, dtype, layout):
                for q in problem.directions():
                    if sel.is_recorded(q):
                        continue
                    new += 1
                    ids, _ = ex.shortlist_to_time(q, gain_filter=False)
                    if ids:
                        before += 1
                        # empty where the filter says not worth it
                        after += bool(ex.shortlist_to_time(q, gain_filter=True, prune=True)[0])
            lines.append(f"| {Path(path).stem} | {dtype}, {layout} | {new} | {before} | {after} |")
    return "\n".join(lines)


def prune_rows(sel, problems, verify: int, min_gain_us: float = 20.0) -> list[dict]:
    """Per problem verify mode times with its filter: the shortlist before pruning, its predicted and recorded
    times, and PyTorch's default's recorded time."""
    timed = _shortlists(sel, problems, verify, min_gain_us, True)
    return [{"ids": ids, "default_ms": default_ms, "predicted": predicted, "recorded": recorded}
            for _, ids, default_ms, predicted, recorded in timed]  # fmt: skip


def prune_score(rows: list[dict], ratio: float, min_gain_us: float) -> dict:
    """Candidates timed per problem and the device time per call timing finds (switches saving >= the least gain
    and 3%) where the shortlist keeps only candidates predicted within ``ratio`` of the default."""
    from algosel.runtime import executor as ex_mod

    candidates, found, switches = 0, 0.0, 0
    for r in rows:
        kept = ex_mod.pruned_shortlist(r["ids"], r["predicted"], ratio)
        candidates += len(kept)
        best = min((r["recorded"][c] for c in kept if r["recorded"][c] is not None), default=math.inf)
        gain_us = 1e3 * (r["default_ms"] - best) if best < r["default_ms"] / ex_mod.MIN_MEASURED_RATIO else 0.0
        if gain_us >= min_gain_us:
            found, switches = found + gain_us, switches + 1
    return {"ratio": ratio, "per_problem": candidates / max(1, len(rows)), "found_us": found, "switches": switches}


def score(rows: list[dict], factor: float, always_ms: float, min_gain_us: float) -> dict:
    def timed(r):
        return r["predicted_gain_us"] * factor >= min_gain_us or r["predicted_default_ms"] >= always_ms

    kept = [r for r in rows if timed(r)]
    found = sum(r["found_gain_us"] for r in rows)
    lost = [r for r in rows if r["found_gain_us"] > 0 and not timed(r)]
    return {"factor": factor, "always_ms": always_ms, "timed": len(kept) / len(rows),
            "gain_kept": sum(r["found_gain_us"] for r in kept) / found if found else 1.0,
            "switches_lost": len(lost), "switches": sum(r["found_gain_us"] > 0 for r in rows),
            "largest_lost_us": max((r["found_gain_us"] for r in lost), default=0.0)}  # fmt: skip


def main() -> None:
    from algosel.learn.models import load_default
    from algosel.learn.selector import Selector
    from algosel.runtime import executor as ex_mod

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None)
    p.add_argument("--factors", default="1.5,2,3")
    p.add_argument("--always-ms", default="0.05,0.1,0.2,inf")
    p.add_argument("--verify", type=int, default=3)
    p.add_argument("--min-gain-us", type=float, default=20.0)
    p.add_argument("--layers", nargs="+", default=None, help="layers files: what verify mode times on them")
    p.add_argument(
        "--prune-ratios",
        default="inf,1.5,1.2,1,0.9",
        help="shortlists pruned to candidates predicted within these ratios of the default",
    )
    args = p.parse_args()
    try:
        sel = Selector.load(args.model) if args.model else load_default()
        factors = [float(x) for x in args.factors.split(",")]
        ratios = [float(x) for x in args.prune_ratios.split(",")]
        always = [float(x) for x in args.always_ms.split(",")]
    except (OSError, ValueError) as exc:  # SelectorError is a ValueError: one line, not a traceback
        p.error(str(exc))
    torch.set_num_threads(1)
    if args.layers:
        try:
            print(layers_table(sel, args.layers, args.verify))
        except (OSError, ValueError) as exc:
            p.error(str(exc))
        return
    rows = shortlist_rows(sel, held_out_problems(sel), args.verify, args.min_gain_us)
    print(f"{len(rows)} held-out problems verify mode times today (top {args.verify}, least gain "
          f"{args.min_gain_us:g} us)")  # fmt: skip
    print("| factor | always timed from (predicted default) | problems timed | found gain kept | switches lost "
          "| largest lost gain us |\n| --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for f in factors:
        for a in always:
            s = score(rows, f, a, args.min_gain_us)
            print(f"| {f:g} | {a:g} ms | {100 * s['timed']:.1f}% | {100 * s['gain_kept']:.2f}% | "
                  f"{s['switches_lost']} of {s['switches']} | {s['largest_lost_us']:.0f} |")  # fmt: skip
    pruned = prune_rows(sel, held_out_problems(sel), args.verify, args.min_gain_us)
    whole = prune_score(pruned, math.inf, args.min_gain_us)
    print(f"\nThe {len(pruned)} problems timed with the filter, their shortlists pruned to candidates predicted "
          f"within a ratio of the default (the first always kept; the runtime's: "
          f"{ex_mod.VERIFY_MAX_PREDICTED_RATIO:g}):")  # fmt: skip
    print("| within x default | candidates timed a problem | found gain kept | switches |\n| --- | --- | --- | --- |")
    for ratio in ratios:
        s = prune_score(pruned, ratio, args.min_gain_us)
        kept = s["found_us"] / whole["found_us"] if whole["found_us"] else 1.0
        print(f"| {ratio:g} | {s['per_problem']:.2f} | {100 * kept:.1f}% | {s['switches']} of {whole['switches']} |")


if __name__ == "__main__":
    main()
