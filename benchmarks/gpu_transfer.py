"""What a selector knows about a GPU it was not trained on, and how many of that GPU's shapes a joint model needs.

    python benchmarks/gpu_transfer.py --known D [D ...] --new D [D ...] --model models/joint-h100-h200-cudnn91900 \
        [--fractions 0.1,0.25,0.5] [--seeds 0,1,2] [--threads 2] [--curve-only | --known-only] [--out results/]

``--known``: records of the GPU(s) a shipped model was trained on (the H200's six datasets); ``--new``: records of
the new GPU (the H100's). Every model is fitted with ``--model``'s hyperparameters (no tuning), on the training
shapes, and scored on the held-out shapes (:func:`algosel.learn.evaluate.is_test_shape`: the same shapes are held
out on both GPUs). On the new GPU's held-out problems:

- ``known model``: ``--model`` as it is (its hardware columns were constant in training: it ranks as on its GPU);
- ``new only``: fitted on the new GPU's training shapes alone;
- ``joint``: fitted on both GPUs' training shapes (:mod:`algosel.learn.joint`);
- ``joint f``: the known GPU's shapes and a share ``f`` of the new GPU's training shapes (by a seeded hash of the
  shape, ``--seeds`` draws each): the learning curve of a new GPU of a known family;

and, beside them, cuDNN's heuristics (modes A, B) and PyTorch's default. On the known GPU's held-out problems the
joint model is set beside a refit of the known GPU's records alone (same settings: what adding the new GPU costs)
and ``--model``. Prints a table (geomean of time / best, share within 5%, total time ratio) and writes it with
``--out`` (``transfer.csv``, ``transfer.md``). ``--smoke`` runs it on the committed slice and that slice as a
second, made-up GPU (tests/test_joint.py's), in seconds: a check of the script, not a result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
#: What the table shows of each selector's scores.
COLUMNS = ("geomean", "within_5pct", "total_time_ratio")
BASELINES = ("heuristic_a", "heuristic_b", "pytorch_default")


def share(shapes: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A seeded share ``fraction`` of ``shapes`` (every row of a chosen shape)."""
    uniq = np.unique(shapes)
    chosen = {s for s in uniq if zlib.crc32(f"{seed}:{s}".encode()) % 10_000 < 10_000 * fraction}
    return np.array([s in chosen for s in shapes])


class Side(NamedTuple):
    """One GPU's side of the table: its name, its records and its held-out rows."""

    gpu: str
    records: pd.DataFrame
    test: object


class Transfer(NamedTuple):
    """Both GPUs' records as one prepared set: which rows are held out and whose, each GPU's side, the settings
    every model is fitted with and when the loading started (``time.perf_counter``)."""

    params: object
    prep: object
    test: np.ndarray
    on_new: np.ndarray
    on_known: np.ndarray
    new: Side
    known: Side
    t0: float

    @classmethod
    def load(cls, known: list[str], new: list[str], model: str, threads: int, progress) -> Transfer:
        """The records of ``known`` and ``new``, ``model``'s settings on ``threads`` threads; a line to ``progress``."""
        from algosel.learn.artifact import tuned_params  # noqa: PLC0415
        from algosel.learn.evaluate import Prepared, is_test_shape  # noqa: PLC0415
        from algosel.learn.joint import joint_environments  # noqa: PLC0415
        from algosel.learn.ranker import RankerParams  # noqa: PLC0415
        from algosel.records import load_records  # noqa: PLC0415
        from algosel.records.environment import gpu_slug  # noqa: PLC0415

        t0 = time.perf_counter()
        params = tuned_params(model, RankerParams(num_threads=threads))
        frame_k, envs_k = load_records(*known)
        frame_n, envs_n = load_records(*new)
        frame, _ = joint_environments(pd.concat([frame_k, frame_n], ignore_index=True), {**envs_k, **envs_n})
        new_ids = set(frame_n["env_id"])
        known_ids = set(frame_k["env_id"]) - new_ids
        prep = Prepared.build(frame, {**envs_k, **envs_n})
        on_new = prep.data["env_id"].isin(new_ids).to_numpy()
        on_known = prep.data["env_id"].isin(known_ids).to_numpy()
        test = is_test_shape(prep.shape)
        slug_new = gpu_slug(envs_n[next(iter(new_ids))])
        slug_known = gpu_slug(envs_k[next(iter(known_ids))])
        records_new, records_known = frame[frame["env_id"].isin(new_ids)], frame[frame["env_id"].isin(known_ids)]
        test_new, test_known = prep.rows(test & on_new), prep.rows(test & on_known)
        progress(
            f"{len(frame):,} records ({slug_known} {int(on_known.sum()):,} rows, {slug_new} {int(on_new.sum()):,}); "
            f"held out: {test_new.data['problem_key'].nunique()} {slug_new} problems, "
            f"{test_known.data['problem_key'].nunique()} {slug_known}; features in {time.perf_counter() - t0:.0f} s"
        )
        return cls(params, prep, test, on_new, on_known, Side(slug_new, records_new, test_new),
                   Side(slug_known, records_known, test_known), t0)  # fmt: skip

    def fit(self, mask: np.ndarray, seed: int = 0):
        """A ranker fitted on the rows of ``mask`` (LightGBM's seed ``seed``)."""
        from algosel.learn.ranker import Ranker  # noqa: PLC0415

        part = self.prep.rows(mask)
        return Ranker(replace(self.params, seed=seed)).fit_prepared(part.data, part.X)


