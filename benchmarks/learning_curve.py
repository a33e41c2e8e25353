"""The learning curve: held-out score against the number of training shapes (CPU).

    python benchmarks/learning_curve.py [--data DIR ...] [--params-from models/joint-h100-h200-cudnn91900]
        [--shares 0.125,0.25,0.5,1] [--seeds 0,1,2,3,4] [--threads 2] [--out F.json]

For each share and seed, a random subset of that share of the training shapes (drawn by the seed; share 1 is all of
them, one fit per seed) trains the ranker with ``--params-from``'s hyperparameters (its LightGBM seed the same seed),
which picks on the fixed held-out shapes (:func:`algosel.learn.evaluate.is_test_shape`). Prints per share the
training shapes and the mean over seeds of the held-out geomean of best, share within 5% and total-time ratio, on
every held-out problem and on those a training step runs (:mod:`algosel.measure.steps`). How much more data of the
same kind would buy is read off it (docs/selector.md, "How far more data goes").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

DATA = ["data/sweeps/h200", "data/sweeps/h200-nhwc", "data/sweeps/h200-layers", "data/sweeps/h200-zoo-f32",
        "data/sweeps/h200-zoo-nhwc", "data/sweeps/h200-loss"]  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=DATA)
    p.add_argument("--params-from", default="models/joint-h100-h200-cudnn91900")
    p.add_argument("--shares", default="0.125,0.25,0.5,1")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def shares_and_seeds(args: argparse.Namespace) -> tuple[list[float], list[int]] | None:
    """``--shares`` and ``--seeds`` as numbers; None (after a line on stderr) where they are not."""
    try:
        shares = [float(s) for s in args.shares.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print("learning_curve.py: --shares and --seeds take comma-separated numbers", file=sys.stderr)
        return None
    if not all(0 < s <= 1 for s in shares):
        print(f"learning_curve.py: --shares {args.shares!r}: each share must be in (0, 1]", file=sys.stderr)
        return None
    return shares, seeds


def held_out_split(data: list[str]):
    """The records of the main environment of ``data``, their training rows and their held-out rows."""
    from algosel.learn.evaluate import Prepared, is_test_shape  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    frame, envs = load_records(*data)
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test_mask = is_test_shape(prep.shape)
    return frame, prep.rows(~test_mask), prep.rows(test_mask)


def fit_and_score(frame, train, test, never, params, chosen) -> tuple[dict, dict]:
    """The held-out summaries (every problem, those a training step runs) of a fit on the ``chosen`` shapes."""
    import numpy as np  # noqa: PLC0415

    from algosel.learn.evaluate import mark_runs, pick_times, selector_table, summary  # noqa: PLC0415
    from algosel.learn.ranker import Ranker  # noqa: PLC0415

    part = train.rows(np.isin(train.shape, chosen))
    ranker = Ranker(params).fit_prepared(part.data, part.X)
    table = mark_runs(selector_table(frame, pick_times(test.data, ranker.score(test.X))), never)
    return summary(table), summary(table[table["runs"]])


def curve_rows(args: argparse.Namespace, shares: list[float], seeds: list[int]) -> list[dict]:
    """One row per share and seed: the training shapes and the held-out scores of the fit on them."""
    import numpy as np  # noqa: PLC0415

    from algosel.learn.artifact import tuned_params  # noqa: PLC0415
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.measure.steps import no_input_grad_shapes  # noqa: PLC0415
    from algosel.measure.suites import load_suites  # noqa: PLC0415

    base = tuned_params(args.params_from, RankerParams(num_threads=args.threads))
    frame, train, test = held_out_split(args.data)
    never = no_input_grad_shapes([load_suites()])
    shapes = np.unique(train.shape)
    rows = []
    for share in shares:
        for seed in seeds if share < 1 else seeds[:1]:
            chosen = np.random.default_rng(seed).choice(shapes, size=max(1, round(share * len(shapes))), replace=False)
            every, runs = fit_and_score(frame, train, test, never, replace(base, seed=seed), chosen)
            rows.append({"share": share, "seed": seed, "train_shapes": int(len(chosen)),
                         **{f"held_out_{k}": v for k, v in every.items()},
                         **{f"held_out_run_{k}": v for k, v in runs.items()}})  # fmt: skip
            print(f"share {share} seed {seed}: {len(chosen)} shapes, held-out {every['geomean']:.4f}, "
                  f"runs {runs['geomean']:.4f}", file=sys.stderr, flush=True)  # fmt: skip
    return rows


def print_table(rows: list[dict], shares: list[float]) -> None:
    """Per share: its training shapes, its seeds and the means over seeds of the held-out scores."""
    print(f"{'share':>6} {'shapes':>6} {'seeds':>5} | {'geomean':>7} {'within5':>7} {'total':>7} | "
          f"{'runs: geo':>9} {'within5':>7} {'total':>7}")  # fmt: skip
    for share in shares:
        mine = [r for r in rows if r["share"] == share]

        def mean(key: str, mine: list[dict] = mine) -> float:
            return statistics.fmean(r[key] for r in mine)

        print(f"{share:>6} {mine[0]['train_shapes']:>6} {len(mine):>5} | {mean('held_out_geomean'):>7.4f} "
              f"{mean('held_out_within_5pct'):>7.1%} {mean('held_out_total_time_ratio'):>7.4f} | "
              f"{mean('held_out_run_geomean'):>9.4f} {mean('held_out_run_within_5pct'):>7.1%} "
              f"{mean('held_out_run_total_time_ratio'):>7.4f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    numbers = shares_and_seeds(args)
    if numbers is None:
        return 2
    shares, seeds = numbers
    rows = curve_rows(args, shares, seeds)
    print_table(rows, shares)
    if args.out:
        Path(args.out).write_text(json.dumps({"data": args.data, "params_from": args.params_from, "rows": rows},
                                             indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
