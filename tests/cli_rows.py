"""What every bad-input command line row must show (tests/test_reliability.py, test_bad_inputs_cli.py,
test_bad_inputs_models.py, test_bad_inputs_third.py): no death by a signal, no traceback, the expected exit status,
and then either one error line naming what it says, or the output it says (with at most one warning line where the
row expects one); and the files it must not write unchanged.

:func:`run_rows` runs rows as ``python -m algosel ...``, each in a process of its own, forked from one process that
imported the libraries every command imports (2-3 s of CPU a process, most of a row's time; the process's exit
is the interpreter's own). tests/test_reliability.py keeps rows of every kind in fresh interpreters
(``subprocess.run``): the errors found before any library loads, a segmentation fault's file, a warning row."""

from __future__ import annotations

import io
import json
import locale
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: What a command's process imports before it does anything of its own: imported once, by the process the command
#: processes are forked from.
LIBRARIES = ("numpy", "pandas", "pyarrow.parquet", "lightgbm", "torch", "matplotlib")

#: The process the commands are forked from (``python -c``; argv: the spec file, the results file). A command's
#: process redirects its stdout and stderr to files, changes to its folder, adds its environment and runs
#: ``algosel`` as ``python -m algosel`` does: its exit, an exception's traceback and its exit handlers are the
#: interpreter's own. The forking process runs this loop alone: no Python thread (the libraries' native pools wait
#: idle; a forked process has only the thread that forked it), nothing of algosel imported, so that every module of
#: algosel, and what it reads from the environment, is the command's own.
_FORK_SERVER = r"""
import json, os, signal, sys, time, warnings
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as algosel's main() sets it before the libraries load
warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded", category=DeprecationWarning)
spec = json.loads(open(sys.argv[1]).read())
for name in spec["libraries"]:
    __import__(name)
import gc
gc.freeze()  # the libraries' objects, never garbage: no command's collections (nor its exit's) walk them again
print("ready", flush=True)  # run_commands' on_ready: the libraries are in, the commands start now
commands, todo, running, results = spec["commands"], list(range(len(spec["commands"]))), {}, {}
while todo or running:
    while todo and len(running) < spec["jobs"]:
        i = todo.pop(0)
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the command's process, as `python -m algosel ARGV` from here on
            for fd, path in ((1, commands[i]["stdout"]), (2, commands[i]["stderr"])):
                opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(opened, fd)
                os.close(opened)
            os.chdir(commands[i]["cwd"])
            os.environ.update(commands[i]["env"])
            sys.path[0] = os.getcwd()
            sys.argv = ["-m", *commands[i]["argv"]]
            import runpy
            runpy.run_module("algosel", run_name="__main__", alter_sys=True)
            sys.exit(0)
        running[pid] = (i, started)
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid == 0:
        for child, (i, started) in running.items():
            if time.perf_counter() - started > spec["timeout"]:
                results[i] = {"timed_out": True}
                os.kill(child, signal.SIGKILL)
        time.sleep(0.005)
        continue
    i, started = running.pop(pid)
    result = {"returncode": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - started}
    results[i] = {**result, **results.get(i, {})}
with open(sys.argv[2], "w") as out:
    json.dump([results[i] for i in range(len(commands))], out)
"""


