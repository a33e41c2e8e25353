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


@pytest.fixture(autouse=True)
def _gpu_switches_at_once(request, monkeypatch):
    """GPU tests exercise the routes themselves: their switches are made on the first call, not after the runtime's
    probation looked at the device, and kept without a step trial (both of which their own tests in
    test_gpu_runtime.py turn back on)."""
    if request.node.get_closest_marker("gpu") is not None:
        monkeypatch.setattr("algosel.runtime.executor.PROBE_CALLS", 0)
        monkeypatch.setattr("algosel.runtime.executor.block_clock", lambda device: None)
