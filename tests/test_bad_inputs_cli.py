"""Bad inputs, second pass: never lose a user's file, never a traceback where one line will do.

As ``tests/test_reliability.py`` (whose :class:`Row`, runners and hashes, ``tests/support.py``'s, this module
shares), every command line runs as a user runs it, ``python -m algosel ...`` in a subprocess, all of them at once
in one module fixture: the exit status, no death by a signal, no traceback, one error line naming the bad value, and
the files it must not touch hashed before and after. Cases:

- outputs a command did not write are refused unless ``--overwrite`` (evaluate into a model directory, report over
  a user's page, layers and analyze-log over an existing file), and with it a model directory is replaced as one
  unit (its manifest consistent, no earlier run's file left);
- ``evaluate`` on records without suite shapes (``h200-loss``, ``h200-mynet``) skips leave-one-network-out;
- records that are no valid convolution (``c=-5``, ``groups=0``, ``dtype='float64'``, ``direction='sideways'``,
  a ``problem_key`` that is not its columns') and malformed Parquet metadata are refused on load;
- outputs that cannot be written (/proc, /sys, a directory for a file, a file for a directory) are one line before
  any work;
- Ctrl-C during ``report`` into an existing folder leaves it all old or all new; ``sweep --dry-run`` counts a
  journal's finished cases;
- messages that name the real trouble: a directory given as a file, ``--seed -5``, ``--name ../x``.

A closed stdout, signals during a folder's renames and the ownership rule of outputs:
tests/test_outputs_and_signals.py; the library's messages: tests/test_messages.py.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_rows import check_command_row
from conftest import REPO, SLICE
from support import SHIPPED, Row, hashes, run_in_process, run_in_subprocess

from algosel.learn.artifact import MANIFEST_FILE, verify_directory
from algosel.outputs import OUTPUTS_RECORD, write_output_dir
from algosel.problem import ConvProblem
from algosel.records import RecordsError, read_part, write_part

LOG = Path(__file__).resolve().parent / "fixtures" / "cudnn_logs" / "pytorch.log.gz"
#: The first grid shape of ``algosel sweep --suites none --grid 3 --dtypes float32`` (the journal's finished case).
GRID_ARGS = ["--suites", "none", "--grid", "3", "--dtypes", "float32"]


def _bad_part(root: Path, name: str, frame, envs, column: str, value) -> Path:
    """The first rows of the slice with one value of ``column`` replaced (in every row of the first problem)."""
    bad = frame.head(40).copy()
    bad.loc[bad["problem_key"] == bad["problem_key"].iloc[0], column] = value
    return write_part(root / name / "part-bad.parquet", bad.to_dict("records"), envs.values())


def _with_environments(part: Path, path: Path, raw: bytes) -> Path:
    """A copy of the records part with ``raw`` as the environments of its Parquet metadata."""
    table = pq.read_table(part)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"algosel.environments": raw}), path)
    return path


def _report_files(directory: Path, marker: bytes) -> dict[str, bytes]:
    """Files of ``algosel report``'s names, as an earlier report left them (recorded as written by it)."""
    from algosel.study.report import REPORT_FILES

    files = {name: marker + name.encode() for name in REPORT_FILES[:3]}
    write_output_dir(directory, files, "report", REPORT_FILES)
    return files