def _text(path: Path) -> str:
    """A captured stream as ``subprocess.run(text=True)`` gives it (the locale's encoding, universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(path.read_bytes()), encoding=locale.getpreferredencoding(False)).read()


def run_commands(
    commands: Sequence[tuple[Sequence[str], Path, Mapping[str, str]]],
    jobs: int = 2,
    timeout: float = 300.0,
    on_ready: Callable[[], None] | None = None,
) -> list[tuple[subprocess.CompletedProcess, float]]:
    """Each ``(argv, cwd, env)`` as ``python -m algosel ARGV`` in ``cwd``, ``env`` added to this process's
    environment, ``jobs`` at a time: each in a process of its own, forked from one that imported :data:`LIBRARIES`
    once (where a process a command would start them itself). Returns each command's result (its exit status,
    negative for the signal that ended it, as :func:`subprocess.run` gives it; stdout, stderr) and its seconds.
    ``on_ready()`` is called once the libraries are imported, just before the first command starts.

    Raises
    ------
    subprocess.TimeoutExpired
        A command ran past ``timeout`` seconds (it is killed), as :func:`subprocess.run` would raise."""
    with tempfile.TemporaryDirectory(prefix="algosel-commands-") as tmp:
        folder = Path(tmp)
        spec = {"libraries": LIBRARIES, "jobs": jobs, "timeout": timeout, "commands": [
            {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "stdout": str(folder / f"{i}.out"),
             "stderr": str(folder / f"{i}.err")} for i, (argv, cwd, env) in enumerate(commands)]}  # fmt: skip
        (folder / "spec.json").write_text(json.dumps(spec))
        with subprocess.Popen([sys.executable, "-c", _FORK_SERVER, str(folder / "spec.json"),
                               str(folder / "results.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as server:  # fmt: skip
            if server.stdout.readline().strip() == "ready" and on_ready is not None:
                on_ready()
            _, stderr = server.communicate(timeout=timeout * len(commands) + 120)
        if server.returncode != 0:
            raise RuntimeError(f"the commands' fork server ended with {server.returncode}: {stderr[-3000:]}")
        results = json.loads((folder / "results.json").read_text())
        out = []
        for i, ((argv, _, _), result) in enumerate(zip(commands, results)):
            cmd = [sys.executable, "-m", "algosel", *argv]
            if result.get("timed_out"):
                raise subprocess.TimeoutExpired(cmd, timeout)
            done = subprocess.CompletedProcess(cmd, result["returncode"], _text(folder / f"{i}.out"),
                                               _text(folder / f"{i}.err"))  # fmt: skip
            out.append((done, result["seconds"]))
        return out


def check_command_row(row: Any, hashes: Callable[..., dict[str, str]]) -> None:
    """Assert what a row (``argv``, ``status``, ``says``, ``unchanged``, ``before``, ``result``, optionally ``warns``)
    must show; ``hashes(*paths)`` fingerprints the files it must not write, as ``row.before`` was taken."""
    res = row.result
    assert res is not None
    assert res.returncode >= 0, f"killed by signal {-res.returncode}: {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == row.status, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    command = row.argv[0]
    warns = getattr(row, "warns", "")
    if row.status == 2:
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith(f"algosel {command}: error: "), lines[0]
        for fragment in row.says:
            assert fragment in lines[0], (fragment, lines[0])
    else:
        for fragment in row.says:
            assert fragment in res.stdout, (fragment, res.stdout)
        if warns:
            assert len(lines) == 1 and lines[0].startswith(f"algosel {command}: warning: "), res.stderr
            assert warns in lines[0]
        else:
            assert not lines, res.stderr
    assert hashes(*row.unchanged) == row.before, "a file it must not write changed"


def run_rows(rows: Mapping[str, Any], hashes: Callable[..., dict[str, str]], jobs: int = 2) -> dict[str, Any]:
    """Every row (``argv``, ``unchanged``, and ``cwd`` and ``env`` where it has them: the repository and nothing
    added otherwise) through :func:`run_commands`: its ``before`` hashed first (``hashes(*row.unchanged)``), then its
    ``result`` and ``seconds`` filled in. Returns ``rows``."""
    for row in rows.values():
        row.before = hashes(*row.unchanged)
    commands = [(row.argv, getattr(row, "cwd", REPO), getattr(row, "env", {})) for row in rows.values()]
    for row, (result, seconds) in zip(rows.values(), run_commands(commands, jobs=jobs)):
        row.result, row.seconds = result, seconds
    return dict(rows)
