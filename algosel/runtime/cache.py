"""The runtime's persistent cache: decisions (and built cuDNN plans) per problem, reused across processes and runs.

A second process, a later run and the other ranks of a job pay nothing again. One folder per environment (GPU,
cuDNN, torch, the cuDNN frontend, the model's data fingerprint, algosel's version) under ``<cache_root>/runtime/``:

- ``decisions.jsonl``: a header line, then one JSON line per decision (problem key, chosen candidate, where the
  choice came from, measured or predicted times). Lines are appended under an exclusive ``fcntl`` lock, so several
  processes of one job share the file safely; a reader skips a damaged line with one warning; a file that is not
  this format is set aside (renamed ``*.bad``) and rebuilt;
- ``plans/<sha>.plan``: the cuDNN frontend's serialized plan of a chosen engine config, after the uids of its x,
  w and y tensors (written atomically);
- ``claims/<sha>.claim``: which process is timing a problem (:mod:`algosel.runtime.claims`).

``algosel cache clear`` (:func:`clear_folder`) removes only what it can prove it wrote: a folder whose
``decisions.jsonl`` starts with this format's header, whose environment is the one the folder is named after
(:func:`folder_environment`), and in it only the files of the layout above. Anything else under ``runtime/`` (a
folder without that header, a user's file inside a cache folder, a link) is left where it is, and said so.

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
import os
import re
import stat
import struct
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from algosel.candidates import DecisionSource  # noqa: F401 - Decision.source's vocabulary, importable here
from algosel.runtime.decision import Decision

log = logging.getLogger(__name__)

FORMAT = "algosel-runtime-cache"
FORMAT_VERSION = 1
#: A plan file: the uids of the graph's x, w and y tensors (three little-endian int64), then the blob.
_UIDS = struct.Struct("<3q")


def environment_key(fields: Mapping[str, Any]) -> str:
    """A short name for an environment: the hash of the fields that make decisions and plans specific."""
    payload = json.dumps(dict(sorted(fields.items())), sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=8).hexdigest()


def runtime_environment(selector: Any) -> dict[str, Any]:
    """The fields that make this process's decisions and plans specific: GPU, cuDNN, torch, the cuDNN frontend,
    ``selector``'s data fingerprint (its model) and algosel's version. The hook and ``algosel.predict(verify=k)``
    key the cache by it, so that they share one folder for one model on one machine."""
    import torch  # noqa: PLC0415

    from algosel.version import __version__  # noqa: PLC0415

    try:
        import cudnn  # noqa: PLC0415

        frontend = getattr(cudnn, "__version__", "?")
    except ImportError:
        frontend = "none"
    return {"gpu_name": torch.cuda.get_device_name(), "cudnn": int(torch.backends.cudnn.version() or 0),
            "torch": torch.__version__, "cudnn_frontend": frontend,
            "model": selector.manifest.get("data_fingerprint", "?"), "algosel": __version__}  # fmt: skip


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
        self.damaged_lines = 0  # lines of decisions.jsonl skipped as damaged (cut, edited, not UTF-8)

    @classmethod
    def at(cls, folder: str | Path) -> RuntimeCache:
        """The cache of an existing environment folder wherever it lies (a copy kept elsewhere too), its
        environment read from its header (:func:`folder_environment`; ValueError naming the folder and why not)."""
        environment, why = folder_environment(folder)
        if environment is None:
            raise ValueError(f"{folder}: not a runtime cache folder ({why})")
        cache = cls(Path(folder).parent.parent, environment)
        cache.folder = Path(folder)
        cache.decisions_path = cache.folder / "decisions.jsonl"
        cache.plans_folder = cache.folder / "plans"
        return cache

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
        # Read as bytes: a line of other bytes than UTF-8 (a damaged disk, a hand edit) is one damaged line, never an
        # error of the whole file.
        binary = {"a": {"mode": "a+", "encoding": "utf-8"}, "r": {"mode": "rb"}}[mode]
        with open(self.decisions_path, **binary) as fh:
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
            except ValueError:  # not JSON, or not UTF-8
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
            except (ValueError, TypeError):
                bad += 1  # a line cut by a kill mid-write, edited by hand, or not UTF-8
        self.damaged_lines += bad
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
            if d.by != "hook":
                continue
            key = "pytorch (pass-through)" if d.passes_through else d.source
            sources[key] = sources.get(key, 0) + 1
        plans = list(self.plans_folder.glob("*.plan")) if self.plans_folder.is_dir() else []
        return {
            "folder": str(self.folder),
            "environment": self.environment,
            "decisions": len(decisions),
            "by_source": sources,  # the hook's decisions by where they came from
            "predict_measured": sum(d.by == "predict" for d in decisions),  # algosel.predict(verify=k)'s problems
            "plans": len(plans),
            "plan_bytes": sum(p.stat().st_size for p in plans),
            "damaged_lines": self.damaged_lines,
        }


def cache_folders(root: str | Path) -> list[Path]:
    """Every folder under ``root/runtime/`` (links to folders included): the environment folders of the runtime
    cache, and whatever else is there (:func:`folder_environment` tells them apart)."""
    base = Path(root) / "runtime"
    return sorted(p for p in base.glob("*") if p.is_dir()) if base.is_dir() else []


#: What a cache folder holds (see the module docstring): its files, and its subfolders with their files' names.
_OWN_FILES = ("decisions.jsonl", "decisions.jsonl.bad")
_OWN_SUBFOLDERS = {
    "plans": re.compile(r"[0-9a-f]{24}\.plan|\.tmp-[A-Za-z0-9_]+"),  # RuntimeCache.put_plan (mkstemp's temporaries)
    "claims": re.compile(r"[0-9a-f]{20}\.claim"),  # runtime.claims.ProblemClaims
}


def folder_environment(folder: str | Path) -> tuple[dict[str, Any] | None, str]:
    """``(environment, "")`` for a folder this cache wrote: a real folder (no link) whose ``decisions.jsonl`` starts
    with a :data:`FORMAT` header whose environment's :func:`environment_key` is the folder's name; else ``(None,
    why not)``. The proof that ``algosel cache clear`` may empty it."""
    folder = Path(folder)
    path = folder / "decisions.jsonl"
    if folder.is_symlink():
        return None, "a link, not a folder of its own"
    if path.is_symlink() or not path.is_file():
        return None, "no decisions.jsonl"
    try:
        with path.open("rb") as fh:
            header = json.loads(fh.readline(1 << 20))
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
        return None, f"decisions.jsonl does not start with a {FORMAT} header ({type(exc).__name__})"
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None, f"decisions.jsonl does not start with a {FORMAT} header"
    environment = header.get("environment")
    if not isinstance(environment, dict) or environment_key(environment) != folder.name:
        return None, "its header's environment is not the one the folder is named after"
    return environment, ""


def clear_folder(folder: str | Path) -> list[str]:
    """Remove a folder of this cache (:func:`folder_environment` must prove it one): its own files, then the folder
    once empty. Returns what was left, one line each (empty: the folder is gone); nothing else is ever removed.
    """
    folder = Path(folder)
    environment, why = folder_environment(folder)
    if environment is None:
        return [f"{folder}: left, not a runtime cache folder ({why})"]
    left = []

    def remove(path: Path) -> None:
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # never rmtree: only the files checked above go
            else:
                path.unlink()
        except OSError as exc:
            left.append(f"{path}: left, cannot remove it ({exc.strerror or exc})")

    for entry in sorted(folder.iterdir()):
        pattern = _OWN_SUBFOLDERS.get(entry.name)
        if entry.name in _OWN_FILES and entry.is_file() and not entry.is_symlink():
            remove(entry)
        elif pattern is not None and entry.is_dir() and not entry.is_symlink():
            for inner in sorted(entry.iterdir()):
                if pattern.fullmatch(inner.name) and inner.is_file() and not inner.is_symlink():
                    remove(inner)
                else:
                    left.append(f"{inner}: left, not a file the runtime cache writes")
            if not any(entry.iterdir()):
                remove(entry)
        else:
            left.append(f"{entry}: left, not a file the runtime cache writes")
    if not left:
        remove(folder)
    return left
