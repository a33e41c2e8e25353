"""Layer suites: the catalogue of real networks whose convolution shapes algosel evaluates on, as committed CSVs.

A selector is only useful if it is right on the convolutions people actually run, so besides synthetic sweeps
algosel evaluates on the ``Conv2d`` layers of a few well-known networks (:data:`SUITES`). The shapes are extracted
by running each model once on meta tensors (:func:`algosel.measure.conv_calls.extract_conv_calls`) and written to
``data/suites/<name>.csv``, a layer table (:mod:`algosel.measure.layer_table`). The CSV files are committed so
that CI and everything downstream need no torchvision; only regenerating them does
(``python -m algosel.measure.suites OUTDIR``). The FPN suite holds one block of rows per input size.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from algosel.files import write_text
from algosel.measure.conv_calls import extract_layers
from algosel.measure.layer_table import (
    LAYER_FIELDS,  # noqa: F401 - the layer table's, importable from here as it always was
    LAYOUT_COLUMN,  # noqa: F401 - the layer table's, importable from here as it always was
    SUITE_COLUMNS,
    read_layer_table,
    suite_problems,
    typed_layer_table,
)
from algosel.resources import shipped_path

#: Where the committed suite CSVs live: the package's shipped data (``data/suites`` of the repository links there),
#: found through the installed package so that it does not depend on the working directory or an editable install.
DEFAULT_SUITES_DIR: Path = shipped_path("suites")

#: Feature-map strides of a ResNet backbone's C2..C5 outputs, which an FPN consumes.
FPN_STRIDES: tuple[int, ...] = (4, 8, 16, 32)
#: Channels of ResNet-50's C2..C5 outputs.
FPN_IN_CHANNELS: tuple[int, ...] = (256, 512, 1024, 2048)


def fpn_input_sizes() -> tuple[tuple[int, int], ...]:
    """Twenty detection input sizes around 800x1216.

    Detection inputs vary per batch (aspect-ratio grouping, multi-scale training) and are padded to a multiple
    of 32 so every FPN level has an integral size. We take heights 736..864 and widths 1152..1280 in steps of
    32 (a 5 x 5 grid) and keep 20 of the 25 pairs: row ``t`` pairs height ``t`` with widths ``t + j`` (mod 5)
    for ``j`` in 0..3, i.e. one wrap-around diagonal is dropped. That keeps each height and each width exactly
    four times (no size is over-represented) and includes 800x1216 (``t = 2, j = 0``). Sorted, for stable CSVs.
    """
    heights = [736 + 32 * i for i in range(5)]
    widths = [1152 + 32 * i for i in range(5)]
    return tuple(sorted((heights[t], widths[(t + j) % 5]) for j in range(4) for t in range(5)))


@dataclass(frozen=True)
class SuiteSpec:
    """What one suite runs: the model, its input sizes and batch.

    Parameters
    ----------
    name : str
        Suite name; also the CSV file stem and the ``network`` column.
    builder : str
        Human-readable description of how the model is built (documentation only; the build itself is done by
        :func:`build_suite_model`).
    sizes : tuple of (int, int)
        Input spatial sizes ``(h, w)``; one block of rows per size.
    batch : int
        Batch size ``n`` of the input.
    in_channels : int
        Channels of the (first) input tensor; informational for the FPN, whose inputs are four feature maps.
    needs_torchvision : bool
        Whether building the model imports torchvision.
    input_needs_grad : bool
        Whether the network's inputs need a gradient in training: features of a backbone trained with it (the FPN
        head, AlexNet's classifier), rather than images. Where they do not, the input gradient of the first
        convolution never runs (:mod:`algosel.measure.steps`).
    """

    name: str
    builder: str
    sizes: tuple[tuple[int, int], ...]
    batch: int
    in_channels: int = 3
    needs_torchvision: bool = True
    input_needs_grad: bool = False

    @property
    def size(self) -> tuple[int, int]:
        """The first (for single-size suites: the only) input size."""
        return self.sizes[0]


def _torchvision_spec(name: str) -> SuiteSpec:
    # ImageNet classification at its standard training/inference resolution and a typical training batch.
    return SuiteSpec(name, f"torchvision.models.{name}(weights=None)", ((224, 224),), 32)


#: The suites, by name.
SUITES: dict[str, SuiteSpec] = {
    **{
        name: _torchvision_spec(name)
        for name in ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vgg16", "alexnet", "densenet121")
    },
    # AlexNet's classifier written as convolutions (as in the "one weird trick" / convnet-benchmarks style): fc6
    # is a 6x6 convolution covering the whole 256x6x6 pool5 output, fc7 and fc8 are 1x1 on a 1x1 map. These are
    # the fully-connected corner cases (is_fully_connected / is_pointwise) where GEMM-like algorithms should win.
    "alexnet_fc": SuiteSpec(
        "alexnet_fc",
        "AlexNet classifier as convolutions: fc6 Conv2d(256, 4096, 6) on 6x6, fc7 Conv2d(4096, 4096, 1) and "
        "fc8 Conv2d(4096, 1000, 1) on 1x1",
        ((6, 6),),
        1600,
        in_channels=256,
        needs_torchvision=False,
        input_needs_grad=True,
    ),
    "fpn": SuiteSpec(
        "fpn",
        "algosel.measure.suites.FPNHead(): 1x1 laterals to 256 and 3x3 outputs on ResNet C2..C5 (strides 4..32)",
        fpn_input_sizes(),
        1,
        in_channels=FPN_IN_CHANNELS[0],
        needs_torchvision=False,
        input_needs_grad=True,
    ),
}


class FPNHead(nn.Module):
    """The convolutions of a Feature Pyramid Network (Lin et al., 2017) on top of a ResNet backbone.

    Same structure as torchvision's ``FeaturePyramidNetwork`` (without the extra max-pool level, which has no
    convolution): per level a 1x1 lateral convolution to ``out_channels`` and a 3x3 output convolution, with a
    nearest-neighbour upsampled top-down pathway. Written in plain torch so the suite needs no torchvision and
    so benchmarks can run it end to end.

    Parameters
    ----------
    in_channels : sequence of int
        Channels of the input feature maps, finest level first.
    out_channels : int
        Channels of every pyramid level.
    """

    def __init__(self, in_channels: Sequence[int] = FPN_IN_CHANNELS, out_channels: int = 256) -> None:
        super().__init__()
        self.strides = FPN_STRIDES[: len(in_channels)]
        self.in_channels = tuple(in_channels)
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, kernel_size=1) for c in in_channels)
        self.output = nn.ModuleList(
            nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1) for _ in in_channels
        )

    def forward(self, *features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Pyramid levels P2..P5 (finest first) from feature maps C2..C5 (finest first).

        Accepts the maps as separate arguments or as one list/tuple.
        """
        if len(features) == 1 and isinstance(features[0], (list, tuple)):
            features = tuple(features[0])
        if len(features) != len(self.lateral):
            raise ValueError(f"FPNHead expects {len(self.lateral)} feature maps, got {len(features)}")
        # Top-down, coarsest level first, as torchvision does (this is also the order of the CSV rows).
        top = self.lateral[-1](features[-1])
        results = [self.output[-1](top)]
        for i in range(len(features) - 2, -1, -1):
            lateral = self.lateral[i](features[i])
            # Upsample to the lateral's exact size rather than by 2x, so sizes that are not multiples of 32
            # (odd feature sizes) still line up.
            top = lateral + F.interpolate(top, size=lateral.shape[-2:], mode="nearest")
            results.insert(0, self.output[i](top))
        return tuple(results)

    def example_inputs(
        self,
        h: int,
        w: int,
        batch: int = 1,
        device: torch.device | str = "meta",
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.Tensor, ...]:
        """Feature maps a ResNet backbone produces for an ``h x w`` image.

        ResNet halves the size with ``ceil`` at each stride-2 stage (conv1 7x7/2 pad 3, max-pool 3x3/2 pad 1,
        3x3/2 pad 1 convolutions), so the level of stride ``t`` is ``ceil(h / t) x ceil(w / t)``.
        """
        return tuple(
            torch.empty(batch, c, math.ceil(h / t), math.ceil(w / t), device=device, dtype=dtype)
            for c, t in zip(self.in_channels, self.strides)
        )


