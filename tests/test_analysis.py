"""Tests of algosel.records.analysis on hand-built records with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from algosel.candidates import DEFAULT_ID
from algosel.records.analysis import comparison_table, geomean, ok_rows, per_problem, selector_stats, summarize


def _row(
    problem: str,
    candidate: str,
    time_ms: float,
    status: str = "ok",
    rank_a: int = -1,
    rank_b: int = -1,
    direction: str = "fwd",
    dtype: str = "float32",
) -> dict:
    return {
        "problem_key": problem,
        "case_key": problem.rsplit("_", 1)[0],
        "direction": direction,
        "dtype": dtype,
        "layout": "nchw",
        "source": "grid",
        "candidate_id": candidate,
        "space": candidate.split(":", maxsplit=1)[0],
        "time_ms_median": time_ms if status == "ok" else math.nan,
        "status": status,
        "rank_a": rank_a,
        "rank_b": rank_b,
    }


def _records() -> pd.DataFrame:
    """Three problems with known answers.

    P1 (fwd, float32): best e2 1.0; heuristic A picks e1 (2.0), B picks e2 (1.0), PyTorch 1.5. A wrong_result
        row that reports a faster time must not count.
    P2 (bwd_data, float16): A's rank 0 fails to build, so A falls through to rank 1 (e2, 3.0); B picks e2 (3.0);
        the GEMM lowering is best (2.0); PyTorch 3.0.
    P3 (fwd, float16): everything picks e1 (1.0); PyTorch 1.04 (within 5%).
    """
    rows = [
        _row("p1_fwd", "cudnn:e1", 2.0, rank_a=0, rank_b=1),
        _row("p1_fwd", "cudnn:e2", 1.0, rank_a=1, rank_b=0),
        _row("p1_fwd", "cudnn:e9", 0.1, status="wrong_result", rank_a=2),
        _row("p1_fwd", DEFAULT_ID, 1.5),
        _row("p2_bwd_data", "cudnn:e1", 0.5, status="build_failed", rank_a=0, direction="bwd_data", dtype="float16"),
        _row("p2_bwd_data", "cudnn:e2", 3.0, rank_a=1, rank_b=0, direction="bwd_data", dtype="float16"),
        _row("p2_bwd_data", "cudnn:e3", 4.0, rank_a=2, rank_b=1, direction="bwd_data", dtype="float16"),
        _row("p2_bwd_data", "gemm:fc", 2.0, direction="bwd_data", dtype="float16"),
        _row("p2_bwd_data", DEFAULT_ID, 3.0, direction="bwd_data", dtype="float16"),
        _row("p3_fwd", "cudnn:e1", 1.0, rank_a=0, rank_b=0, dtype="float16"),
        _row("p3_fwd", DEFAULT_ID, 1.04, dtype="float16"),
    ]
    return pd.DataFrame(rows)


@pytest.fixture
def table() -> pd.DataFrame:
    return per_problem(_records())


def test_ok_rows_drop_failures_and_untimed_rows() -> None:
    frame = _records()
    frame.loc[0, "time_ms_median"] = math.nan
    ok = ok_rows(frame)
    assert (ok["status"] == "ok").all() and ok["time_ms_median"].notna().all()
    assert len(ok) == len(frame) - 3


def test_per_problem_best_is_the_fastest_correct_candidate(table: pd.DataFrame) -> None:
    assert sorted(table.index) == ["p1_fwd", "p2_bwd_data", "p3_fwd"]
    assert table["best"].to_dict() == {"p1_fwd": 1.0, "p2_bwd_data": 2.0, "p3_fwd": 1.0}
    assert table["best_candidate"].to_dict() == {"p1_fwd": "cudnn:e2", "p2_bwd_data": "gemm:fc", "p3_fwd": "cudnn:e1"}
    assert table["best_space"].to_dict() == {"p1_fwd": "cudnn", "p2_bwd_data": "gemm", "p3_fwd": "cudnn"}
    assert table.loc["p2_bwd_data", ["direction", "dtype"]].tolist() == ["bwd_data", "float16"]


def test_per_problem_heuristics_take_the_first_correct_rank(table: pd.DataFrame) -> None:
    assert table["heuristic_a"].to_dict() == {"p1_fwd": 2.0, "p2_bwd_data": 3.0, "p3_fwd": 1.0}
    assert table["heuristic_b"].to_dict() == {"p1_fwd": 1.0, "p2_bwd_data": 3.0, "p3_fwd": 1.0}


def test_heuristic_a_falls_through_to_rank_1_when_rank_0_failed() -> None:
    frame = _records()
    p2 = per_problem(frame).loc["p2_bwd_data"]
    assert p2["heuristic_a"] == 3.0  # rank 1, not the failed rank 0 (whose row even claims 0.5 ms)
    # Once rank 0 builds, it is the heuristic's choice again.
    frame.loc[4, ["status", "time_ms_median"]] = ["ok", 5.0]
    assert per_problem(frame).loc["p2_bwd_data", "heuristic_a"] == 5.0


def test_per_problem_pytorch_and_gemm_columns(table: pd.DataFrame) -> None:
    assert table["pytorch_default"].to_dict() == {"p1_fwd": 1.5, "p2_bwd_data": 3.0, "p3_fwd": 1.04}
    assert table.loc["p2_bwd_data", "gemm"] == 2.0
    assert table["gemm"].isna().sum() == 2
    assert table["gemm_applicable"].to_dict() == {"p1_fwd": False, "p2_bwd_data": True, "p3_fwd": False}


def test_gemm_is_applicable_even_when_it_failed() -> None:
    frame = _records()
    frame.loc[frame["space"] == "gemm", ["status", "time_ms_median"]] = ["wrong_result", math.nan]
    table = per_problem(frame)
    assert bool(table.loc["p2_bwd_data", "gemm_applicable"]) and math.isnan(table.loc["p2_bwd_data", "gemm"])
    assert table.loc["p2_bwd_data", "best"] == 3.0


def test_per_problem_adds_extra_selectors() -> None:
    extra = pd.Series({"p1_fwd": 1.0, "p3_fwd": 2.0})
    table = per_problem(_records(), extra={"mine": extra})
    assert table["mine"].to_dict() == pytest.approx(
        {"p1_fwd": 1.0, "p2_bwd_data": math.nan, "p3_fwd": 2.0}, nan_ok=True
    )


def test_per_problem_without_correct_records_raises() -> None:
    frame = _records()
    frame["status"] = "run_failed"
    with pytest.raises(ValueError, match="no correct, timed records"):
        per_problem(frame)


def test_geomean_ignores_non_finite_values() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean(np.array([2.0, math.nan, math.inf, 8.0])) == pytest.approx(4.0)
    assert math.isnan(geomean([]))


def test_selector_stats_of_heuristic_a(table: pd.DataFrame) -> None:
    stats = selector_stats(table["heuristic_a"] / table["best"])  # ratios 2.0, 1.5, 1.0
    assert stats["problems"] == 3
    assert stats["geomean"] == pytest.approx(3.0 ** (1 / 3))
    assert stats["p95"] == pytest.approx(1.95)  # linear interpolation between 1.5 and 2.0
    assert stats["worst"] == 2.0
    assert stats["within_5pct"] == pytest.approx(1 / 3)
    assert stats["top1"] == pytest.approx(1 / 3)


def test_selector_stats_within_5pct_is_not_top1(table: pd.DataFrame) -> None:
    stats = selector_stats(table["pytorch_default"] / table["best"])  # ratios 1.5, 1.5, 1.04
    assert stats["within_5pct"] == pytest.approx(1 / 3)
    assert stats["top1"] == 0.0
    assert stats["worst"] == 1.5


def test_selector_stats_skip_missing_ratios_and_handle_none() -> None:
    stats = selector_stats(pd.Series([1.0, math.nan, 1.2]))
    assert stats["problems"] == 2 and stats["worst"] == 1.2 and stats["top1"] == 0.5
    empty = selector_stats(pd.Series([math.nan]))
    assert empty["problems"] == 0 and math.isnan(empty["geomean"]) and math.isnan(empty["top1"])


def test_comparison_table_groups_by_direction_dtype_and_all(table: pd.DataFrame) -> None:
    comp = comparison_table(table, ["heuristic_a", "pytorch_default"])
    assert list(comp.columns) == [
        "group",
        "value",
        "selector",
        "problems",
        "geomean",
        "p95",
        "worst",
        "within_5pct",
        "top1",
    ]
    groups = set(zip(comp["group"], comp["value"]))
    assert groups == {
        ("all", "all"),
        ("direction", "fwd"),
        ("direction", "bwd_data"),
        ("dtype", "float32"),
        ("dtype", "float16"),
    }
    assert len(comp) == 5 * 2
    at = comp.set_index(["group", "value", "selector"])
    assert at.loc[("all", "all", "heuristic_a"), "problems"] == 3
    fwd = at.loc[("direction", "fwd", "heuristic_a")]  # P1 2.0, P3 1.0
    assert (fwd["problems"], fwd["worst"], fwd["top1"]) == (2, 2.0, 0.5)
    assert fwd["geomean"] == pytest.approx(math.sqrt(2.0))
    f16 = at.loc[("dtype", "float16", "pytorch_default")]  # P2 1.5, P3 1.04
    assert (f16["problems"], f16["within_5pct"]) == (2, 0.5)


def test_summarize_reports_counts_table_and_worst_cases() -> None:
    text = summarize(_records(), worst=2)
    assert text.startswith("3 problems (3 cases), 11 records, 2 failures (")
    assert "build_failed 1" in text.splitlines()[0] and "wrong_result 1" in text.splitlines()[0]
    header = next(line for line in text.splitlines() if line.split()[:3] == ["group", "value", "selector"])
    for column in ("group", "value", "selector", "problems", "geomean", "p95", "worst", "within_5pct", "top1"):
        assert column in header
    assert "GEMM lowering applies to 1 problems and is the best candidate on 1 of them" in text
    assert "geomean 1.50x" in text
    assert "Worst 2 cases of heuristic_a:" in text
    assert "     2.00x  p1_fwd  (best: cudnn:e2, 1.0000 ms)" in text
    assert "Worst 2 cases of pytorch_default:" in text
