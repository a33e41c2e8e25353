"""Tests of measure.suites, conv_calls and layer_table: extraction, the FPN / AlexNet-fc suites, CSVs, problem lists."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from algosel.measure.conv_calls import extract_layers
from algosel.measure.layer_table import LAYER_FIELDS, SUITE_COLUMNS, suite_layer_problems, suite_problems
from algosel.measure.suites import (
    DEFAULT_SUITES_DIR,
    SUITES,
    FPNHead,
    extract_suite,
    load_suite,
    load_suites,
    write_suites,
)
from algosel.problem import ConvProblem


def _shape(row: dict) -> tuple[int, ...]:
    return tuple(int(row[f]) for f in LAYER_FIELDS)


# ------------------------------------------------------------------------------------------------ suites
def test_suite_specs() -> None:
    expected = {
        "resnet50",
        "mobilenet_v3_large",
        "efficientnet_b0",
        "vgg16",
        "alexnet",
        "densenet121",
        "alexnet_fc",
        "fpn",
    }
    assert set(SUITES) == expected
    for name in ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vgg16", "alexnet", "densenet121"):
        assert SUITES[name].sizes == ((224, 224),) and SUITES[name].batch == 32 and SUITES[name].needs_torchvision
    sizes = SUITES["fpn"].sizes
    assert len(sizes) == 20 and len(set(sizes)) == 20 and (800, 1216) in sizes
    assert all(736 <= h <= 864 and 1152 <= w <= 1280 for h, w in sizes)
    assert SUITES["fpn"].batch == 1 and not SUITES["fpn"].needs_torchvision
    assert SUITES["alexnet_fc"].batch == 1600 and not SUITES["alexnet_fc"].needs_torchvision
    # The shipped suites: inside the package, where the repository's data/suites links to.
    assert DEFAULT_SUITES_DIR.resolve() == (Path(__file__).resolve().parent.parent / "data" / "suites").resolve()


def test_fpn_shapes_at_800x1216() -> None:
    frame = extract_suite("fpn")
    assert list(frame.columns) == list(SUITE_COLUMNS)
    assert (frame["network"] == "fpn").all()
    assert frame["size"].nunique() == 20 and len(frame) == 20 * 8
    block = frame[frame["size"] == "800x1216"]
    rows = {row["layer"]: _shape(row) for row in block.to_dict("records")}
    # (n, c, k, h, w, r, s, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups)
    assert rows == {
        "lateral.0": (1, 256, 256, 200, 304, 1, 1, 0, 0, 1, 1, 1, 1, 1),
        "lateral.1": (1, 512, 256, 100, 152, 1, 1, 0, 0, 1, 1, 1, 1, 1),
        "lateral.2": (1, 1024, 256, 50, 76, 1, 1, 0, 0, 1, 1, 1, 1, 1),
        "lateral.3": (1, 2048, 256, 25, 38, 1, 1, 0, 0, 1, 1, 1, 1, 1),
        "output.0": (1, 256, 256, 200, 304, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        "output.1": (1, 256, 256, 100, 152, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        "output.2": (1, 256, 256, 50, 76, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        "output.3": (1, 256, 256, 25, 38, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    }
    # Execution order: top-down, coarsest level first.
    assert list(block["layer"]) == [
        "lateral.3",
        "output.3",
        "lateral.2",
        "output.2",
        "lateral.1",
        "output.1",
        "lateral.0",
        "output.0",
    ]


def test_fpn_head_runs_on_cpu_with_odd_sizes() -> None:
    # Sizes that are not multiples of 32 give odd feature sizes; the top-down path must still line up.
    head = FPNHead(in_channels=(4, 8, 16, 32), out_channels=8)
    features = tuple(torch.randn(f.shape) for f in head.example_inputs(100, 70, device="cpu"))
    assert [f.shape[-2:] for f in features] == [(25, 18), (13, 9), (7, 5), (4, 3)]
    outputs = head(features)
    assert [o.shape for o in outputs] == [(1, 8, *f.shape[-2:]) for f in features]


def test_alexnet_fc_shapes() -> None:
    frame = extract_suite("alexnet_fc")
    assert list(frame["layer"]) == ["fc6", "fc7", "fc8"]
    assert [_shape(row) for row in frame.to_dict("records")] == [
        (1600, 256, 4096, 6, 6, 6, 6, 0, 0, 1, 1, 1, 1, 1),
        (1600, 4096, 4096, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1),
        (1600, 4096, 1000, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1),
    ]
    problems = suite_problems(frame, "float16")
    assert problems[0].is_fully_connected and problems[1].is_pointwise and problems[2].is_pointwise


def test_unknown_suite() -> None:
    with pytest.raises(KeyError, match="nope"):
        extract_suite("nope")


# ------------------------------------------------------------------------------------------- extraction
def test_extract_layers_padding_strings_and_modes() -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding="same", dilation=2),  # total 4: symmetric 2
        nn.Conv2d(8, 8, (1, 5), padding="same"),  # total (0, 4): (0, 2)
        nn.Conv2d(8, 8, 3, padding="valid"),
        nn.Conv2d(8, 8, 3, padding=2, padding_mode="reflect"),  # padded first: recorded as 12x13, padding 0
        nn.Conv2d(8, 6, 3, stride=(2, 1), padding=(1, 0), groups=2),
    )
    rows = extract_layers(model, torch.empty(2, 3, 10, 11, device="meta"))
    assert [r["layer"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert [_shape(r) for r in rows] == [
        (2, 3, 8, 10, 11, 3, 3, 2, 2, 1, 1, 2, 2, 1),
        (2, 8, 8, 10, 11, 1, 5, 0, 2, 1, 1, 1, 1, 1),
        (2, 8, 8, 10, 11, 3, 3, 0, 0, 1, 1, 1, 1, 1),
        (2, 8, 8, 12, 13, 3, 3, 0, 0, 1, 1, 1, 1, 1),
        (2, 8, 6, 10, 11, 3, 3, 1, 0, 2, 1, 1, 1, 2),
    ]
    for row in rows:
        ConvProblem(**{f: row[f] for f in LAYER_FIELDS})  # every record is a valid problem


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_same_padding_even_kernel_records_padded_input() -> None:
    # An even kernel needs odd total padding; PyTorch pads the input by one first and then passes the smaller
    # half, so the kernel sees an input one larger with padding (k - 1) // 2 and the output keeps the size.
    rows = extract_layers(nn.Conv2d(3, 4, (2, 4), padding="same"), torch.empty(1, 3, 10, 11, device="meta"))
    assert rows[0]["layer"] == ""
    row = rows[0]
    assert (row["h"], row["w"], row["pad_h"], row["pad_w"]) == (11, 12, 0, 1)
    problem = ConvProblem(**{f: row[f] for f in LAYER_FIELDS})
    assert (problem.out_h, problem.out_w) == (10, 11)


def test_extract_layers_falls_back_to_cpu_and_counts_calls() -> None:
    class NeedsData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            if y.sum().item() != 0.5:  # .item() has no meta implementation
                y = self.conv(y[:, :3])  # the same module called twice: two rows
            return y

    with torch.device("meta"):
        model = NeedsData()
    model.train()
    rows = extract_layers(model, torch.empty(1, 3, 8, 8, device="meta"))
    assert [r["layer"] for r in rows] == ["conv", "conv"]
    assert model.conv.weight.is_meta and model.training  # the caller's model is left as it was


# ------------------------------------------------------------------------------------------------ storage
def test_write_load_round_trip(tmp_path: Path) -> None:
    paths = write_suites(tmp_path, ["fpn", "alexnet_fc"])
    assert paths == [tmp_path / "alexnet_fc.csv", tmp_path / "fpn.csv"]  # sorted
    first = [p.read_bytes() for p in paths]
    write_suites(tmp_path, ["alexnet_fc", "fpn"])
    assert [p.read_bytes() for p in paths] == first  # deterministic
    for name in ("fpn", "alexnet_fc"):
        pd.testing.assert_frame_equal(load_suite(name, tmp_path), extract_suite(name))
    both = load_suites(directory=tmp_path)
    assert list(both["network"].unique()) == ["alexnet_fc", "fpn"] and len(both) == 3 + 160
    assert len(load_suites(["fpn"], tmp_path)) == 160


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="resnet50.csv"):
        load_suite("resnet50", tmp_path)
    with pytest.raises(ValueError, match="no suite CSV"):
        load_suites(directory=tmp_path)


def test_load_missing_column(tmp_path: Path) -> None:
    write_suites(tmp_path, ["alexnet_fc"])
    path = tmp_path / "alexnet_fc.csv"
    pd.read_csv(path).drop(columns=["dilation_w"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"alexnet_fc\.csv.*dilation_w"):
        load_suite("alexnet_fc", tmp_path)


def test_committed_csvs_are_current() -> None:
    # The committed files must be loadable and match what the code extracts now; the torchvision suites are
    # compared only where torchvision is installed, and may not have been generated yet.
    try:
        import torchvision  # noqa: F401

        have_torchvision = True
    except ImportError:
        have_torchvision = False
    for name, spec in SUITES.items():
        path = DEFAULT_SUITES_DIR / f"{name}.csv"
        if spec.needs_torchvision and not path.exists():
            continue
        committed = load_suite(name)
        if have_torchvision or not spec.needs_torchvision:
            pd.testing.assert_frame_equal(committed, extract_suite(name), obj=str(path))


# ----------------------------------------------------------------------------------------------- problems
def test_suite_problems_dedupe_and_layer_mapping() -> None:
    rows = [
        {
            "network": "a",
            "layer": "x",
            "size": "8x8",
            "n": 1,
            "c": 8,
            "k": 8,
            "h": 8,
            "w": 8,
            "r": 3,
            "s": 3,
            "pad_h": 1,
            "pad_w": 1,
            "stride_h": 1,
            "stride_w": 1,
            "dilation_h": 1,
            "dilation_w": 1,
            "groups": 1,
        },
        {
            "network": "a",
            "layer": "y",
            "size": "8x8",
            "n": 1,
            "c": 8,
            "k": 16,
            "h": 8,
            "w": 8,
            "r": 1,
            "s": 1,
            "pad_h": 0,
            "pad_w": 0,
            "stride_h": 1,
            "stride_w": 1,
            "dilation_h": 1,
            "dilation_w": 1,
            "groups": 1,
        },
        {
            "network": "b",
            "layer": "z",
            "size": "8x8",
            "n": 1,
            "c": 8,
            "k": 8,
            "h": 8,
            "w": 8,
            "r": 3,
            "s": 3,
            "pad_h": 1,
            "pad_w": 1,
            "stride_h": 1,
            "stride_w": 1,
            "dilation_h": 1,
            "dilation_w": 1,
            "groups": 1,
        },
    ]
    frame = pd.DataFrame(rows)
    problems = suite_problems(frame, "bfloat16", "nhwc")
    assert [p.k for p in problems] == [8, 16]  # first appearance order, duplicate dropped
    assert all(p.dtype == "bfloat16" and p.layout == "nhwc" and p.direction == "fwd" for p in problems)
    pairs = suite_layer_problems(frame, "float32")
    assert [(row["network"], row["layer"]) for row, _ in pairs] == [("a", "x"), ("a", "y"), ("b", "z")]
    assert pairs[0][1] == pairs[2][1] == ConvProblem(1, 8, 8, 8, 8, 3, 3, 1, 1)
    with pytest.raises(ValueError, match="groups"):
        suite_problems(frame.drop(columns=["groups"]), "float32")


def test_fpn_suite_problems_cover_all_sizes() -> None:
    frame = extract_suite("fpn")
    pairs = suite_layer_problems(frame, "float16")
    assert len(pairs) == len(frame)
    # 20 distinct sizes, all multiples of 32, give distinct feature sizes at every level: nothing to dedupe.
    assert len(suite_problems(frame, "float16")) == 160
    assert len(suite_problems(pd.concat([frame, frame]), "float16")) == 160


# ------------------------------------------------------------------------------------------- torchvision
def test_torchvision_resnet50_and_alexnet() -> None:
    pytest.importorskip("torchvision")
    resnet = extract_suite("resnet50")
    assert len(resnet) == 53
    assert _shape(resnet.iloc[0].to_dict()) == (32, 3, 64, 224, 224, 7, 7, 3, 3, 2, 2, 1, 1, 1)
    assert resnet.iloc[0]["layer"] == "conv1"
    last = resnet.iloc[-1].to_dict()
    assert (last["c"], last["k"], last["h"], last["w"]) == (512, 2048, 7, 7)
    alexnet = extract_suite("alexnet")
    assert list(alexnet["h"]) == [224, 27, 13, 13, 13]
    # Its last conv output (256 x 13 x 13, max-pooled to 6 x 6) is what alexnet_fc's fc6 consumes.
    assert alexnet.iloc[-1]["k"] == 256
    for name in ("mobilenet_v3_large", "efficientnet_b0", "vgg16", "densenet121"):
        frame = extract_suite(name)
        assert len(frame) > 0 and (frame["n"] == 32).all()
        suite_problems(frame, "float32")  # every layer is a valid problem
