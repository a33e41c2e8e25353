"""Shared fixtures: a small committed slice of the real H200 records, and a model trained on it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SLICE = REPO / "data" / "samples" / "h200-slice"


@pytest.fixture(scope="session")
def slice_records():
    from algosel.records import load_records

    return load_records(SLICE)


@pytest.fixture(scope="session")
def slice_model(tmp_path_factory):
    """A quickly trained selector on the slice (LambdaRank, 40 trees; a time model of 40 trees of 31 leaves), saved
    to a temporary directory."""
    from algosel.learn.ranker import RankerParams
    from algosel.learn.time_model import TimeModelParams
    from algosel.learn.train import train

    root = tmp_path_factory.mktemp("models")
    out, summary = train(
        [SLICE],
        models_root=root,
        grid={"objective": ["lambdarank"]},
        base=RankerParams(n_estimators=40),
        folds=2,
        progress=False,
        name="slice",
        time_params=TimeModelParams(n_estimators=40, num_leaves=31),
    )
    return out, summary