class TableRows:
    """The table's rows as they are scored, a line to ``progress`` each (seconds since ``t0``)."""

    def __init__(self, progress, t0: float) -> None:
        self.rows: list[dict] = []
        self.progress = progress
        self.t0 = t0

    def add(self, side: Side, name: str, seed, ranker, baselines: bool = False) -> None:
        """``ranker``'s scores on ``side``'s held-out problems (and, with ``baselines``, the baselines' scores)."""
        from algosel.learn.joint import scores  # noqa: PLC0415

        got = scores(ranker, side.records, side.test)
        keep = ("model", *BASELINES) if baselines else ("model",)
        for sel in keep:
            label = name if sel == "model" else sel
            self.rows.append({"gpu": side.gpu, "selector": label, "seed": seed, **{c: got[sel][c] for c in COLUMNS}})
        self.progress(f"  {side.gpu} {name:<14} seed {seed}: geomean {got['model']['geomean']:.4f}, within 5% "
                      f"{100 * got['model']['within_5pct']:.1f}%, total {got['model']['total_time_ratio']:.4f}  "
                      f"({time.perf_counter() - self.t0:.0f} s)")  # fmt: skip


def score_known_only(data: Transfer, table: TableRows, shipped, seeds: list[int]) -> None:
    """The known GPU: its model, and per seed a refit of its records against the joint model."""
    table.add(data.known, "known model", None, shipped, baselines=True)
    for seed in seeds:
        table.add(data.known, "known refit", seed, data.fit(~data.test & data.on_known, seed))
        table.add(data.known, "joint", seed, data.fit(~data.test, seed))


def score_transfer(data: Transfer, table: TableRows, shipped, fractions: list[float], seeds: list[int],
                   curve_only: bool) -> None:  # fmt: skip
    """The new GPU's rows (the known model, the new GPU's alone, joint, the learning curve), then the known GPU's."""
    test, on_known, on_new = data.test, data.on_known, data.on_new
    table.add(data.new, "known model", None, shipped, baselines=True)
    table.add(data.new, "new only", 0, data.fit(~test & on_new))
    if not curve_only:
        joint = data.fit(~test)
        table.add(data.new, "joint", 0, joint)
    for fraction in fractions:
        for seed in seeds:
            mask = ~test & (on_known | (on_new & share(data.prep.shape, fraction, seed)))
            table.add(data.new, f"joint {fraction:g}", seed, data.fit(mask, seed))
    if not curve_only:
        table.add(data.known, "known model", None, shipped, baselines=True)
        table.add(data.known, "known refit", 0, data.fit(~test & on_known))
        table.add(data.known, "joint", 0, joint)


