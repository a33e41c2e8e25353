"""The model artifact (round trip and every error path) and the selector's choices, filters and memoisation."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest

import algosel
from algosel.candidates import DEFAULT_ID
from algosel.learn.artifact import CATALOGUE_FILE, MANIFEST_FILE, MODEL_FILE, SelectorError
from algosel.learn.selector import Selector
from algosel.problem import ConvProblem


@pytest.fixture
def model_copy(slice_model, tmp_path):
    out = tmp_path / "m"
    shutil.copytree(slice_model[0], out)
    return out


def test_artifact_round_trip_gives_the_same_scores(slice_model, slice_records, tmp_path):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    again = Selector.load(sel.save(tmp_path / "again"))
    p = ConvProblem.from_key(frame["problem_key"].iloc[0])
    assert [c.candidate_id for c in sel.choose(p, top_k=5)] == [c.candidate_id for c in again.choose(p, top_k=5)]
    assert sel.choose(p)[0].score == pytest.approx(again.choose(p)[0].score)
    manifest = json.loads((slice_model[0] / MANIFEST_FILE).read_text())
    for field in ("feature_schema_version", "data_fingerprint", "environment", "tuning", "test_scores", "libraries"):
        assert field in manifest


def test_a_selector_saved_under_another_manifest_keeps_its_model(slice_model, slice_records, tmp_path):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    renamed = sel.with_manifest({**sel.manifest, "data": ["elsewhere"]})
    again = Selector.load(renamed.save(tmp_path / "renamed"))
    assert again.manifest["data"] == ["elsewhere"] and sel.manifest.get("data") != ["elsewhere"]
    p = ConvProblem.from_key(frame["problem_key"].iloc[0])
    assert [c.candidate_id for c in again.choose(p, top_k=5)] == [c.candidate_id for c in sel.choose(p, top_k=5)]


@pytest.mark.parametrize("missing", [MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE])
def test_missing_file_is_named(model_copy, missing):
    (model_copy / missing).unlink()
    with pytest.raises(SelectorError, match=missing):
        Selector.load(model_copy)


def test_corrupt_manifest(model_copy):
    (model_copy / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(SelectorError, match="corrupt manifest"):
        Selector.load(model_copy)


def test_manifest_without_a_field(model_copy):
    m = json.loads((model_copy / MANIFEST_FILE).read_text())
    del m["params"]
    (model_copy / MANIFEST_FILE).write_text(json.dumps(m))
    with pytest.raises(SelectorError, match="params"):
        Selector.load(model_copy)


def test_other_feature_schema_is_refused(model_copy):
    m = json.loads((model_copy / MANIFEST_FILE).read_text())
    m["feature_schema_version"] = 999
    (model_copy / MANIFEST_FILE).write_text(json.dumps(m))
    with pytest.raises(SelectorError, match="schema 999"):
        Selector.load(model_copy)


def test_corrupt_model_file(model_copy):
    (model_copy / MODEL_FILE).write_text("tree\nnonsense=1\n")
    with pytest.raises(SelectorError, match="model.txt"):
        Selector.load(model_copy)


def test_corrupt_catalogue(model_copy):
    (model_copy / CATALOGUE_FILE).write_bytes(b"PAR1 garbage")
    with pytest.raises(SelectorError, match="catalogue"):
        Selector.load(model_copy)


def test_another_gpu_is_refused_unless_forced(model_copy):
    from algosel.testing import fake_gpu

    with fake_gpu("NVIDIA A100-SXM4-80GB", (8, 0), cudnn=90100):
        with pytest.raises(SelectorError, match="A100.*cuDNN 90100|another environment"):
            Selector.load(model_copy)
        with pytest.warns(UserWarning, match="another environment"):
            Selector.load(model_copy, force=True)


class CountingRanker:
    """A ranker that scores as ``ranker`` does and counts its calls (a Selector is made with it)."""

    def __init__(self, ranker):
        self.ranker, self.calls = ranker, []

    def score(self, X):
        self.calls.append(len(X))
        return self.ranker.score(X)


def test_choices_are_ranked_and_memoised(slice_model, slice_records):
    frame, _ = slice_records
    loaded = Selector.load(slice_model[0])
    ranker = CountingRanker(loaded.ranker)
    sel = Selector(ranker, loaded.manifest, loaded.catalogue.frame, loaded.time_model)
    p = ConvProblem.from_key(frame["problem_key"].iloc[0])
    first = sel.choose(p, top_k=3)
    assert len(first) == 3 and first[0].score >= first[1].score >= first[2].score
    assert sel.choose(p, top_k=3) is first and len(ranker.calls) == 1
    assert first[0].source == "records"
    assert [c.candidate_id for c in first] == [c.candidate_id for c in loaded.choose(p, top_k=3)]  # as loaded


def test_workspace_limit_drops_candidates_known_to_need_more(slice_model, slice_records):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    big = frame[(frame["workspace_bytes"] > 1 << 20) & (frame["status"] == "ok")]
    key = big["problem_key"].iloc[0]
    p = ConvProblem.from_key(key)
    limit = 1 << 20
    allowed = sel.choose(p, max_workspace_bytes=limit, top_k=500)
    assert all(c.workspace_bytes is None or c.workspace_bytes <= limit for c in allowed)
    assert len(allowed) < len(sel.choose(p, top_k=500))


def test_deterministic_keeps_only_candidates_known_deterministic(slice_model, slice_records):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    assert sel.manifest["numeric_notes_recorded"] is False  # the H200 records carry behaviour notes only
    p = ConvProblem.from_key(frame.loc[frame["space"] == "gemm", "problem_key"].iloc[0])
    spaces = {c.space for c in sel.choose(p, deterministic=True, top_k=500)}
    assert spaces <= {"gemm", "pytorch"} and "gemm" in spaces


def test_blocked_engines_are_never_chosen(slice_model, slice_records):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    wrong = frame[frame["status"] == "wrong_result"].iloc[0]
    assert (int(wrong["engine_id"]), wrong["direction"], wrong["dtype"]) in sel.blocked
    p = ConvProblem.from_key(wrong["problem_key"])
    assert wrong["candidate_id"] not in {c.candidate_id for c in sel.choose(p, top_k=500)}


def test_an_unseen_problem_uses_the_nearest_recorded_one(slice_model):
    sel = Selector.load(slice_model[0])
    p = ConvProblem(n=24, c=72, k=136, h=33, w=35, r=3, s=3, pad_h=1, pad_w=1, dtype="float16")
    choices = sel.choose(p, top_k=500)
    assert choices[0].source.startswith("nearest:")
    assert any(c.candidate_id == DEFAULT_ID for c in choices)
    fc = ConvProblem(n=77, c=256, k=1000, h=6, w=6, r=6, s=6, dtype="float16", direction="bwd_data")
    assert "gemm:fc" in {c.candidate_id for c in sel.choose(fc, top_k=500)}


def test_the_distance_from_the_records_counts_log2_steps_to_the_nearest_problem_of_its_kind(slice_model):
    sel = Selector.load(slice_model[0])
    recorded = ConvProblem.from_key(sel.catalogue.frame["problem_key"].iloc[0])
    assert sel.records_distance(recorded) == 0.0
    doubled = dataclasses.replace(recorded, n=2 * recorded.n)
    assert 0.0 < sel.records_distance(doubled) <= 1.0  # twice the batch: one step, or less to another problem
    other_kind = dataclasses.replace(recorded, dtype="bfloat16")
    assert sel.records_distance(other_kind) == math.inf  # nothing of its kind (no bfloat16 records)


def test_the_records_host_time_per_call_is_kept_and_read_from_the_nearest_problem(slice_model, slice_records):
    """The catalogue keeps each record's host time per call; an unrecorded problem reads its nearest problem's."""
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    assert "host_overhead_us" in sel.catalogue.frame.columns
    row = frame[(frame["status"] == "ok") & (frame["candidate_id"] != DEFAULT_ID)].iloc[0]
    recorded = ConvProblem.from_key(row["problem_key"])
    got = sel.host_us(recorded, [row["candidate_id"], DEFAULT_ID, "cudnn:no such config"])
    expected = frame[(frame["problem_key"] == row["problem_key"]) & (frame["candidate_id"] == DEFAULT_ID)]
    assert got[row["candidate_id"]] == pytest.approx(row["host_overhead_us"])
    assert got[DEFAULT_ID] == pytest.approx(expected["host_overhead_us"].iloc[0])
    assert "cudnn:no such config" not in got
    doubled = dataclasses.replace(recorded, n=2 * recorded.n + 1)
    nearest = sel.catalogue.nearest(doubled)
    assert sel.host_us(doubled, [DEFAULT_ID]) == sel.catalogue.host_us(nearest, [DEFAULT_ID])
    # a catalogue written before the column: no host times, no error
    old = Selector(sel.ranker, sel.manifest, sel.catalogue.frame.drop(columns="host_overhead_us"), sel.time_model)
    assert old.host_us(recorded, [row["candidate_id"], DEFAULT_ID]) == {}


def test_predict_api_with_fields_and_errors(slice_model):
    sel = Selector.load(slice_model[0])
    got = algosel.predict(
        model=sel, n=32, c=64, k=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, dtype="float16", top_k=2, live=False
    )
    assert len(got) == 2 and got[0].candidate_id
    p = ConvProblem(32, 64, 64, 56, 56, 3, 3, 1, 1, dtype="float16")
    assert algosel.predict(p, model=sel, top_k=2, live=False) is algosel.predict(p, model=sel, top_k=2, live=False)
    with pytest.raises(ValueError, match="unknown problem field 'kernel'"):
        algosel.predict(model=sel, n=1, c=1, k=1, h=1, w=1, r=1, s=1, kernel=3)
    with pytest.raises(ValueError, match="groups"):
        algosel.predict(model=sel, n=1, c=3, k=4, h=5, w=5, r=1, s=1, groups=2)
    with pytest.raises(ValueError, match="needs a ConvProblem"):
        algosel.predict(model=sel)
    with pytest.raises(ValueError, match="top_k"):
        algosel.predict(p, model=sel, top_k=0)
    assert np.isfinite(got[0].score)


def test_tuned_params_are_the_manifests_on_top_of_the_base_but_the_thread_count(model_copy, tmp_path):
    from algosel.learn.artifact import tuned_params
    from algosel.learn.ranker import RankerParams

    manifest = json.loads((model_copy / MANIFEST_FILE).read_text())
    manifest["params"].update(learning_rate=0.125, num_leaves=9, num_threads=64)
    (model_copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    params = tuned_params(model_copy, RankerParams(num_threads=3, lambdarank_truncation_level=7))
    assert (params.learning_rate, params.num_leaves, params.n_estimators) == (
        0.125,
        9,
        manifest["params"]["n_estimators"],
    )
    assert params.num_threads == 3  # the training machine's, not the model's
    assert params.lambdarank_truncation_level == manifest["params"]["lambdarank_truncation_level"]
    with pytest.raises(SelectorError, match="not a model directory"):
        tuned_params(tmp_path)
