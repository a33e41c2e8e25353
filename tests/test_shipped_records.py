"""The shipped H200 records (data/sweeps/h200) are as algosel.records describes them, and the catalogue of the
committed slice gives each problem its own rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from algosel.problem import DIRECTIONS, ConvProblem
from algosel.records import load_records, part_paths
from algosel.spaces.base import STATUSES

H200 = Path(__file__).resolve().parent.parent / "data" / "sweeps" / "h200"


# ------------------------------------------------------------------------------------------ shipped data
@pytest.fixture(scope="module")
def h200() -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    if not part_paths(H200):
        pytest.fail(f"no record parts under {H200}")
    return load_records(H200)


def test_h200_ok_rows_are_timed(h200) -> None:
    frame, _ = h200
    ok = frame[frame["status"] == "ok"]
    assert len(ok) > 0
    assert (ok["time_ms_median"] > 0).all()
    assert (ok["repeats"] >= 1).all()
    assert (ok["time_ms_min"] <= ok["time_ms_median"]).all()


def test_h200_failures_carry_a_reason_and_no_time(h200) -> None:
    frame, _ = h200
    failed = frame[frame["status"] != "ok"]
    assert (failed["reason"].str.len() > 0).all()
    assert failed["time_ms_median"].isna().all()


def test_h200_statuses_are_known(h200) -> None:
    frame, _ = h200
    assert set(frame["status"].unique()) <= set(STATUSES)


def test_h200_every_case_has_all_three_directions(h200) -> None:
    frame, _ = h200
    directions = frame.groupby("case_key")["direction"].agg(frozenset)
    assert (directions == frozenset(DIRECTIONS)).all()


def test_h200_every_problem_has_a_correct_candidate_and_the_pytorch_default(h200) -> None:
    frame, _ = h200
    ok = frame[frame["status"] == "ok"]
    assert set(ok["problem_key"]) == set(frame["problem_key"])
    assert set(frame.loc[frame["space"] == "pytorch", "problem_key"]) == set(frame["problem_key"])


def test_h200_keys_agree_with_the_problem_columns(h200) -> None:
    frame, _ = h200
    sample = frame.drop_duplicates("problem_key").sample(n=200, random_state=0)
    for row in sample.to_dict("records"):
        p = ConvProblem.from_dict(row)
        assert p.key == row["problem_key"] and p.case_key == row["case_key"]


def test_h200_has_a_single_h200_environment_with_cudnn_9_19(h200) -> None:
    frame, envs = h200
    assert len(envs) == 1
    (env,) = envs.values()
    assert "H200" in env["gpu_name"]
    assert env["cudnn"] == 91900
    assert set(frame["env_id"]) == {env["env_id"]}


def test_the_catalogue_gives_each_problem_its_own_rows_whatever_the_order_of_the_records(slice_records) -> None:
    from algosel.records.catalogue import Catalogue

    frame, _ = slice_records
    shuffled = frame.sample(frac=1.0, random_state=0)  # the catalogue sorts them by problem itself
    cat = Catalogue.from_records(shuffled)
    expected = frame.groupby("problem_key")["candidate_id"].apply(sorted).to_dict()
    assert len(cat) == len(expected)
    for key, candidates in expected.items():
        assert sorted(r["candidate_id"] for r in cat.rows(key)) == candidates
    assert cat.rows("not-a-problem") is None
    empty = Catalogue.from_records(frame.iloc[:0])
    assert len(empty) == 0 and empty.extent() == {} and empty.rows(next(iter(expected))) is None