def run(known: list[str], new: list[str], model: str, fractions: list[float], seeds: list[int], threads: int,
        progress=print, curve_only: bool = False, known_only: bool = False) -> pd.DataFrame:  # fmt: skip
    """The rows of the table (see the module docstring): ``gpu``, ``selector``, ``seed`` and :data:`COLUMNS`."""
    from algosel.learn.selector import Selector  # noqa: PLC0415

    data = Transfer.load(known, new, model, threads, progress)
    table = TableRows(progress, data.t0)
    shipped = Selector.load(model, force=True).ranker
    if known_only:
        score_known_only(data, table, shipped, seeds)
    else:
        score_transfer(data, table, shipped, fractions, seeds, curve_only)
    return pd.DataFrame(table.rows)


def table(rows: pd.DataFrame) -> str:
    """The markdown table: one row per GPU and selector (means over seeds where there are several)."""
    lines = ["| GPU | selector | geomean | within 5% | total time | seeds |", "| --- | --- | --- | --- | --- | --- |"]
    for (gpu, sel), part in rows.groupby(["gpu", "selector"], sort=False):
        g, w, t = (statistics.fmean(part[c]) for c in COLUMNS)
        spread = f" ({part['geomean'].min():.3f}-{part['geomean'].max():.3f})" if len(part) > 1 else ""
        lines.append(f"| {gpu} | {sel} | {g:.3f}{spread} | {100 * w:.1f}% | {t:.3f} | {len(part)} |")
    return "\n".join(lines)


def smoke_data(root: Path) -> tuple[list[str], list[str], str]:
    """The slice and the slice as a made-up second GPU (tests/test_joint.py's recipe), and a model of the slice."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support import h100_env  # noqa: PLC0415

    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.learn.train import train  # noqa: PLC0415
    from algosel.records import load_records  # noqa: PLC0415
    from algosel.records.store import write_part  # noqa: PLC0415

    sliced = ROOT / "data" / "samples" / "h200-slice"
    frame, _ = load_records(sliced)
    env = h100_env()
    factor = frame["candidate_id"].map(lambda c: 0.7 + 0.7 * (zlib.crc32(c.encode()) % 100) / 100)
    other = frame.assign(env_id=env["env_id"], time_ms_median=frame["time_ms_median"] * factor)
    records = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
               for r in other.to_dict("records")]  # fmt: skip
    write_part(root / "new" / "part-new.parquet", records, [env])
    small = RankerParams(n_estimators=8, num_leaves=7, num_threads=1)
    model, _ = train([sliced], models_root=root / "models", grid={"objective": ["lambdarank"]}, base=small,
                     folds=2, progress=False)  # fmt: skip
    return [str(sliced)], [str(root / "new")], str(model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--known", nargs="+", default=[])
    ap.add_argument("--new", nargs="+", default=[])
    ap.add_argument("--model", default=str(ROOT / "models" / "joint-h100-h200-cudnn91900"))
    ap.add_argument("--fractions", default="0.1,0.25,0.5")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="the committed slice as two GPUs (a check of the script)")
    ap.add_argument("--curve-only", action="store_true", help="leave out the full joint model and the known GPU's rows")
    ap.add_argument(
        "--known-only",
        action="store_true",
        help="only the known GPU: its model, refits and joint models per seed (what adding the new GPU costs there)",
    )
    args = ap.parse_args(argv)
    try:
        fractions = [float(f) for f in args.fractions.split(",") if f]
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError as exc:
        ap.error(f"--fractions/--seeds: {exc}")
    if any(not 0 < f < 1 for f in fractions):
        ap.error(f"--fractions: each in (0, 1), got {args.fractions!r}")
    if args.smoke:
        import tempfile  # noqa: PLC0415

        tmp = Path(tempfile.mkdtemp(prefix="gpu-transfer-"))
        args.known, args.new, args.model = smoke_data(tmp)
    elif not args.known or not args.new:
        ap.error("give --known and --new records (or --smoke)")
    rows = run(
        args.known,
        args.new,
        args.model,
        fractions,
        seeds,
        args.threads,
        curve_only=args.curve_only,
        known_only=args.known_only,
    )
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        rows.to_csv(out / "transfer.csv", index=False)
        (out / "transfer.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
