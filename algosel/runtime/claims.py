"""One measurement per job: processes that share a persistent cache (the ranks of a DistributedDataParallel job on
one host, or on hosts sharing its folder) claim a problem before verify mode times it.

The first process to meet a new problem creates its claim file (``O_CREAT | O_EXCL``: exactly one process wins),
times it, and writes the decision into the shared cache. Every other process that meets the problem meanwhile waits
for that decision (``policy.sharing.wait_s`` at most) and runs it, so the ranks of a job run the same decision and
the job times each problem once, not once per rank. Nothing deadlocks: a claim older than
``policy.sharing.claim_stale_s``, or whose process on this host is gone, is taken over; a wait that runs out times
the problem itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ProblemClaims:
    """Claim files under ``folder`` (the shared cache's environment folder: ``claims/<problem hash>.claim``)."""

    def __init__(self, folder: str | os.PathLike, stale_s: float, clock: Callable[[], float] = time.time):
        self.folder = Path(folder) / "claims"
        self.stale_s = stale_s
        self.clock = clock  # wall-clock seconds: claims are compared across processes

    def _path(self, problem_key: str) -> Path:
        return self.folder / f"{hashlib.blake2b(problem_key.encode(), digest_size=10).hexdigest()}.claim"

    def claim(self, problem_key: str) -> bool:
        """Whether this process now holds ``problem_key``'s claim (a stale one of another process is taken over)."""
        path = self._path(problem_key)
        for _ in range(2):  # once more after removing a stale claim
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                if not self._stale(path):
                    return False
                path.unlink(missing_ok=True)
                continue
            except OSError:  # no claims here (read-only folder...): this process times it alone, as without a job
                return True
            with os.fdopen(fd, "w") as fh:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "at_s": self.clock(),
                           "problem": problem_key}, fh)  # fmt: skip
            return True
        return False

    def release(self, problem_key: str) -> None:
        """Drop this process's claim (its decision is in the cache, or it failed and another may try)."""
        try:
            self._path(problem_key).unlink(missing_ok=True)
        except OSError:
            pass

    def _stale(self, path: Path) -> bool:
        """Whether a claim is abandoned: older than ``stale_s``, or made by a process of this host that is gone."""
        try:
            info: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):  # being written, or damaged: judged by its age
            info = {}
        try:
            age_s = self.clock() - float(info.get("at_s", path.stat().st_mtime))
        except OSError:
            return True  # gone meanwhile
        if age_s > self.stale_s:
            return True
        if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
            try:
                os.kill(info["pid"], 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # alive, another user's
                return False
        return False


def wait_for(get: Callable[[], Any], timeout_s: float, poll_s: float = 0.02,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Any:
    """``get()``'s first answer other than None within ``timeout_s`` (None: it never came)."""
    deadline = clock() + timeout_s
    while True:
        hit = get()
        if hit is not None or clock() >= deadline:
            return hit
        sleep(poll_s)
