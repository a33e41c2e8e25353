"""Where a selector loses time on held-out shapes, per shape family and dtype, on the problems a training step runs
(CPU).

    python benchmarks/family_loss.py [--model models/joint-h100-h200-cudnn91900] [--data DIR ...] [--out F.json]
    python benchmarks/family_loss.py --plot F.png --compare BEFORE.json AFTER.json [--compare ...]

On the held-out shapes of ``--data`` (:func:`algosel.learn.evaluate.is_test_shape`), the model picks as ``algosel
evaluate`` scores it; the input gradients a training step never runs (:mod:`algosel.measure.steps`, from the network
suites) are left out. Each problem's loss is ``log(pick / best)`` and its excess time ``pick - best``; its family is
told from its shape (:func:`algosel.measure.grid.family_of`: strided stems over few channels, pointwise, 3x3, large
kernels, dilated, depthwise, fully connected, odd). Prints per family, per dtype and per family x dtype: problems,
summed and mean loss, the share of the summed loss and of the excess time, and the share within 5% of the best: what
:data:`algosel.measure.grid.TARGETED_FAMILIES` was set from; then per band of pick / best (:func:`miss_bands`), where
the loss lies and how often cuDNN's heuristics or PyTorch's default would have picked faster. Every source counts
(grid, suites, layers files): the mix is aimed at where the model loses, wherever the shapes came from.

With ``--plot``, no model is run: each ``--compare`` pair of ``--out`` files (before, after) becomes a panel of the
mean loss per family, before and after, with each family's share of problems within 5% of the best on its bars
(docs/figures/family-loss-before-after.png).
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


#: Upper edges of the bands of pick / best that :func:`miss_bands` groups problems by.
BAND_EDGES = (1.02, 1.05, 1.1, 1.2, 1.5, 2.0)


def miss_bands(table: pd.DataFrame) -> pd.DataFrame:
    """Per band of ``model / best`` (:data:`BAND_EDGES`): problems, their share of the summed log loss, the median
    best time (ms) and the share on which cuDNN's mode A, mode B and PyTorch's default picked faster than the model."""
    ratio = table["model"] / table["best"]
    labels = [f"<= {e:g}" for e in BAND_EDGES] + [f"> {BAND_EDGES[-1]:g}"]
    band = pd.cut(ratio, [0.0, *BAND_EDGES, np.inf], labels=labels)
    d = table.assign(loss=np.log(ratio), band=band)
    for s in ("heuristic_a", "heuristic_b", "pytorch_default"):
        d[f"{s}_faster"] = d[s] < d["model"]
    out = d.groupby("band", observed=False).agg(
        problems=("loss", "count"), loss_sum=("loss", "sum"), best_ms_median=("best", "median"),
        heuristic_a_faster=("heuristic_a_faster", "mean"), heuristic_b_faster=("heuristic_b_faster", "mean"),
        pytorch_default_faster=("pytorch_default_faster", "mean"))  # fmt: skip
    out.insert(2, "loss_share", out["loss_sum"] / d["loss"].sum())
    return out


def plot_before_after(pairs: list[tuple[dict, dict]], out: str) -> None:
    """One panel per (before, after) pair of ``--out`` payloads: mean log loss per family, the families in the
    before table's order of summed loss; within-5% shares written on the bars."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(pairs), 1, figsize=(9, 3.4 * len(pairs)), squeeze=False)
    for ax, (before, after) in zip(axes[:, 0], pairs):
        rows_b = {r["family"]: r for r in before["family"]}
        rows_a = {r["family"]: r for r in after["family"]}
        families = [f for f in rows_b if f in rows_a]
        x = np.arange(len(families))
        for offset, rows, label in ((-0.2, rows_b, before["model"]), (0.2, rows_a, after["model"])):
            bars = ax.bar(x + offset, [rows[f]["loss_mean"] for f in families], width=0.4, label=Path(label).name)
            for bar, f in zip(bars, families):
                ax.annotate(f"{100 * rows[f]['within_5pct']:.0f}%", (bar.get_x() + bar.get_width() / 2,
                            bar.get_height()), ha="center", va="bottom", fontsize=7)  # fmt: skip
        ax.set_xticks(x, [f"{f.replace('_', ' ')}\n({rows_b[f]['problems']})" for f in families], fontsize=8)
        ax.set_ylabel("mean log(pick / best)")
        ax.set_title(f"held-out problems of {', '.join(Path(d).name for d in after['data'])}", fontsize=9)
        ax.legend(fontsize=8, title="model (within 5% on the bars)", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/joint-h100-h200-cudnn91900")
    parser.add_argument("--data", nargs="+", default=DATA)
    parser.add_argument("--out", default=None, help="also write the tables as JSON")
    parser.add_argument("--plot", default=None, help="draw the --compare pairs into this PNG (no model is run)")
    parser.add_argument("--compare", nargs=2, action="append", metavar=("BEFORE", "AFTER"), default=[])
    args = parser.parse_args()
    if args.plot or args.compare:
        if not (args.plot and args.compare):
            parser.error("--plot and --compare go together")
        try:
            pairs = [tuple(json.loads(Path(f).read_text()) for f in pair) for pair in args.compare]
        except (OSError, ValueError) as exc:
            parser.error(f"cannot read a --compare file: {exc}")
        plot_before_after(pairs, args.plot)
        print(f"wrote {args.plot}")
        return

    from algosel.learn.evaluate import held_out_table, mark_runs  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415
    from algosel.measure.grid import family_of  # noqa: PLC0415
    from algosel.measure.steps import no_input_grad_shapes  # noqa: PLC0415
    from algosel.measure.suites import load_suites  # noqa: PLC0415
    from algosel.problem import ConvProblem  # noqa: PLC0415
    from algosel.records.store import load_records, main_environment  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    frame, _ = main_environment(frame, envs)
    table = held_out_table(Selector.load(args.model, force=True), frame, envs)
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
    tables["band"] = bands = miss_bands(table)
    print("\nper band of pick / best:")
    print(bands.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.out:
        payload = {k: v.reset_index().to_dict("records") for k, v in tables.items()}
        Path(args.out).write_text(json.dumps({"model": args.model, "data": args.data, **payload}, indent=1) + "\n")


if __name__ == "__main__":
    main()
