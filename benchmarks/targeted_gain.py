"""What the targeted records buy a joint model, on held-out shapes of every GPU (CPU, a few minutes a seed).

    python benchmarks/targeted_gain.py [--seeds 0,1] [--fits base,targeted] [--leaves 255] [--trees 150]
        [--h200 DIR ...] [--h100 DIR ...] [--extra DIR ...] [--params-from MODEL] [--threads 2] [--out F.json]

Fits, with ``--params-from``'s settings (the shipped H200 model's; ``--leaves`` and ``--trees`` override them) and
each seed, on the training shapes (:func:`algosel.learn.evaluate.is_test_shape` false) of:

- ``base``: ``--h200`` and ``--h100`` (default: what the shipped joint model learnt from before its targeted records,
  the six H200 datasets and the H100's uniform sweep);
- ``targeted``: the same and ``--extra`` (default: the H100's targeted sweep, ``benchmarks/targeted_sweep.sh``).

Scores every fit on the same held-out problems, those a training step runs, in three groups: the H200's, the H100's
uniform sweep and the H100's targeted sweep (whose shapes neither fit trained on), each as geomean of best and share
within 5%, and per shape family (:func:`algosel.measure.grid.family_of`) on the H100's held-out problems. Prints a line
per fit and seed, then the mean over seeds; ``--out`` writes them as JSON. docs/selector.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

H200 = [f"data/sweeps/h200{s}" for s in ("", "-nhwc", "-layers", "-zoo-f32", "-zoo-nhwc", "-loss")]
H100 = "data/sweeps/h100-80gb-hbm3-cudnn91900"
EXTRA = "data/sweeps/h100-80gb-hbm3-cudnn91900-targeted"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options (see the module docstring); one line and exit for a fit that is neither base nor targeted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--fits", default="base,targeted")
    parser.add_argument("--leaves", type=int, default=255, help="num_leaves (the shipped joint model's: 255)")
    parser.add_argument("--trees", type=int, default=None, help="n_estimators (default: the H200 model's)")
    parser.add_argument("--h200", nargs="+", default=H200, help="the first GPU's datasets")
    parser.add_argument("--h100", nargs="+", default=[H100], help="the second GPU's datasets, before the targeted")
    parser.add_argument("--extra", nargs="+", default=[EXTRA], help="the targeted records' datasets")
    parser.add_argument(
        "--params-from", default="models/joint-h100-h200-cudnn91900", help="the model whose settings to fit"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    unknown = [f for f in args.fits.split(",") if f not in ("base", "targeted")]
    if unknown:
        raise SystemExit(f"targeted_gain.py: unknown fit {unknown[0]!r}: base or targeted")
    return args


def load_groups(args: argparse.Namespace):
    """``--params-from``'s settings, the groups' datasets, their records (a column ``group`` naming each row's) and
    environments; one line and exit where one of them cannot be read."""
    from algosel.learn.artifact import (
        SelectorError,  # noqa: PLC0415
        tuned_params,  # noqa: PLC0415
    )
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.records import load_records  # noqa: PLC0415
    from algosel.records.store import RecordsError  # noqa: PLC0415

    try:
        params = tuned_params(args.params_from, RankerParams(num_threads=args.threads))
        sources = {"h200": args.h200, "h100": args.h100, "h100-targeted": args.extra}
        frames, envs = [], {}
        for group, dirs in sources.items():
            f, e = load_records(*dirs)
            frames.append(f.assign(group=group))
            envs.update(e)
    except (RecordsError, SelectorError, OSError) as exc:
        raise SystemExit(f"targeted_gain.py: {exc}") from None
    return params, sources, frames, envs


def first_groups(frame: pd.DataFrame, data: pd.DataFrame) -> np.ndarray:
    """The group of each row of ``data``: a problem belongs to the first group that recorded it on its GPU (a
    targeted shape may also be a uniform one)."""
    group_of = frame.drop_duplicates(["problem_key", "env_id"]).set_index(["problem_key", "env_id"])["group"]
    return group_of.reindex(pd.MultiIndex.from_frame(data[["problem_key", "env_id"]])).to_numpy()


class HeldOut(NamedTuple):
    """What every fit is scored on: each group's held-out rows and records, and the shapes whose input gradient no
    training step asks for (:func:`algosel.measure.steps.no_input_grad_shapes`)."""

    tests: dict
    records: dict
    never: object

    def score(self, ranker) -> tuple[dict[str, dict[str, float]], pd.DataFrame]:
        """Per group, the problems a training step runs, the geomean of best and the share within 5%; and per shape
        family, the H100's held-out problems and their geomean."""
        from algosel.learn.evaluate import pick_times, selector_table  # noqa: PLC0415
        from algosel.measure.grid import family_of  # noqa: PLC0415
        from algosel.measure.steps import runs_in_training  # noqa: PLC0415
        from algosel.problem import ConvProblem  # noqa: PLC0415

        out, h100_tables = {}, []
        for g, rows in self.tests.items():
            table = selector_table(self.records[g], pick_times(rows.data, ranker.score(rows.X)))
            table = table[runs_in_training(table.index, self.never)].dropna(subset=["model", "best"])
            ratio = table["model"] / table["best"]
            out[g] = {"problems": len(table), "geomean": float(np.exp(np.log(ratio).mean())),
                      "within_5pct": float((ratio <= 1.05).mean())}  # fmt: skip
            if g != "h200":
                h100_tables.append(table.assign(ratio=ratio))
        h100 = pd.concat(h100_tables)
        h100["family"] = [family_of(ConvProblem.from_key(k)) for k in h100.index]
        fam = h100.groupby("family")["ratio"].agg(problems="count", geomean=lambda r: float(np.exp(np.log(r).mean())))
        return out, fam


def fit_and_score(args: argparse.Namespace, params, prep, train: dict[str, np.ndarray],
                  held_out: HeldOut) -> dict[str, list]:  # fmt: skip
    """Per fit of ``--fits``, a result per seed: a ranker fitted on the rows of ``train[fit]``, scored on
    ``held_out``; a line each."""
    from algosel.learn.ranker import Ranker  # noqa: PLC0415

    results: dict[str, list] = {}
    for spec in args.fits.split(","):
        part = prep.rows(np.asarray(train[spec], dtype=bool))
        for seed in [int(s) for s in args.seeds.split(",")]:
            t = time.time()
            ranker = Ranker(replace(params, seed=seed)).fit_prepared(part.data, part.X)
            got, fam = held_out.score(ranker)
            results.setdefault(spec, []).append({"seed": seed, "scores": got, "h100_families": fam.reset_index()
                                                 .to_dict("records")})  # fmt: skip
            line = "  ".join(f"{g} {s['geomean']:.4f} {100 * s['within_5pct']:.1f}%" for g, s in got.items())
            print(f"{spec:9s} s{seed}  {line}  ({time.time() - t:.0f}s)", flush=True)
    return results


def print_means(results: dict[str, list], groups, seeds: str, leaves: int) -> None:
    """Per fit, the mean over seeds of each group's geomean and share within 5%, then of each H100 family's."""
    print(f"\nmean over seeds {seeds} ({leaves} leaves):")
    for spec, runs in results.items():
        line = "  ".join(
            f"{g} {np.mean([r['scores'][g]['geomean'] for r in runs]):.4f} "
            f"{100 * np.mean([r['scores'][g]['within_5pct'] for r in runs]):.1f}%"
            for g in groups
        )
        print(f"{spec:9s} {line}")
    for spec, runs in results.items():
        fams = pd.concat(pd.DataFrame(r["h100_families"]) for r in runs).groupby("family")
        print(f"\n{spec}: H100 held-out per family (mean over seeds)")
        table = fams.agg(problems=("problems", "first"), geomean=("geomean", "mean"))
        print(table.to_string(float_format="{:.4f}".format))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from algosel.learn.evaluate import Prepared, is_test_shape  # noqa: PLC0415
    from algosel.learn.joint import joint_environments  # noqa: PLC0415
    from algosel.measure.steps import no_input_grad_shapes  # noqa: PLC0415
    from algosel.measure.suites import load_suites  # noqa: PLC0415

    params, sources, frames, envs = load_groups(args)
    params = replace(params, num_leaves=args.leaves, **({"n_estimators": args.trees} if args.trees else {}))
    frame, _ = joint_environments(pd.concat(frames, ignore_index=True), envs)
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    row_group = first_groups(frame, prep.data)
    never = no_input_grad_shapes([load_suites()])
    held_out = HeldOut({g: prep.rows(test & (row_group == g)) for g in sources},
                       {g: frame[frame["group"] == g] for g in sources}, never)  # fmt: skip
    print("held-out problems:", {g: t.data["problem_key"].nunique() for g, t in held_out.tests.items()}, flush=True)
    train = {"base": ~test & (row_group != "h100-targeted"), "targeted": ~test}
    results = fit_and_score(args, params, prep, train, held_out)
    print_means(results, sources, args.seeds, args.leaves)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
