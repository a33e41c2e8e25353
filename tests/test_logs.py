"""`algosel analyze-log` and algosel.study.logs on cuDNN API logs produced on the H200 (tests/fixtures/cudnn_logs)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from algosel.cli import main
from algosel.records import load_records
from algosel.study.logs import LogError, conv_calls, engine_config_name, parse_log

FIXTURES = Path(__file__).parent / "fixtures" / "cudnn_logs"
ROOT = Path(__file__).resolve().parent.parent
LEGACY_LOG, PYTORCH_LOG = FIXTURES / "legacy.log.gz", FIXTURES / "pytorch.log.gz"
UNRECORDED_LOG = FIXTURES / "pytorch-unrecorded.log.gz"


@pytest.fixture(scope="module")
def recorded_keys() -> set[str]:
    keys = set()
    for d in ("data/sweeps/h200", "data/sweeps/h200-legacy"):
        keys |= set(load_records(ROOT / d)[0]["problem_key"])
    return keys


def test_legacy_log_gives_every_direction_of_every_layer(recorded_keys):
    calls = conv_calls(parse_log(LEGACY_LOG))
    # generate.py runs 4 layers x 3 directions through the legacy API, each once.
    assert len(calls) == 12
    assert {c.api for c in calls} == {"legacy"}
    assert {c.problem.direction for c in calls} == {"fwd", "bwd_data", "bwd_filter"}
    assert {(c.problem.layout, c.problem.dtype) for c in calls} >= {("nchw", "float32"), ("nhwc", "float16")}
    assert any(c.problem.groups == 192 for c in calls) and any(c.problem.stride_h == 2 for c in calls)
    assert all(c.chosen.startswith("legacy:") and "." in c.chosen for c in calls)
    assert all(c.problem.key in recorded_keys for c in calls), "the fixture layers are in the shipped records"


def test_pytorch_log_gives_graph_engine_configs(recorded_keys):
    calls = conv_calls(parse_log(PYTORCH_LOG))
    assert len(calls) == 9  # 3 layers, forward and both gradients
    assert {c.api for c in calls} == {"graph"}
    assert all(c.chosen.startswith("cudnn:eng") for c in calls)
    assert any(c.problem.layout == "nhwc" for c in calls)
    assert all(c.problem.key in recorded_keys for c in calls)


def test_engine_config_names_follow_the_frontends_naming():
    values = {"TILE_SIZE": "7", "TILEK": "0", "IDX_MODE": "0", "WORKSPACE": "1", "TILE_CGA_M": "8", "TILE_CGA_N": "1"}
    knobs = {f"CUDNN_KNOB_TYPE_{name}": v for name, v in values.items()}
    # Names of this form are in the H200 records, e.g. cudnn:eng67_k2=5_k13=0_k18=0_k25=0_k27=2_k28=4.
    assert engine_config_name(67, knobs) == "eng67_k2=7_k13=0_k18=0_k25=1_k27=8_k28=1"


def test_analyze_log_prices_every_call_from_the_records(capsys):
    assert main(["analyze-log", str(PYTORCH_LOG)]) == 0
    out = capsys.readouterr().out
    # PyTorch ran fc6's forward and weight gradient with engine 1 and its knobs at -1 (left to cuDNN): no recorded
    # config has those knob values, so those two calls are named, not priced.
    assert "9 convolution calls" in out and "7 calls priced from records" in out
    assert out.count("chosen candidate not timed in the records") == 2
    assert "algosel_pick" in out and "lost_ms" in out and "gemm:fc" in out


def test_analyze_log_legacy_uses_the_legacy_selector(tmp_path, capsys):
    csv = tmp_path / "calls.csv"
    assert main(["analyze-log", str(LEGACY_LOG), "--csv", str(csv)]) == 0
    import pandas as pd

    table = pd.read_csv(csv)
    assert len(table) == 12 and table["algosel_pick"].str.startswith("legacy:").all()
    assert (table["chosen_ms"] >= table["best_same_api_ms"]).all()
    # The chosen legacy algorithm can be no faster than the best of every candidate algosel measures.
    assert (table["best_same_api_ms"] >= table["best_ms"] - 1e-12).all()
    assert (table["lost_ms"] >= -1e-12).all()


def test_unrecorded_problems_are_named_not_priced(capsys):
    assert main(["analyze-log", str(UNRECORDED_LOG)]) == 0
    out = capsys.readouterr().out
    assert "0 calls priced from records" in out and "not in the records (use --measure on a GPU)" in out


def _write(tmp_path: Path, text: str, gz: bool = False) -> Path:
    path = tmp_path / ("log.txt.gz" if gz else "log.txt")
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


HEADER = "I! CuDNN (v91900 56) function cudnnConvolutionForward() called:\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello world\n", r"log\.txt:1: not a line of a cuDNN API log"),
        ("", "no cuDNN API call found"),
        (
            HEADER + "i!     xDesc: type=cudnnTensorDescriptor_t:\ni!                 dimA: type=int; val=[1];\n",
            r"log\.txt:3: field indented deeper than its parent",
        ),
        (HEADER + "i!     alpha: type=float; val=1;\nstray text\n", r"log\.txt:3: expected a field line"),
    ],
    ids=["not-a-log", "empty", "bad-indent", "stray-line"],
)
def test_malformed_logs_name_the_line(tmp_path, text, message):
    with pytest.raises(LogError, match=message):
        list(parse_log(_write(tmp_path, text)))


def test_a_descriptor_with_bad_dims_names_its_call_line(tmp_path):
    text = (
        "\n" + HEADER
        + "i!     xDesc: type=cudnnTensorDescriptor_t:\ni!         dimA: type=int; val=[8,64,x,56];\n"
        + "i!     wDesc: type=cudnnFilterDescriptor_t:\ni!         dimA: type=int; val=[64,64,3,3];\n"
        + "i!     yDesc: type=cudnnTensorDescriptor_t:\ni!         dimA: type=int; val=[8,64,56,56];\n"
        + "i!     convDesc: type=cudnnConvolutionDescriptor_t:\ni!         padA: type=int; val=[1,1];\n"
        + "i!     algo: type=cudnnConvolutionFwdAlgo_t; val=CUDNN_CONVOLUTION_FWD_ALGO_GEMM (2);\n"
    )  # fmt: skip
    with pytest.raises(LogError, match=r"line 2: the input's dimA is '\[8,64,x,56\]'"):
        conv_calls(parse_log(_write(tmp_path, text, gz=True)))


def test_cli_reports_a_malformed_log_in_one_line(tmp_path, capsys):
    assert main(["analyze-log", str(_write(tmp_path, "garbage\n"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("algosel analyze-log: error:") and "log.txt:1:" in err and "Traceback" not in err


def test_cli_reports_a_missing_log(tmp_path, capsys):
    assert main(["analyze-log", str(tmp_path / "nope.log")]) == 2
    assert "no such log file" in capsys.readouterr().err
