"""Where a selector loses time on held-out shapes, per shape family and dtype, on the problems a training step runs
(CPU).

    python benchmarks/family_loss.py [--model models/h200-cudnn91900] [--data DIR ...] [--out F.json]

On the held-out shapes of ``--data`` (:func:`algosel.learn.evaluate.is_test_shape`), the model picks as ``algosel
evaluate`` scores it; the input gradients a training step never runs (:mod:`algosel.measure.steps`, from the network
suites) are left out. Each problem's loss is ``log(pick / best)`` and its excess time ``pick - best``; its family is
told from its shape (:func:`algosel.measure.grid.family_of`: strided stems over few channels, pointwise, 3x3, large
kernels, dilated, depthwise, fully connected, odd). Prints per family, per dtype and per family x dtype: problems,
summed and mean loss, the share of the summed loss and of the excess time, and the share within 5% of the best: what
:data:`algosel.measure.grid.TARGETED_FAMILIES` was set from. Every source counts (grid, suites, layers files): the
mix is aimed at where the model loses, wherever the shapes came from.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

DATA = ["data/sweeps/h200", "data/sweeps/h200-nhwc", "data/sweeps/h200-layers", "data/sweeps/h200-zoo-f32",
        "data/sweeps/h200-zoo-nhwc", "data/sweeps/h200-loss"]  # fmt: skip


def family_losses(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by`` (columns of ``table``): problems, summed and mean ``log(model / best)``, each group's share
    of the summed loss and of the excess time, and the share of problems within 5% of the best (largest loss first)."""
    ratio = table["model"] / table["best"]
    d = table.assign(loss=np.log(ratio), excess=table["model"] - table["best"], within=ratio <= 1.05)
    out = d.groupby(by).agg(problems=("loss", "count"), loss_sum=("loss", "sum"), loss_mean=("loss", "mean"),
                            excess_ms=("excess", "sum"), within_5pct=("within", "mean"))  # fmt: skip
    out["loss_share"] = out["loss_sum"] / d["loss"].sum()
    out["excess_share"] = out["excess_ms"] / d["excess"].sum()
    return out.sort_values("loss_sum", ascending=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/h200-cudnn91900")
    parser.add_argument("--data", nargs="+", default=DATA)
    parser.add_argument("--out", default=None, help="also write the tables as JSON")
    args = parser.parse_args()

    from algosel.learn.evaluate import Prepared, held_out_table, mark_runs  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415
    from algosel.measure.grid import family_of  # noqa: PLC0415
    from algosel.measure.steps import no_input_grad_shapes  # noqa: PLC0415
    from algosel.measure.suites import load_suites  # noqa: PLC0415
    from algosel.problem import ConvProblem  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    frame, _ = main_environment(frame, envs)
    table = held_out_table(Selector.load(args.model, force=True), frame, Prepared.build(frame, envs))
    mark_runs(table, no_input_grad_shapes([load_suites()]))
    never = int((~table["runs"]).sum())
    table = table[table["runs"]].dropna(subset=["model", "best"])
    table = table.assign(family=[family_of(ConvProblem.from_key(k)) for k in table.index])
    print(f"{len(table)} held-out problems that a training step runs ({never} that none runs left out) of "
          f"{', '.join(args.data)}; model {args.model}")  # fmt: skip
    tables = {}
    for by in (["family"], ["dtype"], ["family", "dtype"], ["family", "dtype", "layout"]):
        name = " x ".join(by)
        tables[name] = out = family_losses(table, by)
        print(f"\nper {name}:")
        print(out.head(24).to_string(float_format=lambda v: f"{v:.3f}"))
    if args.out:
        payload = {k: v.reset_index().to_dict("records") for k, v in tables.items()}
        Path(args.out).write_text(json.dumps({"model": args.model, "data": args.data, **payload}, indent=1) + "\n")


if __name__ == "__main__":
    main()