def _damaged_records(root: Path, frame, envs) -> dict[str, Path]:
    """Records that are no valid convolution, malformed Parquet metadata, and records without a network suite's
    shape."""
    from algosel.measure.suites import load_suites

    p: dict[str, Path] = {}
    p["c-negative"] = _bad_part(root, "c", frame, envs, "c", -5)
    p["groups-0"] = _bad_part(root, "groups", frame, envs, "groups", 0)
    p["dtype-float64"] = _bad_part(root, "dtype", frame, envs, "dtype", "float64")
    # An environments list of ints in the Parquet metadata (the schema version kept, so that it is read that far).
    p["envs-ints"] = _with_environments(p["c-negative"], root / "envs" / "part-envs.parquet", b"[1, 2]")

    # Records without a shape of the network suites, as data/sweeps/h200-loss and h200-mynet.
    suites = load_suites()
    suite_shapes = {
        ConvProblem(**{f: int(r[f]) for f in ("n", "c", "k", "h", "w", "r", "s", "pad_h", "pad_w", "stride_h",
                                              "stride_w", "dilation_h", "dilation_w", "groups")}).shape_key
        for r in suites.to_dict("records")
    }  # fmt: skip
    shape = frame["problem_key"].map(lambda k: ConvProblem.from_key(k).shape_key)
    no_suite = frame[(frame["source"] == "grid") & ~shape.isin(suite_shapes)]
    p["no-suites"] = write_part(root / "no-suites" / "part-grid.parquet", no_suite.to_dict("records"), envs.values())
    return p


def _model_directories(root: Path, slice_model) -> dict:
    """A model directory evaluate must refuse to write into, and one it overwrites (with the names an earlier
    evaluation left in it)."""
    import shutil

    from algosel.cli import main

    p: dict = {}
    p["model-refused"] = root / "model-refused"
    shutil.copytree(SHIPPED, p["model-refused"])
    # The slice's model (40 trees): leave-one-network-out retrains it per network in seconds (the shipped model's
    # settings take several times longer, and what is tested is the folder, not the model).
    p["model-overwritten"] = root / "model-overwritten"
    shutil.copytree(slice_model[0], p["model-overwritten"])
    # An earlier evaluation into the model's own folder, on records with network suites and leave-one-network-out:
    # its network_totals.csv is what the evaluation on records without suites must take away.
    earlier = ["evaluate", "--model", str(p["model-overwritten"]), "--data", str(SLICE), "--out",
               str(p["model-overwritten"]), "--overwrite", "--no-progress"]  # fmt: skip
    assert main(earlier) == 0
    p["earlier-names"] = {q.name for q in p["model-overwritten"].iterdir()}
    return p


def _users_files(root: Path) -> dict[str, Path]:
    """A user's page and file in the way, a folder and a file given where the other is expected, an empty folder of
    models and an empty dataset."""
    p: dict[str, Path] = {}
    p["user-report"] = root / "user-report"
    p["user-report"].mkdir()
    (p["user-report"] / "index.html").write_text("<p>my own page</p>\n")
    (p["user-report"] / "notes.txt").write_text("mine\n")
    p["user-file"] = root / "mine.csv"
    p["user-file"].write_text("my,own\n1,2\n")
    p["a-dir"] = root / "a-dir"
    p["a-dir"].mkdir()
    p["a-file"] = root / "a-file"
    p["a-file"].write_text("not a folder\n")
    p["models"] = root / "models"
    p["models"].mkdir()
    p["empty"] = root / "empty-dataset"
    p["empty"].mkdir()
    return p


def _killed_sweep_out(root: Path) -> Path:
    """A killed sweep's journal in --out, with the first grid case finished."""
    from algosel.measure.grid import GridSpec, sample_grid

    first = sample_grid(GridSpec(count=3))[0].replace(dtype="float32").case_key
    out = root / "sweep-out"
    out.mkdir()
    line = {"case_key": first, "environment": {"env_id": "e"}, "rows": [{"case_key": first, "env_id": "e"}]}
    (out / "journal-0of1.jsonl").write_text(json.dumps(line) + "\n")
    return out


@pytest.fixture(scope="module")
def paths(tmp_path_factory, slice_records, slice_model) -> dict[str, Path]:
    """Inputs built once: damaged records, users' files in the way, model directories to write into."""
    root = tmp_path_factory.mktemp("bad-inputs")
    frame, envs = slice_records
    p: dict[str, Path] = {"root": root}
    p.update(_damaged_records(root, frame, envs))
    p.update(_model_directories(root, slice_model))
    p.update(_users_files(root))
    p["journal-out"] = _killed_sweep_out(root)
    p["report-interrupted"] = root / "report-interrupted"
    _report_files(p["report-interrupted"], b"old ")
    return p


