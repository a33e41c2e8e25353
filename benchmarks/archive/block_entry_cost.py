"""Host cost of entering an ``enabled()`` block whose executor steps aside, on any machine (CPU is enough).

    python benchmarks/block_entry_cost.py [--model models/h200-cudnn91900] [--blocks 20000] [--repeats 3]

A stepped-aside block runs PyTorch's own ``F.conv2d``; what the hook still costs a training step is entering and
leaving the block: looking up the configuration's shared executor and asking it whether it stands aside. Timed,
in us per block, for the zoo's two hook configurations (benchmarks/zoo.py: prediction mode with a cache folder,
verify mode with ``verify=3``), each with its cache ``Path`` made once and, for prediction mode, made again for
every block (as the zoo did before ``a9da493``), beside an empty ``contextlib.nullcontext()`` block. Each
executor first meets one small convolution in a few blocks, so that it stands aside.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from algosel.learn.selector import Selector
from algosel.runtime import hook


def us_per_block(make_block, blocks: int) -> float:
    t0 = time.perf_counter()
    for _ in range(blocks):
        with make_block():
            pass
    return (time.perf_counter() - t0) / blocks * 1e6


def run(model: str, blocks: int, repeats: int) -> dict[str, float]:
    """Median us per block of each configuration over ``repeats`` runs of ``blocks`` blocks."""
    sel = Selector.load(model)
    root = Path(tempfile.mkdtemp(prefix="algosel-blocks-"))
    predict_folder, verify_folder = root / "predict", root / "verify"
    configs = {
        "nullcontext": contextlib.nullcontext,
        "prediction, cache Path made once": lambda: hook.enabled(cache=predict_folder, selector=sel),
        "prediction, cache Path made per block": lambda: hook.enabled(cache=root / "predict", selector=sel),
        "verify=3, cache Path made once": lambda: hook.enabled(verify=3, cache=verify_folder, selector=sel),
    }
    x, w = torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)
    for name, make_block in configs.items():
        for _ in range(10):  # plans the convolution (it passes through), then quiet blocks: it steps aside
            with make_block() as ex:
                F.conv2d(x, w)
        if name != "nullcontext" and not ex.blocks.stands_aside():
            raise SystemExit(f"block_entry_cost: the {name!r} executor does not step aside")
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, make_block in configs.items():
            samples[name].append(us_per_block(make_block, blocks))
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/h200-cudnn91900", help="the hook's model directory")
    p.add_argument("--blocks", type=int, default=20000, help="blocks per timed run")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration (the median is printed)")
    args = p.parse_args()
    for name, us in run(args.model, args.blocks, args.repeats).items():
        print(f"{name:40s} {us:7.2f} us per block")


if __name__ == "__main__":
    main()
