"""Nothing a user does gets a segfault, a traceback, a hang or a silently wrong answer.

Every case runs the command line as a user does, ``python -m algosel ...`` in a subprocess, and checks the exit
status, that no signal ended the process, that stderr holds no traceback (and, for an error, exactly one line
naming the bad value), and that the files the command must not write are unchanged (hashed before and after).
The command lines run concurrently (one fixture, a thread pool), so that this module stays fast.

Also here: ``algosel train`` on tiny records, repeatedly, while every core is busy (it hung so). A real sweep
process killed, stopped and restarted: tests/test_reliability_sweep.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cli_rows import check_command_row
from conftest import REPO, SLICE
from support import RECORDED, Row, hashes, run_in_process, run_in_subprocess

import algosel
from algosel.files import atomic_directory, write_text
from algosel.learn.artifact import (
    CATALOGUE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    SelectorError,
    record_files,
    verify_directory,
)
from algosel.learn.extrapolation import ExtrapolationWarning, extrapolation_warnings_scope
from algosel.learn.models import load_default
from algosel.learn.selector import Selector
from algosel.learn.time_model import TIME_MODEL_FILE
from algosel.learn.train import SMALL_DATA_ROWS, training_threads
from algosel.problem import ConvProblem
from algosel.records import RecordsError, load_records, read_part, write_part

SHIPPED = REPO / "models" / "joint-h100-h200-cudnn91900"
LOGS = Path(__file__).resolve().parent / "fixtures" / "cudnn_logs"
#: A problem the shipped model's records and the slice hold (as support.RECORDED).
SLICE_KEY = "n1024_c64_k1024_h8_w8_r8_s8_p0x0_u1x1_d1x1_g1_float16_nchw_fwd"
FIELDS = ["--n", "32", "--c", "64", "--k", "64", "--h", "56", "--w", "56", "--r", "3", "--s", "3", "--pad", "1"]


def _truncate(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def _copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _first_shapes(frame, count: int):
    keys = frame["problem_key"].map(lambda k: ConvProblem.from_key(k).shape_key)
    return frame[keys.isin(sorted(keys.unique())[:count])]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, slice_model, slice_records) -> dict[str, Path]:
    """Damaged and edge-case inputs, built once."""
    root = tmp_path_factory.mktemp("inputs")
    frame, envs = slice_records
    paths: dict[str, Path] = {"root": root}
    for pct in (10, 50):
        model = _copy_model(SHIPPED, root / f"truncated-{pct}")
        _truncate(model / MODEL_FILE, pct / 100)
        paths[f"truncated-{pct}"] = model
    other = _copy_model(slice_model[0], root / "other-gpu")
    manifest = json.loads((other / MANIFEST_FILE).read_text())
    manifest["environment"]["gpu_name"] = "NVIDIA B200"
    (other / MANIFEST_FILE).write_text(json.dumps(manifest))
    paths["other-gpu"] = other

    negative = frame.copy()
    ok = negative["status"] == "ok"
    negative.loc[ok, "time_ms_median"] = -negative.loc[ok, "time_ms_median"]
    paths["negative"] = write_part(root / "negative" / "part-neg.parquet", negative.to_dict("records"), envs.values())
    paths["zero-rows"] = write_part(root / "zero" / "part-empty.parquet", [], envs.values())
    one = frame[frame["problem_key"] == frame["problem_key"].iloc[0]]
    paths["one-problem"] = write_part(root / "one" / "part-one.parquet", one.to_dict("records"), envs.values())
    paths["tiny"] = write_part(root / "tiny" / "part-tiny.parquet", _first_shapes(frame, 8).to_dict("records"),
                               envs.values())  # fmt: skip
    bad_part = root / "corrupt-part" / "part-bad.parquet"
    bad_part.parent.mkdir()
    bad_part.write_bytes(b"PAR1 not really a parquet file")
    paths["corrupt-part"] = bad_part

    log = (LOGS / "pytorch.log.gz").read_bytes()
    (root / "truncated.log.gz").write_bytes(log[: len(log) // 2])
    paths["truncated-gz"] = root / "truncated.log.gz"
    (root / "existing-file").write_text("keep me\n")
    paths["existing-file"] = root / "existing-file"

    # `algosel train` from a checkout's root: models/ holds a model of the name the slice's GPU gives (a user's own).
    checkout = root / "checkout"
    _copy_model(SHIPPED, checkout / "models" / "h200-cudnn91900")
    paths["checkout"] = checkout
    paths["slice-model"] = slice_model[0]
    return paths


def _rows(p: dict[str, Path]) -> dict[str, Row]:
    out = p["root"] / "out"
    return {
        # A truncated model.txt (an interrupted copy): LightGBM segfaulted on it.
        "predict-truncated-model-10%": Row(["predict", "--model", str(p["truncated-10"]), "--key", RECORDED],
                                           says=("model.txt", "bytes"), unchanged=(p["truncated-10"],)),
        # train from a checkout's root overwrote the shipped model.
        "train-over-an-existing-model": Row(["train", str(SLICE), "--quick", "--no-progress"], cwd=p["checkout"],
                                            says=("h200-cudnn91900 exists", "--force"), unchanged=(p["checkout"],)),
        "train-0-row-part": Row(["train", str(p["zero-rows"]), "--models", str(out / "m0"), "--quick"],
                                says=(str(p["zero-rows"]), "no records"), unchanged=(out / "m0",)),
        "train-1-problem": Row(["train", str(p["one-problem"]), "--models", str(out / "m1"), "--quick"],
                               says=(str(p["one-problem"]), "1 shape(s)", "give more records"),
                               unchanged=(out / "m1",)),
        "train-folds-0": Row(["train", str(SLICE), "--models", str(out / "mf"), "--folds", "0"],
                             says=("--folds", "'0'"), unchanged=(out / "mf",)),
        "train-folds-1": Row(["train", str(SLICE), "--models", str(out / "mf"), "--folds", "1"],
                             says=("--folds", "'1'"), unchanged=(out / "mf",)),
        "report-out-is-a-file": Row(["report", "--data", str(SLICE), "--out", str(p["existing-file"])],
                                    says=("--out", str(p["existing-file"]), "not a directory"),
                                    unchanged=(p["existing-file"],)),
        "evaluate-out-is-a-file": Row(["evaluate", "--model", str(p["slice-model"]), "--data", str(SLICE), "--out",
                                       str(p["existing-file"])],
                                      says=("--out", "not a directory"), unchanged=(p["existing-file"],)),
        "analyze-log-truncated-gz": Row(["analyze-log", str(p["truncated-gz"])],
                                        says=(str(p["truncated-gz"]), "truncated or corrupt gzip"),
                                        unchanged=(p["truncated-gz"],)),
        "summarize-negative-times": Row(["summarize", str(p["negative"])],
                                        says=(str(p["negative"]), "time_ms_median", "not positive"),
                                        unchanged=(p["negative"],)),
        "evaluate-model-of-another-gpu": Row(["evaluate", "--model", str(p["other-gpu"]), "--data", str(SLICE),
                                              "--out", str(out / "eval-other"), "--no-lono"],
                                             says=("NVIDIA B200", "--force"),
                                             unchanged=(p["other-gpu"], out / "eval-other")),
        "sweep-gpus-abc": Row(["sweep", "--out", str(out / "sw"), "--gpus", "abc"], says=("--gpus", "'abc'"),
                              unchanged=(out / "sw",)),
        "predict-key-and-n": Row(["predict", "--key", RECORDED, "--n", "99"], says=("--key", "--n")),
        "predict-key-and-dtype": Row(["predict", "--key", RECORDED, "--dtype", "float32"], says=("--key", "--dtype")),
        "predict-workspace-1GB": Row(["predict", "--key", RECORDED, "--max-workspace-bytes", "1GB"],
                                     says=("--max-workspace-bytes", "'1GB'")),
        "predict-top-k-0": Row(["predict", "--key", RECORDED, "--top-k", "0"], says=("--top-k", "'0'")),
        # Answers outside what the model covers say so.
        "predict-bfloat16": Row(["predict", "--model", str(p["slice-model"]), *FIELDS, "--dtype", "bfloat16",
                                 "--offline"], status=0, says=("extrapolated: dtype 'bfloat16'",),
                                warns="dtype 'bfloat16'"),
        # Cases that already worked, so that they stay working.
        "predict-recorded-problem": Row(["predict", "--model", str(p["slice-model"]), "--key", SLICE_KEY,
                                         "--offline"], status=0, says=(SLICE_KEY, "1. ", "(records)"),
                                        unchanged=(p["slice-model"],)),
        "predict-bad-field": Row(["predict", *FIELDS[:-2], "--pad", "-1"], says=("pad_h", "-1")),
        "summarize-corrupt-part": Row(["summarize", str(p["corrupt-part"])],
                                      says=(str(p["corrupt-part"]), "not a readable Parquet"),
                                      unchanged=(p["corrupt-part"],)),
        "sweep-bad-shard": Row(["sweep", "--out", str(out / "sw"), "--shard", "3/2", "--dry-run"],
                               says=("--shard 3/2", "need 0 <= i < n"), unchanged=(out / "sw",)),
    }  # fmt: skip


#: Rows run through ``algosel.cli.main`` in this process instead of a subprocess: their commands import torch,
#: pandas and LightGBM (2-3 s of CPU a process), which this process has already imported; what is checked is the
#: same. The others stay subprocesses, fresh interpreters (the bad-input files' rows are processes forked from one
#: that imported the libraries: tests/cli_rows.py): the truncated model's (a segmentation fault would end this
#: process), a warning's, those whose time test_errors_come_before_any_long_work compares, one or more a command.
IN_PROCESS = ("train-0-row-part", "train-1-problem", "train-folds-1", "analyze-log-truncated-gz",
              "summarize-negative-times", "evaluate-model-of-another-gpu", "sweep-bad-shard", "predict-key-and-dtype",
              "predict-bad-field", "train-over-an-existing-model", "summarize-corrupt-part")  # fmt: skip


@pytest.fixture(scope="module")
def ran(inputs) -> dict[str, Row]:
    """Every row: the subprocesses in a thread pool, the in-process ones meanwhile in this thread."""
    rows = _rows(inputs)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run_in_subprocess, row) for name, row in rows.items() if name not in IN_PROCESS}
        done = {name: run_in_process(rows[name]) for name in IN_PROCESS}
        return {name: done.get(name) or futures[name].result() for name in rows}


ROW_NAMES = list(_rows({k: Path("/unused") for k in (
    "root", "truncated-10", "truncated-50", "other-gpu", "negative", "zero-rows", "one-problem", "tiny",
    "corrupt-part", "truncated-gz", "existing-file", "checkout", "slice-model")}))  # fmt: skip


@pytest.mark.parametrize("name", ROW_NAMES)
def test_command_line_row(ran: dict[str, Row], name: str) -> None:
    check_command_row(ran[name], hashes)


def test_errors_come_before_any_long_work(ran: dict[str, Row]) -> None:
    """The errors that need no records or model are found while parsing: no library import, under a second of
    CPU here; the slowest one that loads nothing big (report's --out) stays far below its 10 s of work."""
    quick = ["sweep-gpus-abc", "predict-key-and-n", "predict-workspace-1GB", "predict-top-k-0", "train-folds-0"]
    assert max(ran[n].seconds for n in quick) < ran["predict-recorded-problem"].seconds
    assert ran["report-out-is-a-file"].seconds < ran["predict-recorded-problem"].seconds


# --------------------------------------------------------------------------------------- the model directory
@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.9999])
def test_a_truncated_shipped_model_is_refused_before_lightgbm_reads_it(tmp_path, fraction) -> None:
    """What predict, evaluate and the hook load (load_default -> Selector.load): refused naming the file. Were
    LightGBM to read the file, this test process would die of the segmentation fault."""
    model = _copy_model(SHIPPED, tmp_path / SHIPPED.name)
    recorded = json.loads((SHIPPED / MANIFEST_FILE).read_text())["files"][MODEL_FILE]["bytes"]
    _truncate(model / MODEL_FILE, fraction)
    with pytest.raises(SelectorError, match=rf"model\.txt: \d+ bytes, the manifest records {recorded} "):
        load_default(models_root=tmp_path)