def _rows(p: dict[str, Path]) -> dict[str, Row]:
    out = p["root"] / "out"
    missing = str(p["root"] / "no-such-records")  # refused outputs come first: the records are never looked at
    return {
        # 4. Overwrites without asking.
        "evaluate-into-a-model-directory": Row(["evaluate", "--model", str(p["model-refused"]), "--data", missing,
                                                "--out", str(p["model-refused"]), "--no-lono"],
                                               says=("--out", "not written there by algosel evaluate", "--overwrite"),
                                               unchanged=(p["model-refused"],)),
        # 4 and 5: with --overwrite, on records without suite shapes (leave-one-network-out died of a KeyError).
        "evaluate-overwrite-model-without-suites": Row(["evaluate", "--model", str(p["model-overwritten"]), "--data",
                                                        str(p["no-suites"]), "--out", str(p["model-overwritten"]),
                                                        "--overwrite", "--no-progress"], status=0,
                                                       says=("Leave one network out: skipped", "manifest.json")),
        "report-over-a-users-page": Row(["report", "--data", missing, "--out", str(p["user-report"])],
                                        says=(str(p["user-report"] / "index.html"), "--overwrite"),
                                        unchanged=(p["user-report"],)),
        "layers-over-an-existing-file": Row(["layers", "--model", "x.py:f", "--input", "1,3,8,8", "--out",
                                             str(p["user-file"])], says=(str(p["user-file"]), "exists", "--overwrite"),
                                            unchanged=(p["user-file"],)),
        "analyze-log-csv-over-an-existing-file": Row(["analyze-log", missing, "--csv", str(p["user-file"])],
                                                     says=("--csv", str(p["user-file"]), "--overwrite"),
                                                     unchanged=(p["user-file"],)),
        # 6. Records that are no convolution.
        "summarize-c-negative": Row(["summarize", str(p["c-negative"])],
                                    says=(str(p["c-negative"]), "column c:", "with -5"), unchanged=(p["c-negative"],)),
        "train-groups-0": Row(["train", str(p["groups-0"]), "--models", str(out / "m"), "--quick"],
                              says=(str(p["groups-0"]), "column groups:", "with 0"), unchanged=(out / "m",)),
        "report-dtype-float64": Row(["report", "--data", str(p["dtype-float64"]), "--out", str(out / "r")],
                                    says=(str(p["dtype-float64"]), "column dtype:", "'float64'"),
                                    unchanged=(out / "r",)),
        # 8. Outputs that cannot be written, malformed metadata.
        "train-models-under-proc": Row(["train", missing, "--models", "/proc/algosel-models", "--quick"],
                                       says=("--models /proc/algosel-models", "cannot create files in /proc")),
        "evaluate-out-under-proc": Row(["evaluate", "--model", str(SHIPPED), "--data", missing, "--out",
                                        "/proc/algosel-eval"], says=("--out /proc/algosel-eval", "/proc")),
        "report-out-under-proc": Row(["report", "--data", missing, "--out", "/proc/algosel-report"],
                                     says=("--out /proc/algosel-report", "/proc")),
        "layers-out-read-only-sys": Row(["layers", "--model", "x.py:f", "--input", "1,3,8,8", "--out",
                                         "/sys/algosel-layers.csv"], says=("--out /sys/algosel-layers.csv", "/sys")),
        "layers-out-is-a-directory": Row(["layers", "--model", "x.py:f", "--input", "1,3,8,8", "--out",
                                          str(p["a-dir"])], says=(str(p["a-dir"]), "is a directory"),
                                         unchanged=(p["a-dir"],)),
        "analyze-log-csv-under-a-file": Row(["analyze-log", missing, "--csv", str(p["a-file"] / "x.csv")],
                                            says=("--csv", str(p["a-file"]), "is not a directory"),
                                            unchanged=(p["a-file"],)),
        "summarize-environments-list-of-ints": Row(["summarize", str(p["envs-ints"])],
                                                   says=(str(p["envs-ints"]), "environment", "'1'")),
        # 9. A dry run counts the cases a killed sweep's journal holds (the sweep compacts them, measures the rest).
        "sweep-dry-run-counts-a-journal": Row(["sweep", "--out", str(p["journal-out"]), *GRID_ARGS, "--dry-run",
                                               "--resume-from", str(p["empty"])], status=0,
                                              says=("3 cases", "1 already recorded, 2 to measure"),
                                              unchanged=(p["journal-out"],)),
        # 10. Messages that name the real trouble.
        "sweep-layers-is-a-directory": Row(["sweep", "--out", str(out / "s"), "--layers", str(p["a-dir"]),
                                            "--dry-run"], says=(str(p["a-dir"]), "is a directory")),
        "analyze-log-of-a-directory": Row(["analyze-log", str(p["a-dir"])], says=(str(p["a-dir"]), "is a directory")),
        "train-models-is-a-file": Row(["train", missing, "--models", str(p["a-file"]), "--quick"],
                                      says=("--models", str(p["a-file"]), "not a directory"),
                                      unchanged=(p["a-file"],)),
        "train-name-outside-models": Row(["train", missing, "--models", str(p["models"]), "--name", "../x",
                                          "--quick"], says=("--name '../x'", "not a path"),
                                         unchanged=(p["models"], p["root"] / "x")),
        "grid-seed-negative": Row(["grid", "--seed", "-5"], says=("--seed", "'-5'")),
    }  # fmt: skip


