"""`algosel layers`: models defined in files of their own (no torchvision), every conv call extracted, the errors of
a model or an input it rejects, the file written and read back, and the command line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
from support import REPO, run_algosel
from torch import nn

from algosel.cli import main
from algosel.measure.conv_calls import extract_conv_calls
from algosel.measure.layer_table import LAYER_FIELDS, SUITE_COLUMNS
from algosel.measure.layers import (
    LAYERS_COLUMNS,
    LayersError,
    default_network_name,
    load_layers,
    load_model,
    model_layers,
    parse_input,
    size_labels,
    write_layers,
)
from algosel.measure.suites import FPNHead, load_suite
from algosel.problem import ConvProblem

#: A model file as a user writes one: a strided conv, a dilated one, a depthwise block, a functional conv with its
#: own weight (no nn.Conv2d), a transposed conv (not covered, counted) and a 1x1 head.
MODEL_FILE = '''
import torch
import torch.nn.functional as F
from torch import nn


class Standardised(nn.Module):
    """A convolution through F.conv2d with a weight of its own (as weight-standardised layers are written)."""

    def __init__(self, c, k):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, c, 3, 3))

    def forward(self, x):
        return F.conv2d(x, self.weight, None, stride=1, padding=2, dilation=2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 13, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(13, 13, 3, padding=1, groups=13)
        self.std = Standardised(13, 21)
        self.up = nn.ConvTranspose2d(21, 21, 2, stride=2)
        self.head = nn.Conv2d(21, 5, 1)

    def forward(self, x):
        return self.head(self.up(self.std(self.dw(self.stem(x)))))


def make_model():
    return Net()


def not_a_model():
    return {"weights": 1}


def raises():
    raise RuntimeError("no such weights file")


NUMBER = 3
'''


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "usernet.py"
    path.write_text(MODEL_FILE)
    return path


def _shape(row: dict) -> tuple[int, ...]:
    return tuple(int(row[f]) for f in LAYER_FIELDS)


# -------------------------------------------------------------------------------------------- extraction
def test_every_conv_call_of_a_file_model_is_extracted(model_file: Path) -> None:
    model = load_model(f"{model_file}:make_model")
    assert all(p.is_meta for p in model.parameters()), "built on the meta device"
    frame, skipped = model_layers(model, [parse_input("4,3,32,32")], "usernet")
    assert list(frame.columns) == [*SUITE_COLUMNS, "layout", "input_grad"] and set(frame["layout"]) == {"nchw"}
    assert list(frame["layer"]) == ["stem", "dw", "std", "head"]
    assert list(frame["input_grad"]) == [0, 1, 1, 1]  # the stem's input is the image
    assert [_shape(r) for r in frame.to_dict("records")] == [
        (4, 3, 13, 32, 32, 3, 3, 1, 1, 2, 2, 1, 1, 1),
        (4, 13, 13, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 13),
        (4, 13, 21, 16, 16, 3, 3, 2, 2, 1, 1, 2, 2, 1),  # the functional conv, named by its module
        (4, 21, 5, 32, 32, 1, 1, 0, 0, 1, 1, 1, 1, 1),  # after the transposed conv doubled the size
    ]
    assert skipped == {"conv_transpose2d": 1}
    assert set(frame["network"]) == {"usernet"} and set(frame["size"]) == {"32x32"}


def test_functional_conv_at_the_root_and_nn_conv2d_counted_once() -> None:
    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")  # F.pad + F.conv2d inside
            self.w = nn.Parameter(torch.empty(6, 4, 1, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.conv2d(self.conv(x), self.w)

    calls = extract_conv_calls(Root(), torch.empty(2, 3, 8, 8, device="meta"))
    assert [r["layer"] for r in calls.records] == ["conv", ""]
    # The module's own record is the problem its convolution runs: the reflect-padded input, padding 0.
    assert _shape(calls.records[0])[3:9] == (10, 10, 3, 3, 0, 0)
    assert calls.skipped == {}


def test_several_inputs_give_one_block_each(model_file: Path) -> None:
    model = load_model(f"{model_file}:make_model")
    frame, _ = model_layers(model, [parse_input("2,3,32,32"), parse_input("2,3,48,64")], "usernet")
    assert list(frame["size"]) == ["32x32"] * 4 + ["48x64"] * 4
    assert list(frame.loc[frame["size"] == "48x64", "h"]) == [48, 24, 24, 48]


def test_inputs_of_one_size_are_labelled_by_their_whole_shape() -> None:
    assert size_labels([((16, 3, 128, 128),), ((32, 3, 128, 128),)]) == ["16x3x128x128", "32x3x128x128"]
    assert size_labels([((1, 3, 8, 8), (1, 5, 4, 4))]) == ["8x8"]
    assert size_labels([((8, 20),)]) == ["8x20"]


def test_a_model_of_several_inputs() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 1), nn.Conv2d(5, 4, 3, padding=1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(y)

    frame, _ = model_layers(Two(), [parse_input("1,3,8,8;1,5,8,8")], "two")
    assert [(r["layer"], r["c"]) for r in frame.to_dict("records")] == [("a", 3), ("b", 5)]


@pytest.mark.parametrize(
    ("text", "shapes"), [("32,3,224,224", ((32, 3, 224, 224),)), ("1,3,8,8;1,5,4,4", ((1, 3, 8, 8), (1, 5, 4, 4)))]
)
def test_parse_input(text: str, shapes: tuple) -> None:
    assert parse_input(text) == shapes


@pytest.mark.parametrize("text", ["", "32,3,x,224", "0,3,8,8", "1,3,8,8;", "-1"])
def test_parse_input_rejects_a_bad_shape(text: str) -> None:
    with pytest.raises(LayersError, match="--input"):
        parse_input(text)


def test_default_network_names() -> None:
    assert default_network_name("examples/mynet.py:make_model") == "mynet"
    assert default_network_name("torchvision.models:resnet50") == "resnet50"


# ----------------------------------------------------------------------------------------- model errors
@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("not_a_model", r"not_a_model\(\) returned a dict, not a torch.nn.Module"),
        ("raises", r"raises\(\) raised RuntimeError: no such weights file"),
        ("missing", "has no attribute 'missing'"),
        ("NUMBER", "NUMBER is a int, not a callable"),
    ],
)
def test_a_callable_that_is_not_a_model_is_one_error(model_file: Path, attr: str, message: str) -> None:
    with pytest.raises(LayersError, match=message) as info:
        load_model(f"{model_file}:{attr}")
    assert str(model_file) in str(info.value) and "\n" not in str(info.value)


def test_a_file_that_does_not_import_names_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\ndef make_model(:\n")
    with pytest.raises(LayersError, match=r"importing .*broken.py failed: SyntaxError"):
        load_model(f"{bad}:make_model")
    with pytest.raises(LayersError, match="no such file"):
        load_model(f"{tmp_path / 'absent.py'}:make_model")
    with pytest.raises(LayersError, match=r"importing no_such_package_xyz.models failed: ModuleNotFoundError"):
        load_model("no_such_package_xyz.models:net")
    with pytest.raises(LayersError, match="expected module:callable"):
        load_model("just_a_name")


def test_an_input_the_model_rejects_names_model_input_and_message(model_file: Path) -> None:
    model = load_model(f"{model_file}:make_model")
    with pytest.raises(LayersError) as info:
        model_layers(model, [parse_input("4,5,32,32")], "usernet", name="usernet.py:make_model")
    text = str(info.value)
    assert text.startswith("model usernet.py:make_model rejected input 4,5,32,32: RuntimeError: ")
    assert "channels" in text and "\n" not in text


def test_a_model_without_2d_convs_is_an_error() -> None:
    with pytest.raises(LayersError, match=r"no 2-D convolution was called \(it called conv1d x1\)"):
        model_layers(nn.Conv1d(3, 4, 3), [parse_input("1,3,16")], "audio")


# ------------------------------------------------------------------------------------------ the format
def test_write_load_round_trip(tmp_path: Path, model_file: Path) -> None:
    frame, _ = model_layers(load_model(f"{model_file}:make_model"), [parse_input("4,3,32,32")], "usernet")
    path = write_layers(frame, tmp_path / "sub" / "layers.csv")
    loaded = load_layers(path)
    assert list(loaded.columns) == [*LAYERS_COLUMNS, "input_grad"] and (loaded["calls"] == 1).all()
    columns = [*SUITE_COLUMNS, "layout"]
    pd.testing.assert_frame_equal(loaded[columns], frame[columns].astype({f: "int64" for f in LAYER_FIELDS}))
    assert list(loaded["input_grad"]) == [str(v) for v in frame["input_grad"]]
    # A layers file is a suite file: the suites' reader takes it.
    pd.testing.assert_frame_equal(load_suite("layers", tmp_path / "sub"), loaded[[*columns, "input_grad"]])
    # and writing what was read gives the same bytes
    again = write_layers(loaded.drop(columns="calls"), tmp_path / "again.csv")
    assert again.read_bytes() == path.read_bytes()


def test_cli_layers_writes_the_file(tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "usernet.csv"
    argv = ["layers", "--model", f"{model_file}:make_model", "--input", "4,3,32,32", "--input", "4,3,64,64"]
    assert main([*argv, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"wrote {out}: network usernet, 8 conv calls, 8 distinct shapes, 2 input size(s)",
        "not recorded (algosel covers 2-D convolutions): conv_transpose2d x2",
    ]
    frame = load_layers(out)
    assert list(frame["size"].unique()) == ["32x32", "64x64"] and set(frame["network"]) == {"usernet"}
    # The file exists now: replacing it takes --overwrite (an existing file could be the user's own).
    assert main([*argv, "--out", str(out), "--network", "mine"]) == 2
    assert set(load_layers(out)["network"]) == {"usernet"}
    assert main([*argv, "--out", str(out), "--network", "mine", "--overwrite"]) == 0
    assert set(load_layers(out)["network"]) == {"mine"}


def test_cli_layers_imports_a_module_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "nets.py").write_text(MODEL_FILE)
    got = run_algosel("layers", "--model", "mypkg.nets:Net", "--input", "1,3,16,16", "--out", "n.csv", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("wrote n.csv: network Net, 4 conv calls")


@pytest.mark.parametrize(
    ("model", "inputs", "expected"),
    [
        ("{file}:not_a_model", ["1,3,8,8"], "not_a_model() returned a dict, not a torch.nn.Module"),
        ("{file}:make_model", ["1,4,8,8"], "rejected input 1,4,8,8: RuntimeError: "),
        ("{file}:make_model", ["1,3,8"], "rejected input 1,3,8: "),
        ("{dir}/nope.py:make_model", ["1,3,8,8"], "no such file"),
        ("{file}:make_model", ["1,3,a,8"], "--input '1,3,a,8'"),
    ],
)
def test_cli_layers_errors_are_one_line_exit_2(
    tmp_path: Path, model_file: Path, model, inputs, expected, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``main`` in this process (a subprocess costs seconds of torch's import a row; the command's own
    subprocess run is test_cli_layers_imports_a_module_from_the_working_directory's)."""
    spec = model.format(file=model_file, dir=tmp_path)
    argv = ["layers", "--model", spec, *[a for i in inputs for a in ("--input", i)], "--out", "x.csv"]
    monkeypatch.chdir(tmp_path)
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors (--input's type)
        status = exc.code
    got = capsys.readouterr()
    assert status == 2, got.err
    lines = got.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("algosel layers: error: ") and expected in lines[0]
    if "rejected" in expected:
        assert spec in lines[0]
    assert not (tmp_path / "x.csv").exists()


def test_the_example_network_has_the_layers_the_tutorial_says(tmp_path: Path) -> None:
    frame, skipped = model_layers(
        load_model(f"{REPO / 'examples' / 'mynet.py'}:make_model"), [parse_input("16,3,128,128")], "mynet"
    )
    problems = [ConvProblem(**{f: int(r[f]) for f in LAYER_FIELDS}) for r in frame.to_dict("records")]
    assert 15 <= len(problems) <= 30 and not skipped
    assert any(p.stride_h == 2 for p in problems) and any(p.dilation_h > 1 for p in problems)
    assert any(p.is_depthwise for p in problems) and any(p.r != p.s for p in problems)
    assert problems[-1].r == 1 and problems[-1].k == 11  # the 1x1 head
    assert any(p.c % 8 and p.k % 8 for p in problems)
    suite_shapes = {
        ConvProblem(**{f: int(r[f]) for f in LAYER_FIELDS}).shape_key
        for name in ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "vgg16", "alexnet", "densenet121", "fpn")
        for r in load_suite(name).to_dict("records")
    }
    assert not {p.shape_key for p in problems} & suite_shapes, "the example is in no suite"


