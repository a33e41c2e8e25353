"""Ranker settings side by side, over several seeds: cross-validated and on the held-out shapes (CPU).

    python benchmarks/ranker_settings.py [--data D ...] [--params-from models/joint-h100-h200-cudnn91900]
        [--setting NAME=JSON ...] [--seeds 0,1,2] [--folds 3] [--threads 2] [--out results.json]

A ranker setting whose gain is smaller than the scatter between seeds is not a gain. This fits the ranker with
``--params-from``'s hyperparameters changed by each ``--setting`` (JSON of :class:`algosel.learn.ranker
.RankerParams` fields, e.g. ``lr0.1='{"learning_rate": 0.1}'``; ``base`` is always included, unchanged), once per
seed, and scores each fit two ways on the records of ``--data``:

- ``cv``: out of fold on the training shapes (``--folds`` folds grouped by shape, as ``algosel train`` tunes);
- ``held-out``: fitted on every training shape and scored on the fixed held-out test shapes
  (:func:`algosel.learn.evaluate.is_test_shape`), as ``algosel evaluate`` scores the shipped model.

With ``--split direction``, each setting is fitted once per direction (a ranker of its own per direction, trained on
that direction's rows), both ways, and the picks of the three are scored together. The held-out scores are also given
on the problems a training step runs (``held_out_run_*``: the never-run input gradients of :mod:`algosel.measure.steps`
left out, as ``algosel evaluate``'s headline).

Prints, per setting and seed, geomean of best, share within 5% and total-time ratio both ways, then each
setting's mean over seeds; writes every row as JSON with ``--out``. The learning rate of the shipped model was
chosen with it (docs/selector.md, "Learning rate").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

#: The figures of :func:`algosel.learn.evaluate.summary` that the table prints, cross-validated and held out.
METRICS = ("geomean", "within_5pct", "total_time_ratio")


def parse_setting(text: str) -> tuple[str, dict]:
    """``NAME=JSON`` to (name, RankerParams overrides); ValueError naming what is wrong."""
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415

    name, sep, body = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--setting {text!r} is not NAME=JSON")
    try:
        over = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"--setting {name}: {body!r} is not JSON ({e.msg})") from None
    known = {f.name for f in fields(RankerParams)} - {"seed", "num_threads"}
    if not isinstance(over, dict) or not set(over) <= known:
        bad = sorted(set(over) - known) if isinstance(over, dict) else [body]
        raise ValueError(f"--setting {name}: {bad[0]!r} is not a RankerParams field to set (one of {sorted(known)})")
    return name, over


def input_error(args: argparse.Namespace) -> str | None:
    """The one-line error for the first bad value of ``--folds``, ``--data`` or ``--params-from``, or None."""
    if args.folds < 2:
        return f"--folds must be at least 2, got {args.folds}"
    for d in args.data:
        if not Path(d).exists():
            return f"--data {d} does not exist"
    if not (Path(args.params_from) / "manifest.json").is_file():
        return f"--params-from {args.params_from} holds no model (no manifest.json)"
    return None


def run(data: list[str], params_from: str, settings: dict[str, dict], seeds: list[int], folds: int,
        threads: int, split: str | None = None) -> list[dict]:  # fmt: skip
    """One row per setting and seed: its cross-validated and held-out scores (see the module docstring)."""
    import pandas as pd  # noqa: PLC0415

    from algosel.learn.artifact import tuned_params  # noqa: PLC0415
    from algosel.learn.evaluate import (  # noqa: PLC0415
        Prepared,
        cross_val_picks,
        is_test_shape,
        mark_runs,
        pick_times,
        selector_table,
        summary,
    )
    from algosel.learn.ranker import Ranker, RankerParams  # noqa: PLC0415
    from algosel.measure.steps import no_input_grad_shapes  # noqa: PLC0415
    from algosel.measure.suites import load_suites  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    never = no_input_grad_shapes([load_suites()])

    base = tuned_params(params_from, RankerParams(num_threads=threads))
    frame, envs = load_records(*data)
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test_mask = is_test_shape(prep.shape)
    train, test = prep.rows(~test_mask), prep.rows(test_mask)
    rows = []
    for name, over in {"base": {}, **settings}.items():
        for seed in seeds:
            t0 = time.perf_counter()
            params = replace(base, **over, seed=seed)
            cv_parts, held_parts = [], []
            for group in [None] if split is None else sorted(train.data[split].unique()):
                tr = train if group is None else train.rows((train.data[split] == group).to_numpy())
                te = test if group is None else test.rows((test.data[split] == group).to_numpy())
                cv_parts.append(cross_val_picks(tr, params, folds))
                ranker = Ranker(params).fit_prepared(tr.data, tr.X)
                held_parts.append(pick_times(te.data, ranker.score(te.X)))
            cv = summary(selector_table(frame, pd.concat(cv_parts)))
            held_table = mark_runs(selector_table(frame, pd.concat(held_parts)), never)
            held, held_run = summary(held_table), summary(held_table[held_table["runs"]])
            scores = {**{f"cv_{k}": v for k, v in cv.items()}, **{f"held_out_{k}": v for k, v in held.items()},
                      **{f"held_out_run_{k}": v for k, v in held_run.items()}}  # fmt: skip
            rows.append({"setting": name, "seed": seed, "params": over, **scores})
            print(f"{name} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """The rows, then each setting's mean over its seeds, as aligned text."""
    out = [f"{'setting':<14} {'seed':>4} | {'cv geo':>7} {'within5':>7} {'total':>7} | "
           f"{'held-out geo':>12} {'within5':>7} {'total':>7} | "
           f"{'runs: geo':>9} {'within5':>7} {'total':>7}"]  # fmt: skip

    def line(name: str, seed: str, r: dict) -> str:
        cv = f"{r['cv_geomean']:>7.4f} {r['cv_within_5pct']:>7.1%} {r['cv_total_time_ratio']:>7.4f}"
        held = (f"{r['held_out_geomean']:>12.4f} {r['held_out_within_5pct']:>7.1%} "
                f"{r['held_out_total_time_ratio']:>7.4f}")  # fmt: skip
        runs = (f"{r['held_out_run_geomean']:>9.4f} {r['held_out_run_within_5pct']:>7.1%} "
                f"{r['held_out_run_total_time_ratio']:>7.4f}")  # fmt: skip
        return f"{name:<14} {seed:>4} | {cv} | {held} | {runs}"

    out += [line(r["setting"], str(r["seed"]), r) for r in rows]
    for name in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == name]
        keys = [f"{w}_{m}" for w in ("cv", "held_out", "held_out_run") for m in METRICS]
        out.append(line(name, "mean", {k: statistics.fmean(r[k] for r in mine) for k in keys}))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    p.add_argument(
        "--params-from", default="models/joint-h100-h200-cudnn91900", help="the model whose hyperparameters to use"
    )
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--setting", action="append", default=[], metavar="NAME=JSON")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated LightGBM seeds")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--split", choices=("direction",), default=None, help="a ranker per direction")
    args = p.parse_args(argv)
    try:
        settings = dict(parse_setting(s) for s in args.setting)
    except ValueError as e:
        print(f"ranker_settings.py: {e}", file=sys.stderr)
        return 2
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"ranker_settings.py: --seeds {args.seeds!r} is not comma-separated integers", file=sys.stderr)
        return 2
    error = input_error(args)
    if error:
        print(f"ranker_settings.py: {error}", file=sys.stderr)
        return 2
    rows = run(args.data, args.params_from, settings, seeds, args.folds, args.threads, args.split)
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps({"data": args.data, "params_from": args.params_from, "folds": args.folds,
                                              "split": args.split, "rows": rows}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
