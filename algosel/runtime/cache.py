"""The runtime's persistent cache: decisions (and built cuDNN plans) per problem, reused across processes and runs.

PyTorch's benchmark mode re-tunes every new shape in every process; with this cache a second process, a later run
and the other ranks of a job pay nothing again. One folder per environment (GPU, cuDNN, torch, the cuDNN
frontend, the model's data fingerprint, algosel's version) under ``<cache_root>/runtime/``, holding

- ``decisions.jsonl``: a header line, then one JSON line per decision (problem key, chosen candidate, where the
  choice came from, measured or predicted times). Lines are appended under an exclusive ``fcntl`` lock, so several
  processes of one job share the file safely; a reader skips a damaged line with one warning; a file that is not
  this format is set aside (renamed ``*.bad``) and rebuilt;
- ``plans/<sha>.plan``: the cuDNN frontend's serialized plan of a chosen engine config, after the uids of its x,
  w and y tensors (written atomically).

A serialized plan can carry compiled code (the frontend says to deserialize only trusted blobs): plans are loaded
only from a folder owned by this user that no other user can write to; otherwise decisions are still used, plans are
built again, and one warning says why.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import stat
import struct
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = "algosel-runtime-cache"
FORMAT_VERSION = 1
#: A plan file: the uids of the graph's x, w and y tensors (three little-endian int64), then the blob.
_UIDS = struct.Struct("<3q")


@dataclass
class Decision:
    """What the runtime runs for one problem (one direction of one convolution)."""

    problem: str  # problem key
    candidate_id: str  # "pytorch:default" for PyTorch's own path
    source: str  # "records", "measured" (timed here) or "predicted" (the model's time estimate)
    reason: str = ""  # why PyTorch's own path, where it is
    times_ms: dict[str, float] = field(default_factory=dict)  # per candidate, measured or predicted
    host_us: dict[str, float] = field(default_factory=dict)  # host time per call, measured (records or here)

    @property
    def passes_through(self) -> bool:
        return self.candidate_id == "pytorch:default"

    def gain_us(self) -> float:
        """Device time per call the chosen candidate saves over PyTorch's default by ``times_ms`` (0 where either
        time is unknown)."""
        t, t_default = self.times_ms.get(self.candidate_id), self.times_ms.get("pytorch:default")
        if t is None or t_default is None or math.isnan(t) or math.isnan(t_default):
            return 0.0
        return max(0.0, 1e3 * (t_default - t))


def environment_key(fields: Mapping[str, Any]) -> str:
    """A short name for an environment: the hash of the fields that make decisions and plans specific."""
    payload = json.dumps(dict(sorted(fields.items())), sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()


def _trusted(path: Path) -> str | None:
    """``None`` when ``path`` and its parents up to the cache root are owned by this user and not writable by
    others; else why not."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot stat {path}: {exc}"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by its group or by others"
    return None


