"""Tests of the ``algosel`` command line on CPU: every subcommand through ``algosel.cli.main``."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.cli import build_parser, main, run_command
from algosel.cli.sweep import cmd_sweep
from algosel.measure.cases import build_cases
from algosel.measure.grid import GridSpec, sample_grid
from algosel.measure.sweep import SweepCase, Sweeper, run_sweep
from algosel.measure.timing import FakeTimer
from algosel.problem import ConvProblem
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "data" / "sweeps" / "h200"
needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


def _one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"algosel {command}: error: ")
    return lines[0]


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: algosel" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------- grid
def test_grid_prints_count_shape_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "--count", "5"]) == 0
    keys = capsys.readouterr().out.split()
    assert keys == [p.shape_key for p in sample_grid(GridSpec(count=5))]
    for key in keys:
        assert ConvProblem.from_key(f"{key}_float32_nchw_fwd").shape_key == key


def test_grid_seed_changes_the_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["grid", "--count", "5", "--seed", "0"])
    first = capsys.readouterr().out
    main(["grid", "--count", "5", "--seed", "1"])
    assert capsys.readouterr().out != first


# ---------------------------------------------------------------------------------------------------- sweep
def test_sweep_dry_run_counts_suite_cases(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["sweep", "--out", str(tmp_path / "out"), "--dry-run", "--suites", "fpn,alexnet_fc", "--dtypes", "float32"]
    assert main(argv) == 0
    expected = len(build_cases(None, ["fpn", "alexnet_fc"], ["float32"]))
    assert expected > 0
    assert capsys.readouterr().out.strip() == f"{expected} cases (0 from the grid)"
    assert not (tmp_path / "out").exists(), "a dry run writes nothing"


def test_sweep_dry_run_counts_grid_cases_per_dtype_and_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "sweep",
        "--out",
        "unused",
        "--dry-run",
        "--suites",
        "none",
        "--grid",
        "7",
        "--dtypes",
        "float32,float16",
        "--layouts",
        "nchw,nhwc",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == "28 cases (28 from the grid)"


def test_sweep_grid_mix_loss_labels_its_cases_and_orders_them_shape_by_shape(tmp_path: Path) -> None:
    from algosel.cli import build_parser  # noqa: PLC0415
    from algosel.cli.sweep import cases_from_args  # noqa: PLC0415

    argv = ["sweep", "--out", str(tmp_path), "--suites", "none", "--grid", "3", "--seed", "1", "--grid-mix", "loss",
            "--dtypes", "float32,float16", "--grid-layouts", "nchw,nhwc"]  # fmt: skip
    cases = cases_from_args(build_parser().parse_args(argv))
    shapes = sample_grid(GridSpec(count=3, seed=1, mix="loss"))
    assert [c.problem.shape_key for c in cases] == [p.shape_key for p in shapes for _ in range(4)]
    assert {c.source for c in cases} == {"grid:loss"}
    assert [(c.problem.dtype, c.problem.layout) for c in cases[:4]] == [
        ("float32", "nchw"), ("float32", "nhwc"), ("float16", "nchw"), ("float16", "nhwc")
    ]  # fmt: skip


def test_grid_mix_loss_prints_the_loss_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grid", "--count", "4", "--seed", "1", "--mix", "loss"]) == 0
    assert capsys.readouterr().out.split() == [p.shape_key for p in sample_grid(GridSpec(4, seed=1, mix="loss"))]


def test_sweep_dry_run_honours_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--out", "unused", "--dry-run", "--suites", "fpn", "--grid", "5", "--limit", "3"]) == 0
    assert capsys.readouterr().out.strip().startswith("3 cases")


@needs_no_gpu
def test_sweep_without_gpu_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sweep", "--out", str(tmp_path / "out"), "--suites", "none", "--grid", "2"]) == 2
    captured = capsys.readouterr()
    assert "needs a CUDA GPU" in _one_line_error(captured.err, "sweep")
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--dtypes", "float32,float64"),
        ("--layouts", "nchw,hwcn"),
        ("--grid-layouts", "chwn"),
        ("--suites", "resnet50,resnet51"),
        ("--grid-mix", "lossy"),
    ],
)
def test_sweep_bad_option_value_exits_2_naming_it(capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    assert main(["sweep", "--out", "unused", "--dry-run", option, value]) == 2
    line = _one_line_error(capsys.readouterr().err, "sweep")
    bad = value.rsplit(",", maxsplit=1)[-1]
    assert option in line and repr(bad) in line


def _sweep_as_on_a_gpu(argv: list[str]) -> int:
    """``algosel ARGV``, a sweep, through the command line's parser and error boundary as on a machine with a CUDA
    GPU (the sweep asks ``cuda_available``): nothing reaches a GPU before the errors tested here (the GEMM space
    needs no GPU library)."""
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.func = functools.partial(cmd_sweep, cuda_available=lambda: True)
    return run_command(args)


@pytest.mark.parametrize(("value", "message"), [("x", "must look like i/n"), ("4/4", "need 0 <= i < n")])
def test_sweep_bad_shard_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str, message: str
) -> None:
    argv = [
        "sweep",
        "--out",
        str(tmp_path / "out"),
        "--suites",
        "none",
        "--grid",
        "2",
        "--spaces",
        "gemm",
        "--shard",
        value,
    ]
    assert _sweep_as_on_a_gpu(argv) == 2
    line = _one_line_error(capsys.readouterr().err, "sweep")
    assert "--shard" in line and value in line and message in line


def test_sweep_unknown_space_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--out", "unused", "--suites", "none", "--grid", "1", "--spaces", "gemm,magic"]
    assert _sweep_as_on_a_gpu(argv) == 2
    assert "'magic'" in _one_line_error(capsys.readouterr().err, "sweep")


# ------------------------------------------------------------------------------------------------ summarize
def test_summarize_shipped_h200_records_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(H200), "--worst", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("environment ")
    assert "NVIDIA H200, cuDNN 91900" in out.splitlines()[0]
    assert "problems (1914 cases)" in out
    header = next(line for line in out.splitlines() if line.split()[:3] == ["group", "value", "selector"])
    columns = ["group", "value", "selector", "problems", "geomean", "p95", "worst", "within_5pct", "top1"]
    assert header.split() == columns
    for selector in ("heuristic_a", "heuristic_b", "pytorch_default"):
        assert f"Worst 3 cases of {selector}:" in out


def test_summarize_missing_path_exits_2_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dataset"
    assert main(["summarize", str(missing)]) == 2
    line = _one_line_error(capsys.readouterr().err, "summarize")
    assert str(missing) in line and "no such dataset" in line


def test_summarize_empty_directory_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["summarize", str(tmp_path)]) == 2
    assert "no records under" in _one_line_error(capsys.readouterr().err, "summarize")


def test_summarize_corrupt_part_exits_2_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    part = tmp_path / "part-bad.parquet"
    part.write_bytes(b"PAR1 not really")
    assert main(["summarize", str(tmp_path)]) == 2
    line = _one_line_error(capsys.readouterr().err, "summarize")
    assert str(part) in line and "not a readable Parquet records file" in line


def test_summarize_a_dataset_swept_on_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = {"env_id": "cpu-env", "gpu_name": "CPU only", "cudnn": None, "torch": torch.__version__, "driver": None}
    times = {"gemm:fc": 1.0, DEFAULT_ID: 3.0}
    sweeper = Sweeper([GemmSpace(), PyTorchDefaultSpace()], FakeTimer(times.__getitem__), env, device="cpu")
    case = SweepCase(ConvProblem(n=2, c=3, k=4, h=5, w=5, r=5, s=5), "grid")
    part = run_sweep([case], sweeper, tmp_path, progress=False).part
    assert main(["summarize", str(part)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("environment cpu-env: CPU only, cuDNN None")
    assert "3 problems (1 cases), 6 records, 0 failures" in out
    assert "GEMM lowering applies to 3 problems and is the best candidate on 3 of them" in out
    assert "geomean 3.00x" in out


# ---------------------------------------------------------------------------------------------------- env
@needs_no_gpu
def test_env_without_gpu_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 2
    assert "none is visible" in _one_line_error(capsys.readouterr().err, "env")


# ------------------------------------------------------------------------------------------------- suites
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="checks the error without torchvision")
def test_suites_without_torchvision_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["suites", "--out", str(tmp_path), "--names", "resnet50"]) == 2
    line = _one_line_error(capsys.readouterr().err, "suites")
    assert "'resnet50'" in line and "torchvision" in line
    assert not list(tmp_path.iterdir())


def test_suites_unknown_name_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["suites", "--out", str(tmp_path), "--names", "fpn,lenet"]) == 2
    assert "unknown suite 'lenet'" in _one_line_error(capsys.readouterr().err, "suites")


def test_suites_writes_a_suite_that_needs_no_torchvision(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["suites", "--out", str(tmp_path), "--names", "alexnet_fc"]) == 0
    written = tmp_path / "alexnet_fc.csv"
    assert capsys.readouterr().out.split() == [str(written)]
    assert written.read_bytes() == (ROOT / "data" / "suites" / "alexnet_fc.csv").read_bytes()


@needs_no_gpu
def test_sweep_on_more_gpus_than_visible_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sweep", "--out", str(tmp_path / "out"), "--suites", "none", "--grid", "2", "--gpus", "2"]) == 2
    assert capsys.readouterr().err == "algosel sweep: error: --gpus 2: 0 GPU(s) visible\n"
    assert not (tmp_path / "out").exists()


def test_each_gpus_shard_runs_the_command_line_without_gpus() -> None:
    from algosel.measure.launch import without_option  # noqa: PLC0415

    assert without_option(["sweep", "--gpus", "all", "--out", "d"], "--gpus") == ["sweep", "--out", "d"]
    assert without_option(["sweep", "--gpus=2", "--grid", "3"], "--gpus") == ["sweep", "--grid", "3"]
    assert without_option(["sweep", "--out", "--gpus-dir"], "--gpus") == ["sweep", "--out", "--gpus-dir"]
