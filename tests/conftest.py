"""Shared fixtures: a small committed slice of the real H200 records, and a model trained on it."""

from __future__ import annotations

import os
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
def _the_h200_model_on_another_gpu(request, monkeypatch):
    """``ALGOSEL_GPU_TESTS_AS_H200=1``: GPU tests on a GPU without a shipped model of its own (an H100) see the
    shipped H200 model as this GPU's, as ``force=True`` would load it (its ranks are the H200's; what these tests
    check is the runtime's routes and results, not the model's ranks). ``.ci/gpu`` sets it on such a GPU."""
    if request.node.get_closest_marker("gpu") is None or os.environ.get("ALGOSEL_GPU_TESTS_AS_H200") != "1":
        return
    import json

    import algosel.learn.models
    import algosel.learn.selector

    manifest = json.loads((algosel.learn.models.SHIPPED_MODELS / "h200-cudnn91900" / "manifest.json").read_text())
    env = {k: manifest["environment"][k] for k in ("gpu_name", "cudnn")}
    for module in (algosel.learn.models, algosel.learn.selector):
        monkeypatch.setattr(module, "visible_gpu", lambda: dict(env))
