"""Outputs are never lost or left half-written: a closed stdout (``| head``) ends a command quietly with status 141,
a signal never splits the renames that put a folder of outputs in place, a folder of outputs is replaced only where
the command wrote it, and the command line's boundary turns an OSError into one line naming the path."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, SLICE
from support import RECORDED, hashes

from algosel.outputs import (
    OUTPUTS_RECORD,
    OutputError,
    check_output_dir,
    check_output_file,
    deferred_signals,
    write_output_dir,
)


# ------------------------------------------------------------------------------------------------ pipes
def test_a_closed_stdout_ends_the_command_quietly() -> None:
    """``algosel grid --count 100000000 | head -1``: the first line comes at once (every shape used to be drawn
    before the first was printed: minutes), and when the reader leaves the command stops with status 141
    (128 + SIGPIPE, as ``seq`` under ``set -o pipefail``), no traceback, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "algosel", "grid", "--count", "100000000"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    t0 = time.perf_counter()
    first = proc.stdout.readline()
    proc.stdout.close()
    try:
        status = proc.wait(timeout=60)
    finally:
        proc.kill()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert first.startswith(b"n") and time.perf_counter() - t0 < 30, (first, stderr)
    assert status == 128 + signal.SIGPIPE, (status, stderr)
    assert stderr == ""


class _ClosedPipe(io.StringIO):
    """stdout whose reader has left: every write raises, as a pipe's does once ``head`` has exited."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize(
    "argv", [["summarize", str(SLICE)], ["predict", "--key", RECORDED, "--json", "--offline"]], ids=lambda a: a[0]
)
def test_a_closed_stdout_ends_any_command_quietly(argv) -> None:
    """summarize and predict --json (a short output: in a real pipe it would fit the buffer and end before the
    reader left), through the command line's boundary in this process: status 141, nothing on stderr."""
    from algosel.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(_ClosedPipe()), contextlib.redirect_stderr(err):
        status = main(argv)
    assert status == 128 + signal.SIGPIPE and err.getvalue() == ""


def test_the_renames_of_a_unit_are_never_split_by_a_signal(tmp_path, monkeypatch) -> None:
    """SIGINT arriving between two renames is delivered after the last: every file new, then KeyboardInterrupt."""
    names = ("a.csv", "b.csv", "c.csv")
    write_output_dir(tmp_path, {n: b"old" for n in names}, "test", names)
    real_replace, sent = os.replace, []

    def replace_and_interrupt(src, dst):
        real_replace(src, dst)
        if not sent:
            sent.append(dst)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", replace_and_interrupt)
    # Python's own SIGINT handler, as a user's process has it: an earlier test in this process may have left another
    # (ray.init installs its own), under which SIGINT raises nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_output_dir(tmp_path, {n: b"new" for n in names}, "test", names)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent and all((tmp_path / n).read_bytes() == b"new" for n in names)
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_interrupt_before_the_renames_leaves_the_folder_as_it_was(tmp_path, monkeypatch) -> None:
    names = ("a.csv", "b.csv")
    write_output_dir(tmp_path, {n: b"old" for n in names}, "test", names)
    before = hashes(tmp_path)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_output_dir(tmp_path, {n: b"new" for n in names}, "test", names)
    assert hashes(tmp_path) == before and not list(tmp_path.glob(".*.tmp"))


def test_deferred_signals_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with deferred_signals():
        assert signal.getsignal(signal.SIGINT) is not before[0]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


# ------------------------------------------------------------------------------------- the ownership rule
def test_a_folder_of_outputs_is_replaced_whole_and_only_where_the_command_wrote_it(tmp_path) -> None:
    names = ("report.csv", "totals.csv", "figure.png")
    folder = tmp_path / "out"
    write_output_dir(folder, {"report.csv": b"1", "totals.csv": b"1"}, "cmd", names)
    (folder / "notes.txt").write_text("mine")
    # A second run of the same command: replaced without asking, and the file it no longer makes removed.
    write_output_dir(folder, {"report.csv": b"2", "figure.png": b"2"}, "cmd", names)
    assert sorted(p.name for p in folder.iterdir()) == [OUTPUTS_RECORD, "figure.png", "notes.txt", "report.csv"]
    # Another command's files of the same names, or one the user changed, are not this command's to replace.
    with pytest.raises(OutputError, match="figure.png .*not written there by algosel other"):
        check_output_dir(folder, "other", names)
    (folder / "report.csv").write_bytes(b"edited by hand")
    with pytest.raises(OutputError, match=r"report\.csv exists and was not written there by algosel cmd, or changed"):
        write_output_dir(folder, {"report.csv": b"3"}, "cmd", names)
    assert (folder / "report.csv").read_bytes() == b"edited by hand"
    write_output_dir(folder, {"report.csv": b"3"}, "cmd", names, overwrite=True)
    assert (folder / "report.csv").read_bytes() == b"3" and not (folder / "figure.png").exists()
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_single_output_file_is_refused_where_replacing_it_would_lose_something(tmp_path) -> None:
    existing = tmp_path / "x.csv"
    existing.write_text("mine")
    with pytest.raises(OutputError, match="exists; pass --overwrite"):
        check_output_file(existing)
    assert check_output_file(existing, overwrite=True) == existing
    with pytest.raises(OutputError, match="not a plain file"):  # renaming over it would replace the device
        check_output_file("/dev/null", overwrite=True)


# ----------------------------------------------------------------------------------------- the boundary
def test_the_boundary_turns_os_errors_into_one_line_naming_the_path(capsys) -> None:
    """Whatever command meets an OSError (a full disk, a file gone) ends on one line naming the path; a message
    of several lines is joined into one."""
    from algosel.cli.boundary import run_command

    def disk_full(_args):
        raise OSError(28, "No space left on device", "/data/out/report.csv")

    def several_lines(_args):
        raise ValueError("first\nsecond")

    for func, line in ((disk_full, "algosel x: error: /data/out/report.csv: No space left on device"),
                       (several_lines, "algosel x: error: first second")):  # fmt: skip
        args = type("Args", (), {"func": staticmethod(func), "command": "x"})()
        assert run_command(args) == 2
        assert capsys.readouterr().err == line + "\n"
