"""Layers files: their validation, the cases of `algosel sweep --layers` (and its dry run) and a CPU sweep of them
with the fake timer, and the layout a network runs each convolution in, recorded and swept."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support import REPO, run_algosel
from torch import nn

from algosel.candidates import DEFAULT_ID
from algosel.cli import main
from algosel.measure.cases import build_cases
from algosel.measure.layer_table import LAYER_FIELDS, SUITE_COLUMNS
from algosel.measure.layers import load_layers, model_layers, parse_input, write_layers
from algosel.measure.suites import load_suite
from algosel.measure.sweep import Sweeper, run_sweep
from algosel.measure.timing import FakeTimer
from algosel.problem import ConvProblem
from algosel.records import load_records
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace


def _layers_csv(tmp_path: Path, rows: list[dict], name: str = "l.csv", drop: str | None = None) -> Path:
    base = {"network": "net", "layer": "a", **dict.fromkeys(LAYER_FIELDS, 1), "size": "4x4"}
    base.update(n=2, c=4, k=4, h=4, w=4, r=3, s=3, pad_h=1, pad_w=1)
    frame = pd.DataFrame([{**base, **row} for row in rows])
    if drop:
        frame = frame.drop(columns=drop)
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    ("rows", "drop", "message"),
    [
        ([{}, {"k": "x8"}], None, r"line 3, column 'k': 'x8' is not an integer"),
        ([{"c": "4.5"}], None, r"line 2, column 'c': '4.5' is not an integer"),
        ([{}, {}, {"r": 9}], None, r"line 4: not a valid convolution: ConvProblem.r=9"),
        ([{"groups": 3}], None, r"line 2: not a valid convolution: ConvProblem.c=4 is not divisible by groups=3"),
        ([{"calls": 0}], None, r"line 2, column 'calls': must be positive, got 0"),
        ([{"network": ""}], None, r"line 2, column 'network' is empty"),
        ([{}], "stride_w", r"is missing column\(s\): stride_w"),
    ],
)
def test_load_layers_names_file_line_and_column(tmp_path: Path, rows: list[dict], drop: str | None, message: str):
    path = _layers_csv(tmp_path, rows, drop=drop)
    with pytest.raises(ValueError, match=message) as info:
        load_layers(path)
    assert str(info.value).startswith(f"layers file {path}")


def test_load_layers_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"absent.csv does not exist"):
        load_layers(tmp_path / "absent.csv")
    header = tmp_path / "header.csv"
    header.write_text(",".join(SUITE_COLUMNS) + "\n")
    with pytest.raises(ValueError, match="holds no rows"):
        load_layers(header)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="not a readable CSV file"):
        load_layers(empty)


def test_load_layers_keeps_calls(tmp_path: Path) -> None:
    frame = load_layers(_layers_csv(tmp_path, [{"calls": 7}, {"k": 8, "calls": 2}]))
    assert list(frame["calls"]) == [7, 2] and frame["calls"].dtype == "int64"


# -------------------------------------------------------------------------------------------- the cases
def test_cases_of_layers_files(tmp_path: Path) -> None:
    a = _layers_csv(tmp_path, [{}, {"layer": "b"}, {"layer": "c", "k": 8}], "a.csv")  # "b" repeats "a"'s shape
    b = _layers_csv(tmp_path, [{"network": "other", "k": 8}, {"network": "other", "k": 12}], "b.csv")
    cases = build_cases(None, [], ["float32", "float16"], ["nchw", "nhwc"], layers=[a, b])
    shapes = [(2, 4, 4), (2, 4, 8), (2, 4, 12)]
    assert len(cases) == len(shapes) * 2 * 2
    assert {c.source for c in cases} == {"layers:net", "layers:other"}
    # k=8 is in both files: labelled with the first
    assert {c.source for c in cases if c.problem.k == 8} == {"layers:net"}
    assert {(c.problem.n, c.problem.c, c.problem.k) for c in cases} == set(shapes)
    assert {(c.problem.dtype, c.problem.layout) for c in cases} == {
        (d, lay) for d in ("float32", "float16") for lay in ("nchw", "nhwc")
    }
    assert all(c.problem.direction == "fwd" for c in cases)


def test_layers_come_before_suites_and_the_grid(tmp_path: Path) -> None:
    suite = load_suite("alexnet_fc")
    path = write_layers(suite.assign(network="mine"), tmp_path / "mine.csv")
    cases = build_cases(None, ["alexnet_fc"], ["float32"], layers=[path])
    assert len(cases) == 3 and {c.source for c in cases} == {"layers:mine"}


def test_every_file_is_validated_before_cases_are_built(tmp_path: Path) -> None:
    good = _layers_csv(tmp_path, [{}], "good.csv")
    bad = _layers_csv(tmp_path, [{"h": "big"}], "bad.csv")
    with pytest.raises(ValueError, match=r"bad.csv, line 2, column 'h'"):
        build_cases(None, [], ["float32"], layers=[good, bad])


def test_a_cpu_sweep_of_layers_cases_resumes_from_other_datasets(tmp_path: Path) -> None:
    path = _layers_csv(tmp_path, [{}, {"k": 8}, {"layer": "fc", "h": 3, "w": 3, "pad_h": 0, "pad_w": 0}])
    cases = build_cases(None, [], ["float32"], layers=[path])
    env = {"env_id": "cpu-layers", "gpu_name": "none"}
    times = {"gemm:fc": 0.5, "gemm:pointwise": 0.4, DEFAULT_ID: 1.0}

    def sweeper() -> Sweeper:
        return Sweeper([GemmSpace(), PyTorchDefaultSpace()], FakeTimer(times.__getitem__), env, device="cpu")

    first = run_sweep(cases[:2], sweeper(), tmp_path / "old", progress=False)
    assert first.measured == 2
    report = run_sweep(cases, sweeper(), tmp_path / "new", resume_from=[tmp_path / "old"], progress=False)
    assert (report.measured, report.skipped_done) == (1, 2)
    frame, _ = load_records(tmp_path / "new")
    assert set(frame["source"]) == {"layers:net"}
    assert set(frame["case_key"]) == {cases[2].key}
    assert set(frame["candidate_id"]) == {"gemm:fc", DEFAULT_ID}  # the 3x3 on 3x3 is fully connected
    assert (frame["status"] == "ok").all() and len(frame) == 3 * 2


def test_cli_sweep_layers_validates_before_any_gpu_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _layers_csv(tmp_path, [{}, {"w": "wide"}], "bad.csv")
    got = run_algosel("sweep", "--layers", str(bad), "--out", "out", cwd=tmp_path)
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert lines == [f"algosel sweep: error: layers file {bad}, line 3, column 'w': 'wide' is not an integer"]
    assert not (tmp_path / "out").exists()
    # the same check in this process (a second subprocess would cost seconds of imports)
    assert main(["sweep", "--layers", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "absent.csv does not exist" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_sweep_dry_run_of_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _layers_csv(tmp_path, [{}, {"k": 8}])
    assert main(["sweep", "--layers", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    # no suites unless asked for: only the layers, in both default dtypes
    assert capsys.readouterr().out.strip() == "4 cases (0 from the grid, 4 from layers files)"
    argv = ["sweep", "--layers", str(path), "--suites", "alexnet_fc", "--dtypes", "float32", "--dry-run"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.strip() == "5 cases (0 from the grid, 2 from layers files)"


def test_cli_sweep_dry_run_counts_what_the_datasets_already_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two alexnet_fc layers, one of them (fc6 in float16) in the shipped H200 records; one shape that is not.
    suite = load_suite("alexnet_fc")
    mine = pd.concat([suite.iloc[:1], suite.iloc[:1].assign(k=4000, layer="fc6b")]).assign(network="mine")
    path = write_layers(mine, tmp_path / "mine.csv")
    argv = ["sweep", "--layers", str(path), "--dtypes", "float16", "--out", str(tmp_path / "o"), "--dry-run"]
    assert main([*argv, "--resume-from", str(REPO / "data" / "sweeps" / "h200")]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "2 cases (0 from the grid, 2 from layers files); 1 already recorded, 1 to measure"
    assert ConvProblem(**{f: int(mine.iloc[0][f]) for f in LAYER_FIELDS}).is_fully_connected


# ------------------------------------------------------------------------------------------ layouts
class _PermutingBlock(nn.Module):
    """As torchvision's ConvNeXt block: a depthwise convolution, a linear layer on channels last, and back, so that
    the next block's convolution gets a channels_last-strided input."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.pw = nn.Linear(c, c)

    def forward(self, x):
        return self.pw(self.dw(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def test_the_layout_a_network_runs_each_convolution_in_is_recorded_and_swept(tmp_path: Path) -> None:
    from algosel.measure.cases import build_cases

    model = nn.Sequential(_PermutingBlock(), _PermutingBlock()).to("meta")
    frame, _ = model_layers(model, [parse_input("2,8,16,16")], "convnext_like")
    assert list(frame["layout"]) == ["nchw", "nhwc"]  # the first gets the NCHW input, the second a permuted one
    path = write_layers(frame, tmp_path / "layers.csv")
    assert load_layers(path)["layout"].tolist() == ["nchw", "nhwc"]
    cases = build_cases(dtypes=("float32",), layouts=("nchw",), suites=(), grid=None, layers=[path])
    # one shape: NCHW as asked, and NHWC as the network ran its second call
    assert sorted(c.problem.layout for c in cases) == ["nchw", "nhwc"]


class _Downsample(nn.Module):
    """As ConvNeXt's downsampling layer after a block: a strided convolution of a channels_last-strided input."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 2, stride=2)

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_convolution_after_a_channels_last_one_is_recorded_as_the_gpu_runs_it(device: str) -> None:
    # CUDA (and the CPU) keep a channels_last input's layout in the output; the meta device's convolution returns a
    # contiguous tensor, which recorded ConvNeXt's block after each downsampling as NCHW.
    model = nn.Sequential(_PermutingBlock(), _Downsample(), _PermutingBlock()).to(device)
    frame, _ = model_layers(model, [parse_input("2,8,16,16")], "convnext_like")
    assert list(frame["layout"]) == ["nchw", "nhwc", "nhwc"]


def test_a_layers_file_with_a_bad_layout_names_the_line(tmp_path: Path) -> None:
    frame, _ = model_layers(nn.Conv2d(3, 4, 3).to("meta"), [parse_input("1,3,8,8")], "net")
    frame.loc[0, "layout"] = "nwhc"
    path = write_layers(frame, tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=r"bad.csv, line 2, column 'layout': 'nwhc' is not nchw, nhwc or empty"):
        load_layers(path)
