"""The first-prediction estimate that tuning holds a setting to: tree nodes walked, counted exactly."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from algosel.learn.selector import Selector
from algosel.learn.speed import (
    FIXED_US,
    NS_PER_NODE,
    estimated_first_prediction_us,
    first_prediction_nodes,
    leaf_depths,
    new_problems,
    nodes_walked,
)


def _booster(max_depth, trees=5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = X[:, 0] + 0.5 * X[:, 1] ** 2
    params = {"objective": "regression", "max_depth": max_depth, "num_leaves": 2**max_depth, "min_data_in_leaf": 5,
              "verbosity": -1, "num_threads": 1}  # fmt: skip
    return lgb.train(params, lgb.Dataset(X, y), num_boost_round=trees), X


def test_stumps_walk_one_node_per_tree():
    booster, X = _booster(max_depth=1, trees=7)
    assert (leaf_depths(booster)[:, :2] == 1).all()
    assert nodes_walked(booster, X[:10]).tolist() == [7.0] * 10


def test_nodes_walked_follow_each_rows_path():
    booster, X = _booster(max_depth=3, trees=4)
    got = nodes_walked(booster, X[:50])
    # The same count by walking the dumped trees by hand.
    trees = booster.dump_model()["tree_info"]

    def walk(node, x):
        steps = 0
        while "left_child" in node:
            go_left = x[node["split_feature"]] <= node["threshold"]
            node = node["left_child"] if go_left else node["right_child"]
            steps += 1
        return steps

    expected = [sum(walk(t["tree_structure"], x) for t in trees) for x in X[:50]]
    assert got.tolist() == expected
    assert (got <= 4 * 3).all() and nodes_walked(booster, X[:0]).size == 0


def test_the_estimate_of_a_model_is_deterministic_and_grows_with_its_trees(slice_model):
    sel = Selector.load(slice_model[0])
    problems = new_problems(20)
    first = first_prediction_nodes(sel, problems)
    again = first_prediction_nodes(Selector.load(slice_model[0]), problems)
    assert first == again and first["ranker"] > 0 and first["time_model"] > 0
    assert first["total"] == first["ranker"] + first["time_model"] and first["ranker_rows"] >= 1
    assert estimated_first_prediction_us(first) == pytest.approx(FIXED_US + NS_PER_NODE * first["total"] / 1000)
    assert not hasattr(sel.ranker, "__dict__") or "score" not in vars(sel.ranker)  # the recorder is gone
    half = Selector.load(slice_model[0])
    half.ranker.booster_ = lgb.Booster(model_str=half.ranker.booster_.model_to_string(num_iteration=20))
    assert first_prediction_nodes(half, problems)["ranker"] < first["ranker"]


def test_the_compiled_line_lets_more_tree_nodes_within_the_budget():
    from algosel.learn.speed import COMPILED_LINE, LATENCY_LINES, LIGHTGBM_LINE, PREDICT_BUDGET_US

    assert LATENCY_LINES == {"lightgbm": LIGHTGBM_LINE, "compiled": COMPILED_LINE}
    assert estimated_first_prediction_us(15487.0) == pytest.approx(FIXED_US + NS_PER_NODE * 15.487)
    # the shipped model's nodes on both lines, and the line through its and a 255 x 600 ranker's timed medians
    assert estimated_first_prediction_us({"total": 15487.0}, COMPILED_LINE) == pytest.approx(502.4, abs=1)
    assert COMPILED_LINE.estimate_us(57977) == pytest.approx(1063.3, abs=1)
    fits = {name: (PREDICT_BUDGET_US - line.fixed_us) / line.ns_per_node * 1000 for name, line in LATENCY_LINES.items()}
    assert fits["compiled"] > 2 * fits["lightgbm"]


def test_train_refuses_an_unknown_trees_path_in_one_line(capsys, tmp_path):
    from conftest import SLICE

    from algosel.cli import main
    from algosel.learn.train import train

    with pytest.raises(SystemExit) as done:  # argparse's usage error, on one line
        main(["train", str(SLICE), "--models", str(tmp_path), "--trees", "fast"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trees" in err[0] and "'fast'" in err[0]
    with pytest.raises(ValueError, match="trees 'fast'"):
        train([SLICE], models_root=tmp_path, trees="fast")
    assert not any(tmp_path.iterdir())
