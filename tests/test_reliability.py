"""Nothing a user does gets a segfault, a traceback, a hang or a silently wrong answer.

Every case runs the command line as a user does, ``python -m algosel ...`` in a subprocess, and checks the exit
status, that no signal ended the process, that stderr holds no traceback (and, for an error, exactly one line
naming the bad value), and that the files the command must not write are unchanged (hashed before and after).
The command lines run concurrently (one fixture, a thread pool), so that this module stays fast.

Also here: ``algosel evaluate`` of a truncated model or one of another GPU, and ``algosel train`` on tiny records,
repeatedly, while every core is busy (it hung so). A real sweep process killed, stopped and restarted:
tests/test_reliability_sweep.py. Damaged model and record files read by the library:
tests/test_model_and_record_files.py; predict's API: tests/test_predict_api.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_rows import check_command_row, run_commands
from conftest import REPO, SLICE
from support import RECORDED, SHIPPED, Row, copy_model, hashes, run_in_process, run_in_subprocess, truncate

from algosel.learn.artifact import (
    CATALOGUE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    SelectorError,
    record_files,
    verify_directory,
)
from algosel.learn.time_model import TIME_MODEL_FILE
from algosel.learn.train import SMALL_DATA_ROWS, training_threads
from algosel.problem import ConvProblem
from algosel.records import write_part

LOGS = Path(__file__).resolve().parent / "fixtures" / "cudnn_logs"
#: A problem the shipped model's records and the slice hold (as support.RECORDED).
SLICE_KEY = "n1024_c64_k1024_h8_w8_r8_s8_p0x0_u1x1_d1x1_g1_float16_nchw_fwd"
FIELDS = ["--n", "32", "--c", "64", "--k", "64", "--h", "56", "--w", "56", "--r", "3", "--s", "3", "--pad", "1"]


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
        model = copy_model(SHIPPED, root / f"truncated-{pct}")
        truncate(model / MODEL_FILE, pct / 100)
        paths[f"truncated-{pct}"] = model
    other = copy_model(slice_model[0], root / "other-gpu")
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
    copy_model(SHIPPED, checkout / "models" / "h200-cudnn91900")
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


# ---------------------------------------------------------------------------------------------- train
def test_train_on_tiny_records_with_every_core_busy(inputs, tmp_path) -> None:
    """The hang: `algosel train` on tiny records with its default 2 LightGBM threads took 42-60 s and at times
    over 300 s (7 s on one thread) while other processes kept the cores busy, each thread spinning at OpenMP's
    barriers for its partner. Here spinning processes keep every core busy while the command line trains (in a
    process forked from one that imported the libraries, the spinning started once they are in), under a timeout,
    with --force over a directory holding an old model and a report its manifest lists; the model says it trained
    on one thread."""
    root = tmp_path / "models"
    old = copy_model(inputs["slice-model"], root / "t")
    (old / "report.csv").write_text("an old report")
    record_files(old, ["report.csv"])  # the model's own: its manifest lists it
    argv = ["train", str(inputs["tiny"]), "--models", str(root), "--name", "t", "--quick", "--folds", "2",
            "--no-progress", "--force"]  # fmt: skip
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    burners: list[subprocess.Popen] = []

    def burn() -> None:
        burners.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores))

    try:
        # Before: 75 s and 174 s for two trainings here; now about 5 s on a busy 2-core machine.
        [(res, _)] = run_commands([(argv, REPO, {})], jobs=1, timeout=120, on_ready=burn)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert len(burners) == cores
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


def test_evaluate_scores_a_model_of_another_gpu_only_when_forced(inputs, tmp_path) -> None:
    from algosel.study.evaluation import run_evaluation

    with pytest.raises(SelectorError, match="trained for NVIDIA B200 .* records are of GPU 'NVIDIA H200'"):
        run_evaluation(str(inputs["other-gpu"]), [str(SLICE)], str(tmp_path / "a"), lono=False, progress=False)
    assert not (tmp_path / "a").exists()
    text = run_evaluation(str(inputs["other-gpu"]), [str(SLICE)], str(tmp_path / "b"), lono=False, progress=False,
                          force=True)  # fmt: skip
    assert "note: scored on records of another environment (--force)" in text and "Held-out shapes" in text
