"""The time model: fitting on real records, its calibration on known answers, persistence and every error path,
and the predicted times the selector returns."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from algosel.candidates import DEFAULT_ID
from algosel.files import describe_file
from algosel.learn.artifact import MANIFEST_FILE, SelectorError, verify_directory
from algosel.learn.evaluate import Prepared, is_test_shape
from algosel.learn.selector import Selector
from algosel.learn.time_model import (
    TIME_MODEL_FILE,
    TimeModel,
    TimeModelError,
    TimeModelParams,
    calibration,
    format_calibration,
    log_error_stats,
    timed_mask,
)
from algosel.problem import ConvProblem


@pytest.fixture
def model_copy(slice_model, tmp_path):
    out = tmp_path / "m"
    shutil.copytree(slice_model[0], out)
    return out


def test_log_error_stats_are_ratios_of_the_median_and_p90():
    got = log_error_stats(np.array([0.0, -1.0, 1.0, 2.0, np.nan]))
    assert got["rows"] == 4
    assert got["median"] == pytest.approx(2**1.0 - 1)  # median of |e| = (1 + 1) / 2
    assert got["p90"] == pytest.approx(2 ** np.percentile([0, 1, 1, 2], 90) - 1)
    empty = log_error_stats(np.array([np.nan]))
    assert empty["rows"] == 0 and math.isnan(empty["median"])


def test_calibration_groups_on_a_known_answer():
    data = pd.DataFrame(
        {
            "problem_key": ["p", "p", "p", "q", "q"],
            "candidate_id": [DEFAULT_ID, "cudnn:a", "cudnn:b", DEFAULT_ID, "cudnn:a"],
            "status": ["ok", "ok", "build_failed", "ok", "ok"],
            "time_ms_median": [1.0, 2.0, np.nan, 4.0, 1.0],
        }
    )
    # Errors in log2: default of p 0, a of p +1, (b failed: ignored), default of q -1, a of q +0.5.
    predicted = np.log2([1.0, 4.0, 9.0, 2.0, 2**0.5])
    cal = calibration(data, predicted, chosen=pd.Series({"p": "cudnn:a", "q": "cudnn:a"}))
    assert cal["all"]["rows"] == 4
    assert cal["all"]["median"] == pytest.approx(2**0.75 - 1)  # median of 0, 0.5, 1, 1
    assert cal["chosen"]["rows"] == 2 and cal["chosen"]["median"] == pytest.approx(2**0.75 - 1)
    assert cal["pytorch_default"]["rows"] == 2 and cal["pytorch_default"]["median"] == pytest.approx(2**0.5 - 1)
    text = format_calibration(cal)
    assert "pytorch_default" in text and "chosen" in text and "%" in text
    assert "chosen" not in calibration(data, predicted)
    no_default = calibration(data[data["candidate_id"] != DEFAULT_ID], predicted[[1, 2, 4]])
    assert no_default["pytorch_default"]["rows"] == 0 and "pytorch_default" not in format_calibration(no_default)


def test_time_model_learns_device_times_from_real_records(slice_records):
    frame, envs = slice_records
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    train, held = prep.rows(~test), prep.rows(test)
    model = TimeModel(TimeModelParams(n_estimators=60, num_leaves=31)).fit_prepared(train.data, train.X)
    predicted = model.predict_log2_ms(held.X)
    keep = timed_mask(held.data)
    measured = np.log2(held.data["time_ms_median"].to_numpy()[keep])
    error = np.abs(predicted[keep] - measured)
    # Far better than the best constant guess (the training shapes' median time) on shapes it never saw.
    constant = np.abs(np.median(np.log2(train.data["time_ms_median"].dropna())) - measured)
    assert np.median(error) < 0.5 * np.median(constant)
    assert np.allclose(model.predict_ms(held.X[:5]), np.exp2(predicted[:5]))


def test_time_model_errors():
    with pytest.raises(RuntimeError, match="not fitted"):
        TimeModel().predict_log2_ms(np.zeros((1, 3)))
    failed = pd.DataFrame({"status": ["build_failed"], "time_ms_median": [np.nan]})
    with pytest.raises(ValueError, match="no correct, timed candidate"):
        TimeModel().fit_prepared(failed, np.zeros((1, 3)))
    with pytest.raises(TimeModelError, match="unfitted"):
        TimeModel().save(".")


def test_choices_carry_predicted_times_and_the_default_can_be_asked_for(slice_model):
    sel = Selector.load(slice_model[0])
    assert sel.time_model is not None
    manifest = sel.manifest["time_model"]
    assert manifest["file"] == TIME_MODEL_FILE
    assert {"all", "chosen", "pytorch_default"} <= set(manifest["test_calibration"])
    # A shape no record holds: candidates of the nearest recorded problem, and PyTorch's default.
    p = ConvProblem(n=24, c=72, k=136, h=33, w=35, r=3, s=3, pad_h=1, pad_w=1, dtype="float16")
    choices = sel.choose(p, top_k=3)
    assert all(c.predicted_time_ms is not None and c.predicted_time_ms > 0 for c in choices)
    ids = [choices[0].candidate_id, DEFAULT_ID]
    times = sel.predicted_time_ms(p, ids)
    assert list(times) == ids and all(t > 0 for t in times.values())
    assert times[choices[0].candidate_id] == pytest.approx(choices[0].predicted_time_ms)
    assert sel.predicted_time_ms(p, []) == {}
    with pytest.raises(ValueError, match="'cudnn:nonsense' is not a candidate"):
        sel.predicted_time_ms(p, ["cudnn:nonsense"])


def test_predicted_times_of_an_explicit_list(slice_model, slice_records):
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    key = frame["problem_key"].iloc[0]
    rows = sel.catalogue.rows(key)
    p = ConvProblem.from_key(key)
    everyone = [r["candidate_id"] for r in rows]
    times = sel.predicted_time_ms(p, everyone, rows=rows)
    # Shortlisted or not, every candidate of the list gets a time, the same as through the recorded list.
    assert len(times) == len(rows) and times == sel.predicted_time_ms(p, everyone)


def test_a_model_without_a_time_model_still_ranks(model_copy):
    m = json.loads((model_copy / MANIFEST_FILE).read_text())
    del m["time_model"]
    (model_copy / MANIFEST_FILE).write_text(json.dumps(m))
    (model_copy / TIME_MODEL_FILE).unlink()
    sel = Selector.load(model_copy)
    p = ConvProblem(n=32, c=64, k=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, dtype="float16")
    assert sel.time_model is None and sel.choose(p)[0].predicted_time_ms is None
    with pytest.raises(SelectorError, match="no time model"):
        sel.predicted_time_ms(p, [DEFAULT_ID])


def test_a_listed_time_model_file_that_is_missing_damaged_or_corrupt_is_named(model_copy):
    manifest = json.loads((model_copy / MANIFEST_FILE).read_text())
    assert manifest["files"][TIME_MODEL_FILE]["bytes"] == (model_copy / TIME_MODEL_FILE).stat().st_size
    (model_copy / TIME_MODEL_FILE).write_text("tree\nnonsense=1\n")
    # Checked against the manifest's size and hash before LightGBM reads a byte.
    with pytest.raises(SelectorError, match=r"time_model\.txt: 16 bytes, the manifest records"):
        Selector.load(model_copy)
    # Recorded as it is (a model made so): LightGBM's own refusal, named.
    manifest["files"][TIME_MODEL_FILE] = describe_file(model_copy / TIME_MODEL_FILE)
    (model_copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(SelectorError, match=r"time_model\.txt: corrupt"):
        Selector.load(model_copy)
    (model_copy / TIME_MODEL_FILE).unlink()
    with pytest.raises(SelectorError, match=r"time_model\.txt: the manifest lists a time model"):
        Selector.load(model_copy)


def test_time_model_round_trip(slice_model, tmp_path):
    sel = Selector.load(slice_model[0])
    again = Selector.load(sel.save(tmp_path / "again"))
    assert TIME_MODEL_FILE in again.manifest["files"] and verify_directory(tmp_path / "again") == []
    p = ConvProblem(n=8, c=32, k=48, h=20, w=20, r=3, s=3, pad_h=1, pad_w=1)
    assert again.predicted_time_ms(p, [DEFAULT_ID]) == pytest.approx(sel.predicted_time_ms(p, [DEFAULT_ID]))


def test_record_files_records_reports_but_never_the_model_files(model_copy):
    from algosel.learn.artifact import record_files

    (model_copy / "notes.csv").write_text("a,b\n1,2\n")
    manifest = record_files(model_copy, ["notes.csv"])
    assert manifest["files"]["notes.csv"] == describe_file(model_copy / "notes.csv")
    assert verify_directory(model_copy) == []
    for name in ("model.txt", TIME_MODEL_FILE, "catalogue.parquet", "manifest.json", "../x.csv"):
        with pytest.raises(SelectorError, match="does not re-record"):
            record_files(model_copy, [name])
    with pytest.raises(SelectorError, match="missing"):
        record_files(model_copy, ["absent.csv"])


def test_predicted_times_of_the_nearest_list_include_candidates_off_the_shortlist(slice_model):
    sel = Selector.load(slice_model[0])
    p = ConvProblem(n=20, c=48, k=80, h=30, w=30, r=3, s=3, pad_h=1, pad_w=1, dtype="float16", direction="bwd_filter")
    assert not sel.is_recorded(p)
    rows, source = sel.candidates_for(p, live=False)
    assert source.startswith("nearest:")
    shortlist = sel.manifest["shortlist_rank"]
    off = [r["candidate_id"] for r in rows if r["space"] == "cudnn" and min(r["rank_a"], r["rank_b"]) >= shortlist]
    assert off, "the nearest list has configs beyond the shortlist"
    ids = [off[0], DEFAULT_ID]
    times = sel.predicted_time_ms(p, ids)  # nothing memoised yet: computed from the nearest list
    assert list(times) == ids and all(t > 0 for t in times.values())
    assert times == sel.predicted_time_ms(p, ids, rows=rows)


def test_predicted_times_of_a_list_the_runtime_ranked(slice_model, slice_records):
    """The runtime ranks cuDNN's live list (rank_rows), then asks for its top candidates' times and PyTorch's
    default's naming that list (``rows=``): the times rank_rows predicted are reused, and equal those computed
    afresh; ids the model's own list lacks are not silently looked up in a list ranked before."""
    frame, _ = slice_records
    sel = Selector.load(slice_model[0])
    p = ConvProblem(n=24, c=40, k=88, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1, dtype="float16")
    nearest, _ = sel.candidates_for(p, live=False)
    live = [dict(r, candidate_id=r["candidate_id"] + "_live") if r["space"] == "cudnn" else dict(r) for r in nearest]
    ranked = sel.rank_rows(p, live)
    ids = [c.candidate_id for c in ranked[:3]]
    assert any(i.endswith("_live") for i in ids)
    times = sel.predicted_time_ms(p, [*ids, DEFAULT_ID], rows=live)
    assert times == pytest.approx(sel.predicted_time_ms(p, [*ids, DEFAULT_ID], rows=list(live)))  # afresh
    assert [times[i] for i in ids] == pytest.approx([c.predicted_time_ms for c in ranked[:3]])
    # A live id off the shortlist was not predicted by rank_rows: computed from the list named.
    off = [r["candidate_id"] for r in live if r["candidate_id"].endswith("_live")
           and min(r["rank_a"], r["rank_b"]) >= sel.manifest["shortlist_rank"]]  # fmt: skip
    assert off and sel.predicted_time_ms(p, off[:1], rows=live)[off[0]] > 0
    live_id = next(i for i in ids if i.endswith("_live"))
    with pytest.raises(ValueError, match="is not a candidate"):  # the model's own list: no live id there
        sel.predicted_time_ms(p, [live_id])
    with pytest.raises(ValueError, match="is not a candidate"):
        sel.predicted_time_ms(p, ["cudnn:nowhere"], rows=live)