#: Rows run through ``algosel.cli.main`` in this process instead of a subprocess: their commands import torch,
#: pandas and LightGBM (2-3 s of CPU a process, ~20 s for these), which this process has already imported. What is
#: checked is the same (status, one stderr line, no exception escaping, files unchanged); a signal cannot end them.
#: The others are refused before any library loads: a fresh interpreter each (a tenth of a second) costs less
#: than forking them from one that imported the libraries (tests/cli_rows.py; its exit alone takes 0.3 s).
IN_PROCESS = ("evaluate-overwrite-model-without-suites", "summarize-c-negative", "train-groups-0",
              "report-dtype-float64", "summarize-environments-list-of-ints", "sweep-dry-run-counts-a-journal",
              "sweep-layers-is-a-directory", "analyze-log-of-a-directory")  # fmt: skip
ROW_NAMES = list(_rows(defaultdict(lambda: Path("/unused"))))


@pytest.fixture(scope="module")
def ran(paths) -> dict[str, Row]:
    """Every row: the subprocesses in a thread pool, the in-process ones meanwhile in this thread."""
    rows = _rows(paths)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_in_subprocess, row) for name, row in rows.items() if name not in IN_PROCESS}
        done = {name: run_in_process(rows[name]) for name in IN_PROCESS}
        return {name: done.get(name) or futures[name].result() for name in rows}


@pytest.mark.parametrize("name", ROW_NAMES)
def test_command_line_row(ran: dict[str, Row], name: str) -> None:
    check_command_row(ran[name], hashes)