def test_model_file_text_is_a_valid_module() -> None:
    compile(textwrap.dedent(MODEL_FILE), "usernet.py", "exec")


def test_layers_of_the_suites_models_are_the_committed_suites(tmp_path: Path) -> None:
    out = tmp_path / "alexnet_fc.csv"
    argv = ["layers", "--model", "algosel.measure.suites:alexnet_fc", "--input", "1600,256,6,6", "--out", str(out)]
    assert main(argv) == 0
    pd.testing.assert_frame_equal(load_layers(out)[list(SUITE_COLUMNS)], load_suite("alexnet_fc"))
    # The FPN head takes four feature maps: one input of four tensors, the suite's block at 800x1216.
    maps = FPNHead().example_inputs(800, 1216)
    text = ";".join(",".join(str(v) for v in t.shape) for t in maps)
    argv = ["layers", "--model", "algosel.measure.suites:FPNHead", "--input", text, "--network", "fpn"]
    assert main([*argv, "--out", str(tmp_path / "fpn.csv")]) == 0
    fpn = load_suite("fpn")
    block = fpn[fpn["size"] == "800x1216"].reset_index(drop=True)
    got = load_layers(tmp_path / "fpn.csv")[list(SUITE_COLUMNS)]
    pd.testing.assert_frame_equal(got.drop(columns="size"), block.drop(columns="size"))
    assert set(got["size"]) == {"200x304"}, "labelled by the first tensor's size"


def test_layers_of_torchvision_resnet50_are_its_committed_suite(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    out = tmp_path / "resnet50.csv"
    assert main(["layers", "--model", "torchvision.models:resnet50", "--input", "32,3,224,224", "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(load_layers(out)[list(SUITE_COLUMNS)], load_suite("resnet50"))