def alexnet_fc() -> nn.Module:
    """AlexNet's classifier (fc6, fc7, fc8) as convolutions; input ``(n, 256, 6, 6)``."""
    return nn.Sequential(
        OrderedDict(
            fc6=nn.Conv2d(256, 4096, kernel_size=6),
            relu6=nn.ReLU(inplace=True),
            fc7=nn.Conv2d(4096, 4096, kernel_size=1),
            relu7=nn.ReLU(inplace=True),
            fc8=nn.Conv2d(4096, 1000, kernel_size=1),
        )
    )


def _size_label(h: int, w: int) -> str:
    return f"{h}x{w}"


def build_suite_model(name: str, device: torch.device | str = "meta") -> nn.Module:
    """Build the (randomly initialised) model of suite ``name`` on ``device``.

    Raises
    ------
    KeyError
        For an unknown suite name.
    RuntimeError
        When the suite needs torchvision and it is not installed.
    """
    _spec(name)
    with torch.device(device):
        if name == "fpn":
            return FPNHead()
        if name == "alexnet_fc":
            return alexnet_fc()
        try:
            # Imported here, not at module level: only regenerating the CSVs needs torchvision.
            import torchvision.models
        except ImportError as exc:
            raise RuntimeError(
                f"suite {name!r} needs the 'torchvision' package, which is not installed; it is only needed to "
                f"regenerate the suite CSVs (python -m algosel.measure.suites OUTDIR), not to load them"
            ) from exc
        return getattr(torchvision.models, name)(weights=None)


