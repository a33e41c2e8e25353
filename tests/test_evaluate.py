"""The evaluation metrics on known answers: total-time ratio, cells, the measured shortlist; and the tuning rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from algosel.learn.evaluate import cell_table, cell_wins, report, top_k_curve, total_time_ratio
from algosel.learn.ranker import RankerParams
from algosel.learn.tuning import setting, within_budget


def _table(rows):
    """A per-problem table: best and every selector's time, cell fields."""
    base = {"direction": "fwd", "dtype": "float16", "layout": "nchw", "invalid_top1": False, "wrong_top1": False}
    out = pd.DataFrame([{**base, **r} for r in rows]).set_index("problem_key")
    for sel in ("gemm_else_a",):
        out[sel] = out["heuristic_a"]
    return out


def test_total_time_ratio_weights_problems_by_their_time():
    t = _table([
        {"problem_key": "big", "best": 10.0, "model": 11.0, "heuristic_a": 10.0, "heuristic_b": 10.0,
         "pytorch_default": 10.0},
        {"problem_key": "small", "best": 1.0, "model": 1.0, "heuristic_a": 3.0, "heuristic_b": np.nan,
         "pytorch_default": 1.0},
    ])  # fmt: skip
    assert total_time_ratio(t, "model") == pytest.approx(12.0 / 11.0)
    assert total_time_ratio(t, "heuristic_a") == pytest.approx(13.0 / 11.0)
    assert total_time_ratio(t, "heuristic_b") == pytest.approx(1.0)  # only where it has a time
    comp = report(t)
    overall = comp[(comp["group"] == "all")].set_index("selector")
    assert overall.at["model", "total_time_ratio"] == pytest.approx(12.0 / 11.0)


def test_cells_and_wins_on_a_known_answer():
    rows = []
    for i in range(4):
        # fwd: the model is the best everywhere; bwd_data: mode B is, and the model loses to it.
        rows.append(
            {
                "problem_key": f"f{i}",
                "direction": "fwd",
                "best": 1.0,
                "model": 1.0,
                "heuristic_a": 1.2,
                "heuristic_b": 1.1,
                "pytorch_default": 1.3,
            }
        )
        rows.append({"problem_key": f"d{i}", "direction": "bwd_data", "best": 1.0, "model": 1.2, "heuristic_a": 1.3,
                     "heuristic_b": 1.0, "pytorch_default": 1.4})  # fmt: skip
    cells = cell_table(_table(rows))
    assert set(cells["direction"]) == {"fwd", "bwd_data"}
    fwd_model = cells[(cells["direction"] == "fwd") & (cells["selector"] == "model")].iloc[0]
    assert (fwd_model["problems"], fwd_model["geomean"], fwd_model["within_5pct"]) == (4, 1.0, 1.0)
    wins = cell_wins(cells).set_index("direction")
    assert wins.at["fwd", "all"] and wins.at["fwd", "beats_heuristic_b"]
    assert not wins.at["bwd_data", "all"]
    assert wins.at["bwd_data", "beats_heuristic_a"] and not wins.at["bwd_data", "beats_heuristic_b"]


def test_top_k_curve_times_the_k_best_scored_correct_candidates():
    data = pd.DataFrame(
        {
            "problem_key": ["p"] * 4 + ["q"] * 2,
            "candidate_id": ["a", "b", "c", "d", "a", "b"],
            "space": ["cudnn"] * 6,
            "rank_a": [0, 1, 2, 3, 0, 1],
            "rank_b": [-1] * 6,
            "status": ["ok", "build_failed", "ok", "ok", "ok", "ok"],
            "time_ms_median": [2.0, np.nan, 1.5, 1.0, 1.0, 3.0],
        }
    )
    # p: by score a, b (failed: skipped), c, d; q: b, a.
    scores = np.array([4.0, 3.0, 2.0, 1.0, 1.0, 2.0])
    curve = top_k_curve(data, scores, ks=(1, 2, 3), shortlist_rank=None).set_index("k")
    assert curve.at[1, "geomean"] == pytest.approx(math.sqrt(2.0 * 3.0))  # a for p (2/1), b for q (3/1)
    assert curve.at[2, "geomean"] == pytest.approx(math.sqrt(1.5 * 1.0))  # a, c for p; b, a for q
    assert curve.at[3, "geomean"] == pytest.approx(1.0) and curve.at[3, "top1"] == 1.0
    assert curve.at[1, "total_time_ratio"] == pytest.approx(5.0 / 2.0)
    assert list(curve["problems"]) == [2, 2, 2]
    # Off the shortlist (ranks 2 and 3 with a shortlist of 2): never timed, whatever their score.
    short = top_k_curve(data, scores, ks=(3,), shortlist_rank=2).set_index("k")
    assert short.at[3, "geomean"] == pytest.approx(math.sqrt(2.0))