def test_evaluate_refuses_a_truncated_model_and_the_hook_runs_pytorchs_without_it(inputs, tmp_path) -> None:
    """The other two loaders of the table's first row: ``algosel evaluate`` refuses it; the hook's model is refused
    with one warning naming it, and the executor runs PyTorch's own convolutions (tests/test_hook_fallbacks.py runs
    a training step so, where the hook's default model, ``load_default``, cannot load; the truncated file's refusal
    by ``load_default`` is the test above's)."""
    from algosel.runtime.fallbacks import HookUnavailableWarning
    from algosel.runtime.hook import Executor
    from algosel.study.evaluation import run_evaluation

    with pytest.raises(SelectorError, match=r"model\.txt: \d+ bytes, the manifest records"):
        run_evaluation(str(inputs["truncated-50"]), [str(SLICE)], str(tmp_path / "e"), lono=False, progress=False)
    assert not (tmp_path / "e").exists()
    with pytest.warns(HookUnavailableWarning, match=r"model\.txt: \d+ bytes, the manifest records"):
        assert Executor(selector=str(inputs["truncated-50"])).unavailable


def test_a_damaged_catalogue_is_refused(tmp_path) -> None:
    model = _copy_model(SHIPPED, tmp_path / "m")
    data = bytearray((model / CATALOGUE_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    (model / CATALOGUE_FILE).write_bytes(bytes(data))
    with pytest.raises(SelectorError, match=r"catalogue\.parquet: content differs from the manifest's sha256"):
        Selector.load(model)
    assert verify_directory(model) == [f"{model / CATALOGUE_FILE}: differs from the manifest"]


def test_shipped_models_are_as_their_manifests_record_them() -> None:
    for model in (SHIPPED, REPO / "models" / "h200-cudnn91900-legacy"):
        manifest = json.loads((model / MANIFEST_FILE).read_text())
        assert sorted(manifest["files"]) == sorted(p.name for p in model.iterdir() if p.name != MANIFEST_FILE)
        assert verify_directory(model) == []


def test_save_refuses_an_existing_directory_and_replaces_only_a_models_own_files(slice_model, tmp_path) -> None:
    sel = Selector.load(slice_model[0])
    out = tmp_path / "m"
    out.mkdir()
    (out / "report.csv").write_text("an old model's report\n")
    with pytest.raises(SelectorError, match="exists"):
        sel.save(out)
    with pytest.raises(SelectorError, match="holds no model manifest"):
        sel.save(out, replace=True)
    assert sorted(p.name for p in out.iterdir()) == ["report.csv"]
    model = tmp_path / "model"
    sel.save(model, extra_files={"old.txt": "an old model's own report\n"})
    sel.save(model, replace=True, extra_files={"notes.txt": "new\n"})
    expected = [MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE, "notes.txt"] + ([TIME_MODEL_FILE] if sel.time_model else [])
    assert sorted(p.name for p in model.iterdir()) == sorted(expected)
    assert verify_directory(model) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary directory left"


def test_a_failed_directory_write_leaves_nothing(tmp_path) -> None:
    target = tmp_path / "d"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("killed mid-write (simulated)")
    assert list(tmp_path.iterdir()) == []
    write_text(tmp_path / "f.txt", "whole\n")
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


# ---------------------------------------------------------------------------------------------- train
def test_train_on_tiny_records_with_every_core_busy(inputs, tmp_path) -> None:
    """The hang: `algosel train` on tiny records with its default 2 LightGBM threads took 42-60 s and at times
    over 300 s (7 s on one thread) while other processes kept the cores busy, each thread spinning at OpenMP's
    barriers for its partner. Here spinning processes keep every core busy while the command line trains, under a
    timeout, with --force over a directory holding an old model and a report its manifest lists; the model says
    it trained on one thread."""
    root = tmp_path / "models"
    old = _copy_model(inputs["slice-model"], root / "t")
    (old / "report.csv").write_text("an old report")
    record_files(old, ["report.csv"])  # the model's own: its manifest lists it
    argv = ["train", str(inputs["tiny"]), "--models", str(root), "--name", "t", "--quick", "--folds", "2",
            "--no-progress", "--force"]  # fmt: skip
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        # Before: 75 s and 174 s for two trainings here; now about 10 s on a busy 2-core machine.
        res = subprocess.run(
            [sys.executable, "-m", "algosel", *argv], cwd=REPO, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout.count("wrote ") == 1
    model = root / "t"
    names = sorted(p.name for p in model.iterdir())
    assert "report.csv" not in names, "an old model's report survived beside the new model"
    assert names == sorted([MODEL_FILE, TIME_MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE, "README.md", "test_report.csv",
                            "tuning.csv", "calibration.json"])  # fmt: skip
    manifest = json.loads((model / MANIFEST_FILE).read_text())
    assert manifest["params"]["num_threads"] == 1  # tiny records: one thread
    assert verify_directory(model) == []
    assert [p.name for p in root.iterdir()] == ["t"], "no temporary directory left"


def test_training_threads() -> None:
    assert training_threads(2, 5_000) == 1
    assert training_threads(2, SMALL_DATA_ROWS - 1) == 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert training_threads(64, SMALL_DATA_ROWS) == min(64, cores)
    assert training_threads(1, 10**7) == 1


# --------------------------------------------------------------------------------------- predict's API
GOOD = {"n": 2, "c": 8, "k": 8, "h": 8, "w": 8, "r": 3, "s": 3}


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((3,), {}, r"takes a ConvProblem .* got 3 \(int\)"),
        ((), {**GOOD, "top_k": "3"}, r"top_k=.* integer >= 1, got '3'"),
        ((), {**GOOD, "top_k": 0}, r"top_k=.* got 0"),
        ((), {**GOOD, "max_workspace_bytes": "1GB"}, r"max_workspace_bytes=.* got '1GB'"),
        ((), {**GOOD, "max_workspace_bytes": -1}, r"max_workspace_bytes=.* got -1"),
        ((), {**GOOD, "deterministic": "yes"}, r"deterministic=.* got 'yes'"),
        ((), {**GOOD, "live": "no"}, r"live=.* got 'no'"),
        ((), {**GOOD, "model": 3}, r"model=.* got 3"),
        ((), {**GOOD, "n": 0}, r"ConvProblem.n must be positive, got 0"),
    ],
    ids=[
        "problem-3",
        "top_k-str",
        "top_k-0",
        "workspace-str",
        "workspace-negative",
        "deterministic-str",
        "live-str",
        "model-int",
        "n-0",
    ],
)
def test_predict_refuses_bad_arguments_naming_them(args, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        algosel.predict(*args, **kwargs)


def test_predict_takes_numpy_integers() -> None:
    got = algosel.predict(ConvProblem.from_key(RECORDED), top_k=np.int64(2), max_workspace_bytes=np.int64(1 << 30),
                          live=False)  # fmt: skip
    assert len(got) == 2 and not got[0].extrapolated and got[0].extrapolation == ""


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"dtype": "float32_strict"}, "dtype 'float32_strict' is not among the model's records (bfloat16, float16,"),
        ({"n": 10**9}, "n=1000000000 is 6.25e+05x the largest recorded n (1600)"),
        ({"h": 10**6, "w": 10**6}, "h=1000000 is 1.75e+03x the largest recorded h (570)"),
    ],
    ids=["float32_strict", "n-1e9", "h-w-1e6"],
)
def test_answers_outside_the_models_records_say_so(fields, reason) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        choices = algosel.predict(ConvProblem.from_key(RECORDED).replace(**fields), top_k=3, live=False)
    assert choices and all(c.extrapolated and reason in c.extrapolation for c in choices)


