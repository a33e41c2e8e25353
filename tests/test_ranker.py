"""The ranker's labels, grouping, training on real records, and the evaluation metrics on known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from algosel.learn.evaluate import (
    Prepared,
    cross_val_picks,
    geomean_ratio,
    is_test_shape,
    pick_times,
    selector_table,
)
from algosel.learn.ranker import MAX_RELEVANCE, Ranker, RankerParams, relevance, with_ratios


def test_relevance_grades_fall_linearly_in_log_time_to_zero_at_32x():
    got = relevance(np.array([1.0, 1.05, 1.2, 2.0, 16.0, 32.0, 100.0, np.inf]))
    assert MAX_RELEVANCE == 30
    assert got.tolist() == [30, 30, 28, 24, 6, 0, 0, 0]


def test_the_ranker_learns_from_the_shortlist_only(slice_records):
    from algosel.learn.rules import shortlist_mask

    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    ranker = Ranker(RankerParams(n_estimators=2))
    rows = ranker.training_rows(prep.data, prep.X)
    on = shortlist_mask(prep.data)
    assert len(rows.X) == len(rows.label) == on.sum() < len(prep.data)
    assert rows.group.sum() == len(rows.X) and len(rows.group) == prep.data["problem_key"].nunique()
    assert len(ranker.training_rows(prep.data, prep.X, shortlist_rank=None).X) == len(prep.data)


@pytest.mark.parametrize("objective", ["lambdarank", "regression"])
def test_row_weights_scale_what_the_ranker_learns_from_each_row(slice_records, objective):
    """``fit_prepared(weight=)`` (a joint model's weight of one GPU's records): ones fit what no weights fit; a fit
    weighted onto half the problems (the other half 0) differs, and, ranking, picks better on the half it learnt."""
    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    params = RankerParams(objective=objective, n_estimators=5, num_threads=1)
    plain = Ranker(params).fit_prepared(prep.data, prep.X)
    ones = Ranker(params).fit_prepared(prep.data, prep.X, weight=np.ones(len(prep.data)))
    np.testing.assert_array_equal(plain.score(prep.X), ones.score(prep.X))
    half = (prep.data["problem_key"].rank(method="dense") % 2 == 0).to_numpy()  # every other problem
    first = Ranker(params).fit_prepared(prep.data, prep.X, weight=np.where(half, 0.0, 1.0))
    assert not np.array_equal(first.score(prep.X), plain.score(prep.X))
    if objective == "lambdarank":
        second = Ranker(params).fit_prepared(prep.data, prep.X, weight=np.where(half, 1.0, 0.0))

        def picks(ranker, rows):
            return geomean_ratio(selector_table(frame, pick_times(rows.data, ranker.score(rows.X))), "model")

        a, b = prep.rows(~half), prep.rows(half)
        assert picks(first, a) < picks(first, b) and picks(second, b) < picks(second, a)
        assert picks(first, a) < picks(second, a) and picks(second, b) < picks(first, b)


def _frame(rows):
    base = {"status": "ok", "space": "cudnn", "rank_a": -1, "rank_b": -1}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_with_ratios_groups_problems_and_marks_failures():
    frame = _frame(
        [
            {"problem_key": "b", "candidate_id": "x", "time_ms_median": 2.0},
            {"problem_key": "a", "candidate_id": "x", "time_ms_median": 4.0},
            {"problem_key": "b", "candidate_id": "y", "time_ms_median": 1.0},
            {"problem_key": "a", "candidate_id": "y", "time_ms_median": math.nan, "status": "build_failed"},
            {"problem_key": "c", "candidate_id": "x", "time_ms_median": math.nan, "status": "run_failed"},
        ]
    )
    out = with_ratios(frame)
    assert out["problem_key"].tolist() == ["a", "a", "b", "b"]  # contiguous; "c" has nothing correct: dropped
    assert out["ratio"].tolist() == [1.0, math.inf, 2.0, 1.0]


def test_pick_falls_through_an_invalid_top_candidate():
    data = _frame(
        [
            {"problem_key": "p", "candidate_id": "bad", "time_ms_median": math.nan, "status": "wrong_result"},
            {"problem_key": "p", "candidate_id": "slow", "time_ms_median": 3.0},
            {"problem_key": "p", "candidate_id": "fast", "time_ms_median": 1.0},
            {"problem_key": "q", "candidate_id": "fast", "time_ms_median": 2.0},
            {"problem_key": "q", "candidate_id": "slow", "time_ms_median": 5.0},
        ]
    )
    picks = pick_times(data, np.array([9.0, 5.0, 1.0, 7.0, 0.0]))
    assert picks.loc["p", "model"] == 3.0 and picks.loc["p", "model_candidate"] == "slow"
    assert bool(picks.loc["p", "invalid_top1"]) and bool(picks.loc["p", "wrong_top1"])
    assert picks.loc["q", "model"] == 2.0 and not picks.loc["q", "invalid_top1"]


def test_test_split_is_by_shape_and_about_a_fifth():
    keys = [f"n{i}_c8_k8_h8_w8_r3_s3_p1x1_u1x1_d1x1_g1" for i in range(1, 2001)]
    held = is_test_shape(keys)
    assert 0.17 < held.mean() < 0.23
    assert (is_test_shape(keys) == held).all()


def test_objective_must_be_known():
    with pytest.raises(ValueError, match="objective"):
        RankerParams(objective="poisson").lgb_params()


def test_score_before_fit_is_an_error():
    with pytest.raises(RuntimeError, match="not fitted"):
        Ranker().score(np.zeros((1, 3)))


@pytest.mark.parametrize("objective", ["lambdarank", "regression"])
def test_training_on_real_records_beats_the_heuristic_on_its_training_set(slice_records, objective):
    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    ranker = Ranker(RankerParams(objective=objective, n_estimators=60)).fit_prepared(prep.data, prep.X)
    table = selector_table(frame, pick_times(prep.data, ranker.score(prep.X)))
    assert geomean_ratio(table, "model") < geomean_ratio(table, "heuristic_a")
    assert geomean_ratio(table, "model") < 1.2


def test_cross_validation_predicts_every_problem_once_from_models_that_never_saw_its_shape(slice_records):
    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    picks = cross_val_picks(prep, RankerParams(n_estimators=10), folds=3)
    assert sorted(picks.index) == sorted(prep.data["problem_key"].unique())
    assert picks.index.is_unique


def test_shortlist_keeps_gemm_pytorch_and_the_top_of_either_heuristic_list():
    from algosel.learn.rules import on_shortlist, shortlist_mask

    data = pd.DataFrame(
        [
            {"space": "cudnn", "rank_a": 0, "rank_b": -1},
            {"space": "cudnn", "rank_a": 9, "rank_b": 7},
            {"space": "cudnn", "rank_a": 9, "rank_b": 8},
            {"space": "cudnn", "rank_a": -1, "rank_b": -1},  # FALLBACK only
            {"space": "gemm", "rank_a": -1, "rank_b": -1},
            {"space": "pytorch", "rank_a": -1, "rank_b": -1},
        ]
    )
    assert shortlist_mask(data, 8).tolist() == [True, True, False, False, True, True]
    assert shortlist_mask(data, None).all()
    assert [bool(on_shortlist(r["space"], r["rank_a"], r["rank_b"], 8)) for r in data.to_dict("records")] == (
        shortlist_mask(data, 8).tolist()
    )


def test_an_invalid_candidate_off_the_shortlist_is_never_picked():
    data = _frame([
        {"problem_key": "p", "candidate_id": "deep", "time_ms_median": 0.5, "rank_a": 30, "rank_b": 30},
        {"problem_key": "p", "candidate_id": "top", "time_ms_median": 1.0, "rank_a": 0, "rank_b": 0},
    ])  # fmt: skip
    picks = pick_times(data, np.array([9.0, 1.0]), shortlist_rank=8)
    assert picks.loc["p", "model_candidate"] == "top"
    assert pick_times(data, np.array([9.0, 1.0]), shortlist_rank=None).loc["p", "model_candidate"] == "deep"


def test_tuning_searches_the_learning_rate_and_the_chosen_setting_trains_with_it(slice_records):
    from algosel.learn.train import DEFAULT_GRID
    from algosel.learn.tuning import setting, tune

    assert len(DEFAULT_GRID["learning_rate"]) > 1  # the budget caps the trees: the rate is what is left to tune
    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    params, table = tune(prep, {"learning_rate": [0.05, 0.3], "n_estimators": [8]}, RankerParams(num_threads=1),
                         folds=2, frame=frame, progress=False)  # fmt: skip
    assert sorted(table["learning_rate"]) == [0.05, 0.3]
    best = table.loc[table["chosen"], "learning_rate"].item()
    assert params.learning_rate == best == setting(table, 0, RankerParams()).learning_rate
    ranker = Ranker(params).fit_prepared(prep.data, prep.X)
    assert float(ranker.booster_.params["learning_rate"]) == best