class RuntimeCache:
    """The decisions and plans of one environment (see the module docstring).

    Parameters
    ----------
    root : path
        The cache root (:func:`algosel.runtime.native.cache_root` by default).
    environment : mapping
        The fields that identify the environment (a folder per distinct value).
    """

    def __init__(self, root: str | Path, environment: Mapping[str, Any]):
        self.environment = dict(environment)
        self.folder = Path(root) / "runtime" / environment_key(self.environment)
        self.decisions_path = self.folder / "decisions.jsonl"
        self.plans_folder = self.folder / "plans"
        self._decisions: dict[str, Decision] = {}
        self._offset = 0  # bytes of decisions.jsonl read so far (other processes append)
        self._warned: set[str] = set()
        self._plans_trusted: bool | None = None

    # ----------------------------------------------------------------------------------------- decisions
    def get(self, problem_key: str) -> Decision | None:
        """The decision recorded for a problem, by this process or any other (new lines are read on a miss)."""
        hit = self._decisions.get(problem_key)
        if hit is None:
            self._read_new()
            hit = self._decisions.get(problem_key)
        return hit

    def put(self, decision: Decision) -> None:
        """Record a decision (appended to the file; kept in memory even where the disk refuses)."""
        self._decisions[decision.problem] = decision
        line = json.dumps(asdict(decision), sort_keys=True) + "\n"
        try:
            with self._locked("a") as fh:
                if fh.tell() == 0:
                    fh.write(self._header())
                fh.write(line)
        except OSError as exc:
            self._warn_once("write", f"algosel: cannot write the runtime cache {self.decisions_path} ({exc})")

    def decisions(self) -> list[Decision]:
        self._read_new()
        return list(self._decisions.values())

    def _header(self) -> str:
        return json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "environment": self.environment},
                          sort_keys=True, default=str) + "\n"  # fmt: skip

    @contextlib.contextmanager
    def _locked(self, mode: str) -> Iterator[Any]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.decisions_path, mode + "+" if mode == "a" else mode, encoding="utf-8") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX if mode == "a" else fcntl.LOCK_SH)
            try:
                if mode == "a":
                    fh.seek(0, os.SEEK_END)
                yield fh
                fh.flush()
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _read_new(self) -> None:
        try:
            size = self.decisions_path.stat().st_size
        except OSError:
            return
        if size <= self._offset:
            return
        start = self._offset
        try:
            with self._locked("r") as fh:
                fh.seek(self._offset)
                data = fh.read()
                self._offset = fh.tell()
        except OSError as exc:
            self._warn_once("read", f"algosel: cannot read the runtime cache {self.decisions_path} ({exc})")
            return
        lines = [line for line in data.splitlines() if line.strip()]
        if start == 0 and lines:
            try:
                header = json.loads(lines[0])
            except json.JSONDecodeError:
                header = {}
            if (
                not isinstance(header, dict)
                or header.get("format") != FORMAT
                or header.get("version") != FORMAT_VERSION
            ):
                self._set_aside(f"it does not start with a version-{FORMAT_VERSION} {FORMAT} header")
                return
            lines = lines[1:]
        bad = 0
        for line in lines:
            try:
                self._add(Decision(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                bad += 1  # a line cut by a kill mid-write, or edited by hand
        if bad:
            self._warn_once("damaged", f"algosel: skipped {bad} damaged line(s) of the runtime cache "
                                       f"{self.decisions_path}")  # fmt: skip

    def _add(self, d: Decision) -> None:
        if not isinstance(d.problem, str) or not isinstance(d.candidate_id, str):
            raise TypeError("not a decision")
        self._decisions[d.problem] = d

    def _set_aside(self, why: str) -> None:
        bad = self.decisions_path.with_suffix(".jsonl.bad")
        try:
            os.replace(self.decisions_path, bad)
        except OSError:
            pass
        self._offset = 0
        self._warn_once("foreign", f"algosel: the runtime cache {self.decisions_path} was set aside as {bad} "
                                   f"({why}); it is rebuilt")  # fmt: skip

    # --------------------------------------------------------------------------------------------- plans
    def _plan_path(self, problem_key: str, candidate_id: str) -> Path:
        digest = hashlib.blake2b(f"{problem_key}|{candidate_id}".encode(), digest_size=12).hexdigest()
        return self.plans_folder / f"{digest}.plan"

    def plans_trusted(self) -> bool:
        """Whether serialized plans may be loaded from this cache (see the module docstring)."""
        if self._plans_trusted is None:
            why = None
            for path in (self.folder.parent.parent, self.folder.parent, self.folder, self.plans_folder):
                if path.exists():
                    why = _trusted(path)
                    if why:
                        break
            if why:
                self._warn_once("trust", f"algosel: not loading serialized cuDNN plans from the runtime cache: {why} "
                                         "(a plan can carry compiled code); they are built again")  # fmt: skip
            self._plans_trusted = why is None
        return self._plans_trusted

    def get_plan(self, problem_key: str, candidate_id: str) -> tuple[tuple[int, int, int], bytes] | None:
        """The cached plan: the uids of its graph's x, w and y tensors, and the frontend's serialized blob."""
        if not self.plans_trusted():
            return None
        try:
            data = self._plan_path(problem_key, candidate_id).read_bytes()
        except OSError:
            return None
        if len(data) <= _UIDS.size:
            return None
        return _UIDS.unpack(data[: _UIDS.size]), data[_UIDS.size :]

    def put_plan(self, problem_key: str, candidate_id: str, uids: tuple[int, int, int], blob: bytes) -> None:
        path = self._plan_path(problem_key, candidate_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(_UIDS.pack(*uids) + blob)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            self._warn_once("plan", f"algosel: cannot write a plan into the runtime cache ({exc})")

    # --------------------------------------------------------------------------------------------- misc
    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(text, RuntimeWarning, stacklevel=3)

    def summary(self) -> dict[str, Any]:
        decisions = self.decisions()
        sources: dict[str, int] = {}
        for d in decisions:
            key = "pytorch (pass-through)" if d.passes_through else d.source
            sources[key] = sources.get(key, 0) + 1
        plans = list(self.plans_folder.glob("*.plan")) if self.plans_folder.is_dir() else []
        return {
            "folder": str(self.folder),
            "environment": self.environment,
            "decisions": len(decisions),
            "by_source": sources,
            "plans": len(plans),
            "plan_bytes": sum(p.stat().st_size for p in plans),
        }


def cache_folders(root: str | Path) -> list[Path]:
    """Every environment folder of the runtime cache under ``root``."""
    base = Path(root) / "runtime"
    return sorted(p for p in base.glob("*") if p.is_dir()) if base.is_dir() else []