def test_a_model_directory_overwritten_is_one_consistent_unit(ran: dict[str, Row], paths, slice_model) -> None:
    """``evaluate --out MODEL --overwrite`` replaced the model's report and manifest together: the earlier run's
    network_totals.csv (leave-one-network-out was skipped this time) is gone from the folder and the manifest, and
    every file is as the manifest records it; no outputs record is left in a model directory."""
    assert ran["evaluate-overwrite-model-without-suites"].result.returncode == 0
    model = paths["model-overwritten"]
    names = sorted(p.name for p in model.iterdir())
    assert "network_totals.csv" in paths["earlier-names"] and "network_totals.csv" not in names
    assert {"report.csv", "cells.csv", "top_k.csv", "top_k.png", "report.json"} <= set(names)
    files = json.loads((model / MANIFEST_FILE).read_text())["files"]
    assert sorted(files) == [n for n in names if n != MANIFEST_FILE] and verify_directory(model) == []
    assert json.loads((model / "report.json").read_text())["lono"] is None
    assert (model / "model.txt").read_bytes() == (slice_model[0] / "model.txt").read_bytes()


def test_a_user_file_beside_the_outputs_is_left_alone(ran: dict[str, Row], paths) -> None:
    assert (paths["user-report"] / "notes.txt").read_text() == "mine\n"
    assert not (paths["user-report"] / OUTPUTS_RECORD).exists()


# ----------------------------------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_during_report_leaves_the_folder_all_old_or_all_new(paths) -> None:
    """SIGINT while ``algosel report`` computes into a folder an earlier report wrote: status 130, one line, and
    the folder exactly as it was (the files are renamed into place only once all are made, the renames with the
    signals held back). A run that finished first must have left it all new."""
    folder = paths["report-interrupted"]
    before = hashes(folder)
    # Ctrl-C's own handler in the child, whatever this process lets it inherit (a pytest-xdist worker, or a shell's
    # background job, may ignore SIGINT, and Python then leaves it ignored).
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv[0] = 'algosel'; runpy.run_module('algosel', run_name='__main__')")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", start, "report", "--data", str(SLICE), "--out", str(folder)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130), (proc.returncode, err)
    assert "Traceback" not in err
    after = hashes(folder)
    if proc.returncode == 130:
        assert err.strip() == "algosel report: interrupted" and after == before
    else:
        assert (folder / "index.html").read_bytes() != b"old index.html"
        assert all(after[k] != v for k, v in before.items() if not k.endswith(OUTPUTS_RECORD) and k in after)


# --------------------------------------------------------------------------------------------- records
@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("c", -5, "column c: below 1"),
        ("groups", 0, "column groups: below 1"),
        ("pad_w", -1, "column pad_w: below 0"),
        ("dtype", "float64", "column dtype: unknown value"),
        ("direction", "sideways", "column direction: unknown value"),
        ("layout", "nwhc", "column layout: unknown value"),
        ("k", 7, "column k: not divisible by groups"),
        ("r", 9999, "column r: the (dilated) kernel is larger than the padded input"),
        ("problem_key", "n1_c1_k1_h1_w1_r1_s1_p0x0_u1x1_d1x1_g1_float32_nchw_fwd", "column problem_key: not the key"),
    ],
)
def test_records_that_are_no_convolution_are_refused_naming_file_column_and_value(
    slice_records, tmp_path, column, value, message
) -> None:
    frame, envs = slice_records
    bad = frame.head(20).copy()
    if column == "k":
        bad["groups"], bad["c"] = 2, bad["c"] * 2  # a valid grouped problem, but for k
    bad.loc[bad.index[3], column] = value
    path = write_part(tmp_path / "part-x.parquet", bad.to_dict("records"), envs.values())
    with pytest.raises(
        RecordsError, match=rf"^{re.escape(str(path))}: {re.escape(message)}.*with {re.escape(repr(value))}"
    ):
        read_part(path)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[1, 2]", "an environment in the file metadata is '1'"),
        (b'{"env_id": "x"}', "a dict, not a list"),
        (b"{not json", "not JSON"),
    ],  # fmt: skip
)
def test_malformed_environments_metadata_is_refused_naming_the_file(paths, tmp_path, raw, message) -> None:
    path = _with_environments(paths["c-negative"], tmp_path / "part-m.parquet", raw)
    with pytest.raises(RecordsError, match=f"^{path}: .*{message}"):
        read_part(path)