def _tuned():
    return pd.DataFrame(
        [
            {"num_leaves": 255, "n_estimators": 600, "cv_geomean_ratio": 1.06, "chosen": True},
            {"num_leaves": 127, "n_estimators": 300, "cv_geomean_ratio": 1.07, "chosen": False},
            {"num_leaves": 31, "n_estimators": 100, "cv_geomean_ratio": 1.09, "chosen": False},
        ]
    )


@pytest.mark.parametrize(
    ("latency", "chosen", "tried"),
    [
        ({255: 800.0, 127: 500.0, 31: 200.0}, 255, 1),  # the best score is within budget: kept
        ({255: 1500.0, 127: 900.0, 31: 200.0}, 127, 2),  # too slow: the next best that answers in time
        ({255: 3000.0, 127: 2000.0, 31: 1200.0}, 31, 3),  # none in time: the fastest of those tried
    ],
)
def test_tuning_keeps_the_best_score_unless_it_is_too_slow(latency, chosen, tried):
    fitted = []

    def fit(params):
        fitted.append(params.num_leaves)
        return params.num_leaves

    params, got, table = within_budget(_tuned(), RankerParams(), fit, lambda leaves: latency[leaves], 1000.0)
    assert params.num_leaves == chosen and got == chosen and len(fitted) == tried
    assert table.loc[table["chosen"], "num_leaves"].tolist() == [chosen]
    assert table["predict_us"].notna().sum() == tried
    assert setting(table, 1, RankerParams()).n_estimators == 300


def test_tuning_rule_needs_a_setting():
    with pytest.raises(ValueError, match="at least one"):
        within_budget(_tuned().iloc[:0], RankerParams(), lambda p: p, lambda p: 0.0, 1000.0)


def test_network_totals_sum_every_call_and_leave_out_dtypes_the_network_lacks():
    from algosel.learn.evaluate_networks import network_totals  # noqa: PLC0415
    from algosel.problem import ConvProblem  # noqa: PLC0415

    layer = {"n": 2, "c": 8, "k": 16, "h": 10, "w": 10, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1, "stride_h": 1,
             "stride_w": 1, "dilation_h": 1, "dilation_w": 1, "groups": 1}  # fmt: skip
    suites = pd.DataFrame([{**layer, "network": "net", "size": "10x10"}, {**layer, "network": "net", "size": "10x10"}])
    problems = ConvProblem(**layer, dtype="float32").directions()
    times = {"fwd": 1.0, "bwd_data": 2.0, "bwd_filter": 4.0}
    table = pd.DataFrame(
        [{"problem_key": q.key, "best": times[q.direction], "model": 2 * times[q.direction]} for q in problems]
    ).set_index("problem_key")
    out = network_totals({"net": table}, suites, ["float32", "bfloat16"], selectors=("model",))
    assert list(out["dtype"]) == ["float32"]  # no bfloat16 problem of this network: no row of NaNs
    row = out.iloc[0]
    # the first conv has no bwd_data (the image needs no gradient); the second has all three directions
    assert row["calls"] == 5 and row["missing_problems"] == 0
    assert row["best_ms"] == pytest.approx(1 + 4 + 1 + 2 + 4)
    assert row["model_vs_best"] == pytest.approx(2.0)


def test_summary_scores_one_selector_over_the_problems_it_has_a_time_for():
    from algosel.learn.evaluate import summary

    table = pd.DataFrame({"best": [1.0, 2.0, 4.0], "model": [1.0, 2.2, np.nan], "other": [1.04, 2.0, 8.0]})
    got = summary(table)
    assert got["problems"] == 2  # the third has no model time
    assert got["geomean"] == pytest.approx(math.sqrt(1.1))
    assert got["within_5pct"] == 0.5 and got["total_time_ratio"] == pytest.approx(3.2 / 3.0)
    other = summary(table, "other")
    assert other["problems"] == 3 and other["within_5pct"] == pytest.approx(2 / 3)
    assert other["geomean"] == pytest.approx(math.exp(math.log(1.04 * 2) / 3))
    assert other["total_time_ratio"] == pytest.approx(11.04 / 7.0)
