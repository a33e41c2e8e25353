"""Learning from the runtime cache: verify mode's measured decisions as records
(:func:`algosel.runtime.measured.records_from_cache`), and ``algosel train --from-cache`` on them beside the
committed slice's records."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SLICE

from algosel.candidates import DEFAULT_ID
from algosel.cli import main
from algosel.learn.cache_records import FROM_CACHE_COLUMN, WEIGHT_COLUMN, check_cache_weight, with_cache_records
from algosel.learn.selector import Selector
from algosel.problem import ConvProblem
from algosel.records.environment import HARDWARE_FIELDS
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.decision import Decision
from algosel.runtime.measured import VERIFY_SOURCE, records_from_cache


@pytest.fixture(scope="module")
def slice_selector(slice_model):
    return Selector.load(slice_model[0])


def _unrecorded(selector: Selector, frame, count: int) -> list[ConvProblem]:
    """``count`` problems of the slice at a batch size its records lack (so that no sweep row holds them)."""
    out = []
    for key in sorted(frame["problem_key"].unique()):
        problem = ConvProblem.from_key(key).replace(n=3)
        if not selector.is_recorded(problem) and problem not in out:
            out.append(problem)
        if len(out) == count:
            return out
    raise AssertionError("the slice has too few problems")


def _fill(root, selector: Selector, problems: list[ConvProblem], gpu_name: str = "NVIDIA H200") -> RuntimeCache:
    """A runtime cache written by its own writer: a measured decision per problem (the model's top 2 and the
    default, the second one failed on the first problem), a predicted one and a records one beside."""
    environment = {"gpu_name": gpu_name, "cudnn": 91900, "torch": "2.x", "cudnn_frontend": "none",
                   "model": selector.manifest["data_fingerprint"], "algosel": "test"}  # fmt: skip
    cache = RuntimeCache(root, environment)
    for i, problem in enumerate(problems):
        top = [c.candidate_id for c in selector.choose(problem, top_k=2)]
        times = {cid: 0.5 + 0.1 * j for j, cid in enumerate(top)} | {DEFAULT_ID: 1.0}
        if i == 0 and len(top) > 1:
            times[top[1]] = math.inf
        cache.put(Decision(problem.key, top[0], "measured", times_ms=times, host_us={top[0]: 4.0}))
    spare = problems[0].replace(n=5)
    cache.put(Decision(spare.key, DEFAULT_ID, "predicted", times_ms={DEFAULT_ID: 0.1}))
    cache.put(Decision(spare.replace(n=7).key, DEFAULT_ID, "records", times_ms={DEFAULT_ID: 0.1}))
    return cache


def test_measured_decisions_become_records_with_the_model_s_candidate_columns(tmp_path, slice_selector, slice_records):
    problems = _unrecorded(slice_selector, slice_records[0], 3)
    cache = _fill(tmp_path, slice_selector, problems)
    frame = records_from_cache(cache.folder, slice_selector)
    # predicted and records decisions are no measurement: only the three measured problems
    assert set(frame["problem_key"]) == {p.key for p in problems}
    assert set(frame["source"]) == {VERIFY_SOURCE}
    first = frame[frame["problem_key"] == problems[0].key].set_index("candidate_id")
    assert (first["status"] == "run_failed").sum() == 1 and first.loc[DEFAULT_ID, "time_ms_median"] == 1.0
    listed = {r["candidate_id"]: r for r in slice_selector.candidates_for(problems[1])[0]}
    for row in frame[frame["problem_key"] == problems[1].key].itertuples():
        assert (row.rank_a, row.rank_b, row.engine_id) == (
            listed[row.candidate_id]["rank_a"], listed[row.candidate_id]["rank_b"],
            listed[row.candidate_id]["engine_id"])  # fmt: skip
    (env,) = frame.attrs["environments"].values()
    assert env["gpu_name"] == "NVIDIA H200" and env["model"] == slice_selector.manifest["data_fingerprint"]
    assert {f: env[f] for f in HARDWARE_FIELDS} == {f: slice_selector.environment[f] for f in HARDWARE_FIELDS}
    assert set(frame["env_id"]) == {env["env_id"]}


def test_without_the_model_the_columns_come_from_the_ids_ranks_unknown(tmp_path, slice_selector, slice_records):
    cache = _fill(tmp_path, slice_selector, _unrecorded(slice_selector, slice_records[0], 1))
    frame = records_from_cache(cache.folder)
    assert len(frame) >= 2 and set(frame["rank_a"]) == {-1}
    assert not set(HARDWARE_FIELDS) & set(next(iter(frame.attrs["environments"].values())))
    _, _, summary = with_cache_records(*slice_records, [frame])
    assert summary["rows_without_ranks"] == int((frame["space"] == "cudnn").sum())


def test_a_folder_that_is_not_a_cache_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path}: not a runtime cache folder"):
        records_from_cache(tmp_path)


def test_the_sweep_s_own_problems_keep_the_sweep_s_rows(tmp_path, slice_selector, slice_records):
    frame, envs = slice_records
    recorded = ConvProblem.from_key(frame["problem_key"].iloc[0])
    problems = [recorded, *_unrecorded(slice_selector, frame, 1)]
    cache = _fill(tmp_path, slice_selector, problems)
    joined, _, summary = with_cache_records(frame, envs, [records_from_cache(cache.folder, slice_selector)], 0.5)
    cached = joined[joined[FROM_CACHE_COLUMN]]
    assert set(cached["problem_key"]) == {problems[1].key} and set(cached[WEIGHT_COLUMN]) == {0.5}
    assert set(joined.loc[~joined[FROM_CACHE_COLUMN], WEIGHT_COLUMN]) == {1.0}
    assert summary == {"rows": len(cached), "rows_without_ranks": 0, "problems": 1,
                       "problems_measured_by_the_sweep": 1, "weight": 0.5}  # fmt: skip


@pytest.mark.parametrize("weight", [0, -1, math.inf, math.nan, "x", True])
def test_a_cache_weight_that_is_no_positive_number_is_refused(weight):
    with pytest.raises(ValueError, match="cache weight must be a number > 0"):
        check_cache_weight(weight)


def _train(tmp_path, *extra: str) -> int:
    return main(["train", str(SLICE), "--models", str(tmp_path / "models"), "--quick", "--n-estimators", "20",
                 "--folds", "2", "--no-progress", *extra])  # fmt: skip


def test_train_from_cache_makes_a_new_model_that_knows_the_cached_problems(
    tmp_path, slice_model, slice_selector, slice_records, capsys
):
    models = tmp_path / "models"
    models.mkdir()
    (models / "first").symlink_to(slice_model[0])  # the model that filled the cache, found by its fingerprint
    problems = _unrecorded(slice_selector, slice_records[0], 4)
    cache = _fill(tmp_path / "cache", slice_selector, problems)
    assert _train(tmp_path, "--name", "second", "--from-cache", str(tmp_path / "cache"), "--cache-weight", "2") == 0
    assert "wrote" in capsys.readouterr().out
    second = Selector.load(models / "second")
    assert all(second.is_recorded(p) for p in problems)  # its catalogue holds the measured problems
    summary = json.loads((models / "second" / "manifest.json").read_text())["cache_records"]
    assert summary["problems"] == 4 and summary["weight"] == 2.0
    assert second.manifest["data_fingerprint"] != slice_selector.manifest["data_fingerprint"]

    # A model retrained on a cache is never an edit of one: an existing directory is refused, --force or not.
    for force in ([], ["--force"]):
        assert _train(tmp_path, "--name", "second", "--from-cache", str(cache.folder), *force) == 2
        err = capsys.readouterr().err.strip()
        assert "second exists; a model retrained on a runtime cache is a new model directory" in err
        assert len(err.splitlines()) == 1


def test_train_from_cache_errors_are_one_line(tmp_path, slice_selector, slice_records, capsys):
    problems = _unrecorded(slice_selector, slice_records[0], 1)
    cases = []
    not_a_cache = tmp_path / "empty"
    not_a_cache.mkdir()
    cases.append((["--from-cache", str(not_a_cache)], f"--from-cache {not_a_cache}: not a runtime cache folder"))
    unknown = _fill(tmp_path / "unknown", slice_selector, problems)  # its model is not under --models
    cases.append((["--from-cache", str(unknown.folder)], "which is neither under --models"))
    for args, text in cases:
        assert _train(tmp_path, "--name", "x", *args) == 2
        err = capsys.readouterr().err.strip()
        assert text in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exited:  # argparse's own refusal, one line, status 2
        _train(tmp_path, "--name", "x", "--from-cache", str(unknown.folder), "--cache-weight", "0")
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and "--cache-weight: expected a positive number, got '0'" in err
    assert len(err.splitlines()) == 1


def test_train_from_a_cache_with_nothing_measured_or_of_another_gpu_is_refused(
    tmp_path, slice_model, slice_selector, slice_records, capsys
):
    models = tmp_path / "models"
    models.mkdir()
    (models / "first").symlink_to(slice_model[0])
    fingerprint = slice_selector.manifest["data_fingerprint"]
    idle = RuntimeCache(tmp_path / "idle", {"gpu_name": "NVIDIA H200", "cudnn": 91900, "model": fingerprint})
    idle.put(Decision("n1_c1_k1_h1_w1_r1_s1_p0x0_u1x1_d1x1_g1_float32_nchw_fwd", DEFAULT_ID, "predicted"))
    assert _train(tmp_path, "--name", "y", "--from-cache", str(tmp_path / "idle")) == 2
    assert "no measured decision (verify mode's) to learn from" in capsys.readouterr().err
    other = _fill(tmp_path / "other", slice_selector, _unrecorded(slice_selector, slice_records[0], 1), "NVIDIA H100")
    assert _train(tmp_path, "--name", "z", "--from-cache", str(other.folder)) == 2
    err = capsys.readouterr().err
    assert "not of the records' GPU and cuDNN (h200-cudnn91900)" in err and not (models / "z").exists()
