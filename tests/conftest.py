"""Shared fixtures: a small committed slice of the real H200 records, and a model trained on it; the order in which
the README's test command's two processes take the test files."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SLICE = REPO / "data" / "samples" / "h200-slice"

#: The test files that take longest, longest first (wall seconds of each within the README's test command on the
#: 2-core machine, 2026-12-07, in the comments; the first file to need the slice's model trains it, seconds more).
#: pytest-xdist's ``--dist loadfile`` hands each process one file at a time in the collection's order; these come
#: first, so that a long file never starts last while the other process has nothing left to do (a long file of few
#: tests would: xdist's own order puts the files of most tests first). The other files follow in that order, xdist's
#: own reordering turned off.
LONG_FILES = (
    "test_zoo_driver.py",  # 45: four processes of benchmarks/zoo.py's jobs
    "test_ray_sweep.py",  # 21: a local Ray cluster's start, most of it waiting (the other process runs meanwhile)
    "test_reliability.py",  # 21
    "test_report.py",  # 21 (with the two browser tests where chromium is installed)
    "test_bad_inputs_third.py",  # 20
    "test_tutorial.py",  # 19
    "test_reliability_sweep.py",  # 15
    "test_notebook.py",  # 14
    "test_evaluate_layers.py",  # 14
    "test_joint.py",  # 13
    "test_shared_decisions.py",  # 10
    "test_bad_inputs_models.py",  # 10
    "test_install.py",  # 10
    "test_logs.py",  # 9
    "test_bad_inputs_hook.py",  # 9
    "test_targeted_sweep_h100.py",  # 8
    "test_cli_selector.py",  # 7
    "test_bad_inputs_cli.py",  # 7
    "test_unseen.py",  # 6
    "test_selector_benchmarks.py",  # 5
    "test_zoo_gpu.py",  # 5
    "test_sweep_runs.py",  # 5
    "test_ranker.py",  # 5
    "test_model_text.py",  # 5
    "test_layers_files.py",  # 5
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's reordering by number of tests: LONG_FILES' instead
        config.option.loadscopereorder = False


def in_file_order(items: list) -> list:
    """``items`` (anything with a ``path``) with LONG_FILES' first, in that order; then the others' files, most
    tests first; the files' own order, and each file's order of its tests, are kept where these do not decide."""
    first = {name: i for i, name in enumerate(LONG_FILES)}
    tests = Counter(item.path for item in items)
    return sorted(items, key=lambda item: (first.get(item.path.name, len(first)), -tests[item.path]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = in_file_order(items)


def slice_third(directory: Path) -> Path:
    """A third of the committed slice's problems (every third case), in its environment, written to ``directory``:
    records for what trains a model and only needs it to work (training on it takes a third of the time)."""
    from algosel.records import load_records, write_part

    frame, envs = load_records(SLICE)
    keys = sorted(frame["case_key"].unique())[::3]
    write_part(directory / "part-third.parquet", frame[frame["case_key"].isin(keys)].to_dict("records"), envs.values())
    return directory


@pytest.fixture(scope="session")
def slice_records():
    from algosel.records import load_records

    return load_records(SLICE)


@pytest.fixture(scope="session")
def slice_model(tmp_path_factory):
    """A quickly trained selector on the slice (LambdaRank, 40 trees; a time model of 40 trees of 31 leaves), saved
    to a temporary directory (alone in its parent) with the summary of its training.

    Trained once per test run: under pytest-xdist the first process to ask trains it into the run's shared temporary
    directory while the other waits on a file lock, then both read it (tests copy it to change it)."""
    from filelock import FileLock

    from algosel.learn.ranker import RankerParams
    from algosel.learn.time_model import TimeModelParams
    from algosel.learn.train import train

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above each process's own
    done = shared / "slice-model.json"
    with FileLock(shared / "slice-model.lock"):
        if not done.is_file():
            out, summary = train(
                [SLICE],
                models_root=shared / "slice-model",
                grid={"objective": ["lambdarank"]},
                base=RankerParams(n_estimators=40),
                folds=2,
                progress=False,
                name="slice",
                time_params=TimeModelParams(n_estimators=40, num_leaves=31),
            )
            done.write_text(json.dumps({"model": str(out), "summary": summary}))
    made = json.loads(done.read_text())
    return Path(made["model"]), made["summary"]


@pytest.fixture(scope="session")
def shipped():
    """The shipped model for this machine (``default_model_dir``), loaded once per test process (seconds each
    time): the runtime's tests that need a real model's candidate lists and records, which none of them changes,
    the GPU tests' included."""
    from algosel.learn.models import default_model_dir
    from algosel.learn.selector import Selector

    return Selector.load(default_model_dir())


@pytest.fixture(scope="module")
def ext():
    """The compiled path's module, for the GPU tests (:func:`support.compiled_path`: skips or fails where it is not
    built)."""
    from support import compiled_path

    return compiled_path()


@pytest.fixture(autouse=True)
def _the_h200_model_on_another_gpu(request):
    """``ALGOSEL_GPU_TESTS_AS_H200=1``: GPU tests on a GPU the shipped model was not trained on see the shipped
    joint model's main GPU (the H200) as this GPU, as ``force=True`` would load it (its ranks are the H200's; what
    these tests check is the runtime's routes and results, not the model's ranks). ``.ci/gpu`` sets it on such a
    GPU. Only the GPU's identity is described so (:func:`algosel.records.environment.described_as`); torch's
    device queries stay the real device's."""
    if request.node.get_closest_marker("gpu") is None or os.environ.get("ALGOSEL_GPU_TESTS_AS_H200") != "1":
        yield
        return
    from algosel.learn.models import SHIPPED_MODELS
    from algosel.records.environment import described_as

    manifest = json.loads((SHIPPED_MODELS / "joint-h100-h200-cudnn91900" / "manifest.json").read_text())
    with described_as(gpu={k: manifest["environment"][k] for k in ("gpu_name", "cudnn")}):
        yield