def test_predicted_times_are_of_the_list_named_whatever_was_ranked_last(slice_model):
    """Ranking a second list of the same problem (verify mode's three lists after its shortlist's two) leaves the
    first list's times to that list: asked of the first list, they are its own; asked of the second, its own."""
    sel = Selector.load(slice_model[0])
    p = ConvProblem(n=24, c=40, k=88, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1, dtype="float16")
    nearest, _ = sel.candidates_for(p, live=False)
    first = [dict(r, candidate_id=r["candidate_id"] + "_a") if r["space"] == "cudnn" else dict(r) for r in nearest]
    second = [dict(r, candidate_id=r["candidate_id"] + "_b") if r["space"] == "cudnn" else dict(r) for r in nearest]
    ranked_first = sel.rank_rows(p, first)
    top_first = ranked_first[0].candidate_id
    assert top_first.endswith("_a") and sel.predicted_time_ms(p, [top_first], rows=first)[top_first] > 0
    ranked = sel.rank_rows(p, second)
    with pytest.raises(ValueError, match="is not a candidate"):
        sel.predicted_time_ms(p, [top_first], rows=second)
    assert sel.predicted_time_ms(p, [top_first], rows=first)[top_first] == pytest.approx(
        ranked_first[0].predicted_time_ms)  # fmt: skip
    top = ranked[0].candidate_id
    assert sel.predicted_time_ms(p, [top], rows=second)[top] == pytest.approx(ranked[0].predicted_time_ms)
