"""Processes of a test script forked from one that imported it once: a real process each (its own pid, signals,
exit status, stdout read line by line as it prints), without the seconds of CPU a fresh interpreter spends
importing torch, pandas and algosel again (tests/test_reliability_sweep.py starts a dozen sweep processes).

``Forks(module)`` starts the forking process, which imports ``module`` (a file of tests/) and then, per
:meth:`Forks.start`, forks a process that runs ``module.main()`` with ``sys.argv`` set, as ``python FILE ARGV``
would: its stdout a pipe (a FIFO) the test reads, its stderr a file, its exit the interpreter's own (``SystemExit``
unwinds to the top; atexit handlers run). The forking process runs no thread and nothing of the module's work,
so that each process starts as a fresh one would (tests/cli_rows.py does the same for ``algosel`` command lines).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parent

_SERVER = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
module = __import__(sys.argv[2])
import gc
gc.freeze()
print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if "wait" in request:
        _, status = os.waitpid(request["wait"], 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:  # the script's process from here on: `python FILE ARGV`
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(err, 2)
        out = os.open(request["stdout"], os.O_WRONLY)  # the FIFO: open once the test reads it
        os.dup2(out, 1)
        os.close(err), os.close(out)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        sys.argv = [module.__file__, *request["argv"]]
        sys.exit(module.main())
    print(json.dumps({"pid": pid}), flush=True)
"""


class Forked:
    """One forked process, as much of :class:`subprocess.Popen` as the tests use: ``pid``, ``stdout`` (text, read
    as it is printed), ``send_signal``, ``kill``, ``wait``, ``communicate`` and ``returncode``."""

    def __init__(self, forks: Forks, pid: int, stdout_path: Path, stderr_path: Path):
        self._forks, self.pid, self._stderr_path = forks, pid, stderr_path
        self.stdout = open(stdout_path, encoding="utf-8")  # noqa: SIM115 - closed by wait()
        self.returncode: int | None = None

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """The exit status (negative: the signal that ended it). Past ``timeout`` seconds the process is killed
        and :class:`subprocess.TimeoutExpired` raised."""
        if self.returncode is None:
            try:
                self.returncode = self._forks.request({"wait": self.pid}, timeout)["status"]
            except subprocess.TimeoutExpired:
                self.kill()
                self.returncode = self._forks.reply()["status"]
                raise
            finally:
                self.stdout.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """What is left of stdout, and all of stderr, once the process has ended."""
        rest = self.stdout.read()
        self.wait(timeout)
        return rest, self._stderr_path.read_text(encoding="utf-8")


class Forks:
    """The forking process of one test script (see the module docstring); a context manager."""

    def __init__(self, module: str):
        self._folder = Path(tempfile.mkdtemp(prefix="algosel-forks-"))
        self._count = 0
        self._server = subprocess.Popen([sys.executable, "-c", _SERVER, str(TESTS), module], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip
        ready = self._server.stdout.readline()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the forking process of {module} did not start: {ready!r}")

    def request(self, message: dict, timeout: float | None = None) -> dict:
        """Send ``message``; its reply (one line: the forking process answers each request in turn)."""
        self._server.stdin.write(json.dumps(message) + "\n")
        self._server.stdin.flush()
        if not select.select([self._server.stdout], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(message, timeout)
        return self.reply()

    def reply(self) -> dict:
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process ended (status {self._server.wait(60)})")
        return json.loads(line)

    def start(self, *argv: str, cwd: Path, env: Mapping[str, str] | None = None) -> Forked:
        """A new process running the module's ``main()`` with ``argv`` in ``cwd``, ``env`` added to its
        environment."""
        self._count += 1
        stdout, stderr = self._folder / f"{self._count}.out", self._folder / f"{self._count}.err"
        os.mkfifo(stdout)
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env or {}), "stdout": str(stdout),
                   "stderr": str(stderr)}  # fmt: skip
        return Forked(self, self.request(request)["pid"], stdout, stderr)

    def run(
        self, *argv: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """:meth:`start`, then its whole output, as :func:`subprocess.run` gives it."""
        proc = self.start(*argv, cwd=cwd, env=env)
        stdout, stderr = proc.communicate(timeout)
        return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=60)
        for path in self._folder.iterdir():
            path.unlink()
        self._folder.rmdir()

    def __enter__(self) -> Forks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
