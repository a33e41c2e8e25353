"""The few-row prediction path gives LightGBM's own numbers, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from algosel.learn.evaluate import Prepared
from algosel.learn.rowpredict import FAST_ROWS, RowPredictor, row_predictor
from algosel.learn.selector import Selector


@pytest.mark.parametrize("which", ["ranker", "time_model"])
def test_row_predictions_equal_booster_predict(slice_model, slice_records, which):
    sel = Selector.load(slice_model[0])
    booster = sel.ranker.booster_ if which == "ranker" else sel.time_model.booster_
    frame, envs = slice_records
    X = Prepared.build(frame[frame["problem_key"].isin(frame["problem_key"].unique()[:6])], envs).X
    assert len(X) > FAST_ROWS
    pred = RowPredictor(booster)
    for rows in (X[:1], X[:2], X[:FAST_ROWS], X[3 : 3 + FAST_ROWS : 2], X):  # strided rows too, and the long path
        np.testing.assert_array_equal(pred.predict(rows), booster.predict(rows, num_threads=1))
    assert pred.fast_path_ready  # the fast path was set up (not the fallback)
    with pytest.raises(Exception, match="number of features"):
        pred.predict(X[:2, :-1])  # refused by LightGBM as Booster.predict refuses it


def test_the_ranker_and_time_model_keep_one_row_predictor_per_booster(slice_model):
    sel = Selector.load(slice_model[0])
    first = row_predictor(sel.ranker, sel.ranker.booster_)
    assert row_predictor(sel.ranker, sel.ranker.booster_) is first
    other = Selector.load(slice_model[0])
    assert row_predictor(sel.ranker, other.ranker.booster_) is not first  # a new booster: a new predictor
