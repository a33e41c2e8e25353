"""The legacy-algorithm space, its selector and the legacy analysis, on CPU (the space itself runs in test_gpu.py).

Records: data/samples/h200-legacy-slice, the legacy sweep's problems of the h200-slice shapes.
"""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import REPO, SLICE
from matplotlib.image import imread

from algosel.cli import main
from algosel.learn.features import candidate_vector
from algosel.problem import ConvProblem
from algosel.records import load_records
from algosel.records.analysis import legacy_comparison, per_problem, summarize
from algosel.runtime.api import predict
from algosel.spaces import make_space
from algosel.spaces.cudnn_legacy import ALGOS, algo_enum_name, candidate_name, parse_candidate_name

LEGACY_SLICE = REPO / "data" / "samples" / "h200-legacy-slice"


def test_enum_names_match_cudnn_headers():
    assert algo_enum_name("fwd", 1) == "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM"
    assert algo_enum_name("bwd_data", 5) == "CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED"
    assert algo_enum_name("bwd_filter", 3) == "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3"
    assert len(ALGOS["fwd"]) == 8 and len(ALGOS["bwd_data"]) == 6 and len(ALGOS["bwd_filter"]) == 7
    with pytest.raises(ValueError, match="algo 8 is not a fwd algorithm"):
        algo_enum_name("fwd", 8)


def test_candidate_names_round_trip_and_bad_names_are_named():
    for d, names in ALGOS.items():
        for algo in range(len(names)):
            assert parse_candidate_name(d, candidate_name(d, algo, "TENSOR_OP_MATH")) == (algo, "TENSOR_OP_MATH")
    with pytest.raises(ValueError, match="'WINOGRAD.FOO' is not a legacy fwd candidate"):
        parse_candidate_name("fwd", "WINOGRAD.FOO")


def test_space_says_why_it_cannot_run_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert make_space("legacy").available() == "no CUDA device"


def test_each_algorithm_and_math_type_is_its_own_category():
    codes = {
        candidate_vector(
            {
                "candidate_id": f"legacy:{a}.{m}",
                "space": "legacy",
                "engine_id": i,
                "knobs": f"math={m}",
                "rank_a": 0,
                "rank_b": -1,
                "rank_fallback": -1,
                "notes": "",
            }
        )[1]  # fmt: skip
        for i, a in enumerate(ALGOS["fwd"])
        for m in ("DEFAULT_MATH", "TENSOR_OP_MATH", "FMA_MATH")
    }
    assert len(codes) == 24 and min(codes) >= 2000


@pytest.fixture(scope="module")
def legacy_model(tmp_path_factory):
    from algosel.learn.ranker import RankerParams
    from algosel.learn.train import train

    root = tmp_path_factory.mktemp("models")
    out, summary = train([LEGACY_SLICE], models_root=root, grid={"objective": ["lambdarank"]},
                         base=RankerParams(n_estimators=30), folds=2, progress=False)  # fmt: skip
    return out, summary


def test_training_on_legacy_records_makes_a_legacy_selector(legacy_model):
    out, summary = legacy_model
    assert out.name.endswith("-legacy") and summary["spaces"] == ["legacy"]
    assert summary["test_scores"]["heuristic_a"]["geomean"] >= 1.0  # the v7 heuristic is the baseline


def test_predict_legacy_returns_cudnn_enums(legacy_model):
    model = legacy_model[0]
    recorded = ConvProblem(n=32, c=64, k=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, direction="bwd_filter")
    unseen = recorded.replace(n=24, h=50, w=50)
    for problem in (recorded, unseen):
        choices = predict(problem, model=model, space="legacy", top_k=5, live=False)
        assert all(c.space == "legacy" for c in choices), "no GEMM lowering or PyTorch default in a legacy model"
        assert all(c.cudnn_algo.startswith("CUDNN_CONVOLUTION_BWD_FILTER_ALGO_") for c in choices)
        assert all(c.cudnn_algo == algo_enum_name("bwd_filter", c.engine_id) for c in choices)
        assert {c.cudnn_math_type for c in choices} <= {"CUDNN_DEFAULT_MATH", "CUDNN_FMA_MATH", "CUDNN_TENSOR_OP_MATH"}
    det = predict(unseen, model=model, space="legacy", top_k=30, live=False, deterministic=True)
    assert det and len(det) < len(predict(unseen, model=model, space="legacy", top_k=30, live=False))


def test_predict_refuses_a_model_of_the_other_space(legacy_model):
    with pytest.raises(ValueError, match="selects legacy candidates, not cudnn"):
        predict(n=8, c=64, k=64, h=28, w=28, r=3, s=3, model=legacy_model[0], live=False)
    with pytest.raises(ValueError, match="space must be 'cudnn' or 'legacy', got 'tensorflow'"):
        predict(n=8, c=64, k=64, h=28, w=28, r=3, s=3, space="tensorflow")


def test_shipped_legacy_model_is_found_by_space(capsys):
    code = main(["predict", "--space", "legacy", "--n", "32", "--c", "64", "--k", "64", "--h", "56", "--w", "56",
                 "--r", "3", "--s", "3", "--pad", "1", "--dtype", "float16", "--offline"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "legacy:" in out and "CUDNN_CONVOLUTION_FWD_ALGO_" in out


@pytest.fixture(scope="module")
def mixed_records():
    frame = pd.concat([load_records(SLICE)[0], load_records(LEGACY_SLICE)[0]], ignore_index=True)
    return frame


def test_mixed_records_keep_the_graph_heuristics_and_add_the_legacy_columns(mixed_records):
    table = per_problem(mixed_records)
    graph_only = per_problem(mixed_records[mixed_records["space"] != "legacy"])
    both = table.index.intersection(graph_only.index)
    pd.testing.assert_series_equal(table.loc[both, "heuristic_a"], graph_only.loc[both, "heuristic_a"])
    measured = table.dropna(subset=["best_legacy"])
    assert len(measured) > 250 and (measured["best"] <= measured["best_legacy"]).all()
    assert measured["heuristic_v7"].notna().all()
    legacy_only = per_problem(mixed_records[mixed_records["space"] == "legacy"])
    assert "best_legacy" not in legacy_only and legacy_only["heuristic_a"].notna().all()  # the v7 ranking


def test_legacy_comparison_and_summary(mixed_records):
    comp = legacy_comparison(per_problem(mixed_records))
    overall = comp[comp["group"] == "all"].set_index("comparison")
    assert overall.loc["v7 heuristic / best legacy algorithm", "geomean"] >= 1.0
    assert overall.loc["best legacy algorithm / best of everything", "geomean"] >= 1.0
    assert "Legacy API (" in summarize(mixed_records)
    with pytest.raises(ValueError, match="no legacy algorithms next to engine configs"):
        legacy_comparison(per_problem(mixed_records[mixed_records["space"] != "legacy"]))


def test_report_of_mixed_records_has_the_legacy_figure(tmp_path):
    from algosel.study.report import build_report

    index = build_report([SLICE, LEGACY_SLICE], None, tmp_path)
    page = index.read_text()
    assert "Legacy API" in page and 'src="legacy.png"' in page
    image = imread(tmp_path / "legacy.png")
    assert image.shape[0] > 200 and image.shape[1] > 300