def _spec(name: str) -> SuiteSpec:
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES))}")
    return SUITES[name]


def extract_suite(name: str) -> pd.DataFrame:
    """Extract the convolution layers of suite ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`SUITES`.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS`, one row per convolution call, per input size in :attr:`SuiteSpec.sizes`
        order, in execution order within a size.

    Raises
    ------
    KeyError
        For an unknown suite.
    RuntimeError
        If the suite needs torchvision and it is not installed (only regenerating the CSVs needs it).
    """
    spec = _spec(name)
    model = build_suite_model(name, device="meta")
    rows: list[dict[str, Any]] = []
    for h, w in spec.sizes:
        if isinstance(model, FPNHead):
            inputs: torch.Tensor | tuple[torch.Tensor, ...] = model.example_inputs(h, w, spec.batch, device="meta")
        else:
            inputs = torch.empty(spec.batch, spec.in_channels, h, w, device="meta")
        for record in extract_layers(model, inputs):
            rows.append({"network": name, **record, "size": _size_label(h, w)})
    return typed_layer_table(pd.DataFrame(rows, columns=list(SUITE_COLUMNS)))


# ------------------------------------------------------------------------------------------------ storage
def write_suites(directory: str | Path, names: Iterable[str] | None = None) -> list[Path]:
    """Extract suites and write ``<directory>/<name>.csv`` for each.

    Parameters
    ----------
    directory : str or Path
        Output directory (created if missing).
    names : iterable of str, optional
        Suites to write; all of :data:`SUITES` by default. Processed in sorted order so the output (and any
        failure) is deterministic.

    Returns
    -------
    list of Path
        The files written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    selected = sorted(SUITES if names is None else set(names))
    for name in selected:
        _spec(name)  # fail on a typo before spending time on the others
    paths = []
    for name in selected:
        path = directory / f"{name}.csv"
        # Explicit "\n" so the committed files are byte-identical whatever platform regenerates them; written
        # atomically, as every file algosel writes.
        write_text(path, extract_suite(name).to_csv(index=False, lineterminator="\n"))
        paths.append(path)
    return paths


def load_suite(name: str, directory: str | Path = DEFAULT_SUITES_DIR) -> pd.DataFrame:
    """Read one suite CSV back.

    Parameters
    ----------
    name : str
        Suite name; the file read is ``<directory>/<name>.csv``.
    directory : str or Path
        Where the CSVs are; the repository's ``data/suites`` by default.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SUITE_COLUMNS` in order, int64 shape fields (extra columns are dropped).

    Raises
    ------
    ValueError
        As :func:`read_layer_table`: a missing file or column, a bad value or a row that is no valid convolution.
    """
    path = Path(directory) / f"{name}.csv"
    if not path.is_file():
        raise ValueError(
            f"suite file {path} does not exist; generate it with 'python -m algosel.measure.suites {Path(directory)}'"
        )
    return read_layer_table(path, "suite file")


def load_suites(names: Iterable[str] | None = None, directory: str | Path = DEFAULT_SUITES_DIR) -> pd.DataFrame:
    """Read several suite CSVs into one frame.

    Parameters
    ----------
    names : iterable of str, optional
        Suites to read, in the given order. By default every ``*.csv`` present in ``directory``, in sorted
        order (so a checkout holding only some of the suites still loads what it has).
    directory : str or Path
        Where the CSVs are; the repository's ``data/suites`` by default.

    Raises
    ------
    ValueError
        As :func:`load_suite`, or when ``names`` is None and the directory holds no CSV.
    """
    directory = Path(directory)
    if names is None:
        names = sorted(path.stem for path in directory.glob("*.csv"))
        if not names:
            raise ValueError(f"no suite CSV files in {directory}")
    frames = [load_suite(name, directory) for name in names]
    if not frames:
        return pd.DataFrame({column: pd.Series(dtype=object) for column in SUITE_COLUMNS})
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m algosel.measure.suites [OUTDIR] [--suites NAME ...]``: extract and write suite CSVs."""
    parser = argparse.ArgumentParser(prog="python -m algosel.measure.suites", description=main.__doc__)
    parser.add_argument(
        "outdir", nargs="?", type=Path, default=DEFAULT_SUITES_DIR, help=f"default: {DEFAULT_SUITES_DIR}"
    )
    parser.add_argument("--suites", nargs="+", choices=sorted(SUITES), help="default: all suites")
    args = parser.parse_args(argv)
    try:
        paths = write_suites(args.outdir, args.suites)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        frame = load_suite(path.stem, path.parent)
        print(f"{path}: {len(frame)} conv calls, {len(suite_problems(frame, 'float32'))} distinct shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