def test_one_extrapolation_warning_per_kind_and_process() -> None:
    """A first extrapolation (the batch size) does not silence a later one of another kind (the channels); a
    second of a kind already warned about (another batch size) stays quiet."""
    p = ConvProblem.from_key(RECORDED)
    sel = load_default()  # the shipped model, without the answers an earlier test got (memoised, warned no more)
    with extrapolation_warnings_scope(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert algosel.predict(p.replace(n=10**6), live=False, model=sel)[0].extrapolated
        assert algosel.predict(p.replace(c=10**5), live=False, model=sel)[0].extrapolated
        assert algosel.predict(p.replace(n=10**7), live=False, model=sel)[0].extrapolated
        near = algosel.predict(p.replace(n=48), live=False, model=sel)  # not recorded, but within the records' sizes
    assert near[0].source.startswith("nearest:") and not near[0].extrapolated
    caught = [str(w.message) for w in seen if issubclass(w.category, ExtrapolationWarning)]
    assert len(caught) == 2, caught
    assert "n=1000000 is 625x the largest recorded n (1600)" in caught[0] and "kind (n)" in caught[0]
    assert "c=100000 is" in caught[1] and "kind (c)" in caught[1]


def test_evaluate_scores_a_model_of_another_gpu_only_when_forced(inputs, tmp_path) -> None:
    from algosel.study.evaluation import run_evaluation

    with pytest.raises(SelectorError, match="trained for NVIDIA B200 .* records are of GPU 'NVIDIA H200'"):
        run_evaluation(str(inputs["other-gpu"]), [str(SLICE)], str(tmp_path / "a"), lono=False, progress=False)
    assert not (tmp_path / "a").exists()
    text = run_evaluation(str(inputs["other-gpu"]), [str(SLICE)], str(tmp_path / "b"), lono=False, progress=False,
                          force=True)  # fmt: skip
    assert "note: scored on records of another environment (--force)" in text and "Held-out shapes" in text


# ------------------------------------------------------------------------------------------------ records
@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("status", "exploded", "column status: unknown status"),
        ("time_ms_median", 0.0, "column time_ms_median: a time that is not positive"),
        ("time_ms_min", float("nan"), "column time_ms_min"),
        ("time_ms_p75", float("inf"), "column time_ms_p75"),
        ("workspace_bytes", -2, "column workspace_bytes: below -1"),
    ],
)
def test_records_without_physical_sense_are_refused_naming_file_and_column(
    slice_records, tmp_path, column, value, message
) -> None:
    frame, envs = slice_records
    bad = frame.head(20).copy()
    bad.loc[bad.index[3], column] = value
    path = write_part(tmp_path / "part-x.parquet", bad.to_dict("records"), envs.values())
    with pytest.raises(RecordsError, match=re.escape(f"{path}: {message}")):
        read_part(path)


