"""Where a selector loses time on held-out grid shapes, per grid family (CPU).

    python benchmarks/family_loss.py [--model models/h200-cudnn91900] [--data data/sweeps/h200 ...]

On the held-out shapes of ``--data`` (:func:`algosel.learn.evaluate.is_test_shape`), the model picks as ``algosel
evaluate`` scores it; each grid problem's loss is ``log(pick / best)``, and its family is told from its shape
(:func:`algosel.measure.grid.family_of`). Prints, per family, the problems, the summed and mean loss and the share of
the grid's summed loss: the shares that :data:`algosel.measure.grid.LOSS_FAMILIES` was set from (with the model of
2026-12-01, trained on ``data/sweeps/h200`` alone, on those records). Suites and layers files are left out: the mix
is the grid's.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd


def family_losses(table: pd.DataFrame) -> pd.DataFrame:
    """Per family of the grid problems of a :func:`~algosel.learn.evaluate.selector_table`: problems, summed and mean
    ``log(model / best)``, and each family's share of the summed loss (largest first)."""
    from algosel.measure.grid import family_of  # noqa: PLC0415
    from algosel.problem import ConvProblem  # noqa: PLC0415

    grid = table[table["source"].str.startswith("grid")]
    loss = np.log(grid["model"] / grid["best"])
    families = [family_of(ConvProblem.from_key(k)) for k in grid.index]
    out = loss.groupby(families).agg(problems="count", loss_sum="sum", loss_mean="mean")
    out["share"] = out["loss_sum"] / loss.sum()
    return out.sort_values("share", ascending=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/h200-cudnn91900")
    parser.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    args = parser.parse_args()

    from algosel.learn.evaluate import held_out_table  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    frame, _ = main_environment(frame, envs)
    table = held_out_table(Selector.load(args.model), frame, envs)
    out = family_losses(table)
    print(f"{int(out['problems'].sum())} held-out grid problems of {', '.join(args.data)}; model {args.model}")
    print(out.to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
