"""The layers files of the H100's targeted family sweep (``benchmarks/targeted_sweep_h100.sh``), written on CPU:

    python benchmarks/targeted_layers.py [--out data/layers/targeted] [--overwrite]

One file per family where the joint model loses most or verify mode finds what prediction mode misses (issue 51),
each from real networks' convolution calls (``algosel layers``'s extraction, on meta tensors: seconds):

- ``grouped-f32.csv``: the depthwise and grouped calls (groups > 1) of EfficientNet-B0, MobileNetV3-Large,
  MnasNet 1.0, ConvNeXt-T, RegNetY-800MF and RegNetX-1.6GF at batch 128 (224x224), the float32 training of the
  GPU-bound zoo, where verify mode ran 0.80-0.94x PyTorch's default and prediction mode switched nothing;
- ``pointwise-f16.csv``: the 1x1 calls of MobileNetV3-Large, EfficientNet-B0, MnasNet 1.0, RegNetY-800MF and
  ResNet-50 at batch 8 and 16 (224x224): small float16 1x1 problems (0.03-0.13 ms forwards) where one engine is
  picked for one ~2x faster;
- ``csp.csv``: a CSP detector backbone (``benchmarks/targeted_nets.py``) at 16x640x640 and 8x512x512;
- ``aspp.csv``: DeepLabV3's ASPP head over output-stride-8 features of 512x512 (batch 16) and 769x769 (batch 8).

The torchvision networks' calls come from the committed suite and layers files (``data/suites``, ``data/layers``:
extracted once, at batch 32 or 64), their batch set to the one asked: no torchvision is needed. The two families
of ``targeted_nets.py`` are extracted here (``algosel layers``'s extraction, on meta tensors: seconds).

Every file is written whole or not at all; an existing file is refused unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

NETS = str(Path(__file__).resolve().parent / "targeted_nets.py")


@dataclass(frozen=True)
class Source:
    """One network's calls in a file: a committed layers file (``path``) re-batched to each of ``batches``, or a
    model spec (``path`` ``file.py:callable``) run on each of ``inputs``."""

    path: str
    network: str
    batches: tuple[int, ...] = ()
    inputs: tuple[tuple[int, int, int, int], ...] = ()


def _committed(name: str) -> str:
    suite = f"data/suites/{name}.csv"
    if Path(suite).is_file():
        return suite
    (found,) = sorted(Path("data/layers").glob(f"{name}*.csv"))
    return str(found)


_GROUPED = ("efficientnet_b0", "mobilenet_v3_large", "mnasnet1_0", "convnext_tiny", "regnet_y_800mf", "regnet_x_1_6gf")
_POINTWISE = ("mobilenet_v3_large", "efficientnet_b0", "mnasnet1_0", "regnet_y_800mf", "resnet50")
#: What each file holds, and the rows it keeps (``None``: all).
FILES: dict[str, tuple[tuple[Source, ...], str | None]] = {
    "grouped-f32.csv": (tuple(Source(_committed(n), n, batches=(128,)) for n in _GROUPED), "groups > 1"),
    "pointwise-f16.csv": (tuple(Source(_committed(n), n, batches=(8, 16)) for n in _POINTWISE), "r == 1 and s == 1"),
    "csp.csv": ((Source(f"{NETS}:csp_backbone", "csp_backbone", inputs=((16, 3, 640, 640), (8, 3, 512, 512))),), None),
    "aspp.csv": ((Source(f"{NETS}:aspp_head", "aspp_head", inputs=((16, 2048, 64, 64), (8, 2048, 97, 97))),), None),
}


def _calls(source: Source) -> pd.DataFrame:
    from algosel.measure.layers import load_layers, load_model, model_layers  # noqa: PLC0415

    if source.inputs:
        frame, _ = model_layers(load_model(source.path), [[list(i)] for i in source.inputs], source.network)
        return frame
    table = load_layers(source.path).drop(columns=["calls"], errors="ignore")
    return pd.concat([table.assign(n=b) for b in source.batches], ignore_index=True).assign(network=source.network)


def layers_of(sources: tuple[Source, ...], keep: str | None) -> pd.DataFrame:
    """The calls of ``sources``, the rows ``keep`` selects, one row per distinct call of a network and input."""
    frames = [_calls(s) for s in sources]
    out = pd.concat([f if keep is None else f.query(keep) for f in frames], ignore_index=True)
    return out.drop_duplicates([c for c in out.columns if c != "layer"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> None:
    from algosel.measure.layers import write_layers  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/layers/targeted", help="folder of the layers files")
    parser.add_argument("--overwrite", action="store_true", help="replace existing files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    existing = [name for name in FILES if (out / name).exists()]
    if existing and not args.overwrite:
        raise SystemExit(f"targeted_layers: {out / existing[0]} exists; pass --overwrite to replace it")
    out.mkdir(parents=True, exist_ok=True)
    for name, (sources, keep) in FILES.items():
        frame = layers_of(sources, keep)
        write_layers(frame, out / name)
        print(f"wrote {out / name}: {len(frame)} calls of {frame['network'].nunique()} network(s)")


if __name__ == "__main__":
    main()