def test_failed_rows_may_have_no_time(slice_records, tmp_path) -> None:
    frame, envs = slice_records
    rows = frame.head(5).copy()
    rows["status"], rows["time_ms_median"] = "build_failed", float("nan")
    assert len(read_part(write_part(tmp_path / "part-f.parquet", rows.to_dict("records"), envs.values()))[0]) == 5


# ------------------------------------------------------------------------------------------------- README
def test_readme_summarize_command_prints_the_readme_table(capsys) -> None:
    """The README's main job runs `algosel summarize` on the records its table is of, and prints its numbers."""
    from algosel.cli import main

    readme = (REPO / "README.md").read_text()
    command = re.search(r"\.venv/bin/algosel summarize ([^&]+?) &&", readme)
    assert command, "the main job runs algosel summarize"
    assert command.group(1).split() == ["data/sweeps/h200"]
    section = readme[readme.index("## What it finds") :]
    assert "`algosel summarize data/sweeps/h200` on 5,742 problems" in section
    table = re.findall(r"^\| [^|]+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+)% \|$", section, re.M)[:3]
    assert len(table) == 3
    assert main(["summarize", *command.group(1).split(), "--worst", "0"]) == 0
    printed = capsys.readouterr().out
    assert "5742 problems" in printed
    for selector, (geomean, p95, worst, within) in zip(("heuristic_a", "heuristic_b", "pytorch_default"), table):
        line = next(x for x in printed.splitlines() if x.split()[:3] == ["all", "all", selector])
        values = line.split()
        assert float(values[4]) == pytest.approx(float(geomean), abs=5e-4)
        assert float(values[5]) == pytest.approx(float(p95), abs=5e-3)
        assert float(values[6]) == pytest.approx(float(worst), abs=0.5)  # 2188.5 is written 2189x
        assert values[7] == f"{within}%"


def test_shipped_records_pass_the_physical_checks() -> None:
    frame, _ = load_records(REPO / "data" / "sweeps" / "h200-legacy")
    assert len(frame) == 79212
