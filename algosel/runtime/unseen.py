"""The problems the runtime hook met without records, kept as a layers file to sweep later.

A selector ranks a problem its records never measured from the nearest recorded one; sweeping the problem itself
(``algosel sweep --layers unseen.csv``) and retraining makes the next run's choice a measured one.
:class:`UnseenRecorder` counts such problems per shape in memory (cheap enough for the hook's first call of a
signature) and :meth:`UnseenRecorder.flush` merges the counts into a layers file
(:mod:`algosel.measure.layers`): network :data:`~algosel.measure.layers.UNSEEN_NETWORK`, layer = the shape key,
size ``"HxW"``, and a ``calls`` column. The merge is safe across processes (an exclusive ``fcntl.flock`` on
the file's folder around read, merge and write), the write atomic (a temporary file renamed over the old one), and
the recorder flushes itself at interpreter exit.

Jobs whose code cannot be changed set ``ALGOSEL_RECORD_UNSEEN=<path>``: :func:`recorder_from_env`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pandas as pd

from algosel.measure.layers import CALLS_COLUMN, LAYERS_COLUMNS, UNSEEN_NETWORK, load_layers, write_layers
from algosel.measure.suites import LAYER_FIELDS, LAYOUT_COLUMN
from algosel.problem import ConvProblem

log = logging.getLogger(__name__)

#: The environment variable naming the layers file a process records its unseen problems into.
ENV_VAR = "ALGOSEL_RECORD_UNSEEN"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the folder of ``path`` (a ``flock`` of the directory itself: no lock file is left
    beside the user's layers file)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class UnseenRecorder:
    """Counts problems per shape and merges the counts into a layers file.

    Parameters
    ----------
    path : str or Path
        The layers file (created at the first :meth:`flush` with something to write; its directory too).
    flush_at_exit : bool
        Register :meth:`flush` with :mod:`atexit` (default), so that a process's counts reach the file when it ends.

    Notes
    -----
    Thread-safe. Counts are per shape (:attr:`~algosel.problem.ConvProblem.shape_key`): a sweep of the file measures
    each in the dtypes and layouts it is given. A forked child starts with no pending counts, so that the parent's
    are not written twice.
    """

    def __init__(self, path: str | Path, flush_at_exit: bool = True) -> None:
        self.path = Path(path)
        self._pending: dict[ConvProblem, int] = {}
        self._lock = threading.Lock()
        if flush_at_exit:
            atexit.register(self._flush_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        # A new lock too: another thread of the parent may have held it at the fork.
        self._pending, self._lock = {}, threading.Lock()

    def add(self, problem: ConvProblem, calls: int = 1) -> None:
        """Count ``calls`` more calls of ``problem`` (a forward problem; its dtype, layout and direction are not
        kept)."""
        if calls < 1:
            raise ValueError(f"calls must be >= 1, got {calls}")
        with self._lock:
            self._pending[problem] = self._pending.get(problem, 0) + calls

    @property
    def pending(self) -> dict[str, int]:
        """Calls per shape key counted since the last flush."""
        with self._lock:
            items = list(self._pending.items())
        out: dict[str, int] = {}
        for problem, calls in items:
            out[problem.shape_key] = out.get(problem.shape_key, 0) + calls
        return out

    def flush(self) -> Path | None:
        """Merge the pending counts into the file (under its lock) and clear them.

        Returns
        -------
        Path or None
            The file, or None when nothing was pending (the file is then left untouched).

        Raises
        ------
        ValueError
            When the existing file is not a valid layers file (its line and column named); the pending counts are
            kept and the file is not changed.
        """
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path):
                existing = load_layers(self.path) if self.path.exists() else None
                _atomic_write(_merge(existing, pending), self.path)
        except BaseException:
            with self._lock:  # nothing was written: keep the counts for a later flush
                for problem, calls in pending.items():
                    self._pending[problem] = self._pending.get(problem, 0) + calls
            raise
        return self.path

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - at exit a traceback helps no one; say what was not written
            count = len(self.pending)
            print(f"algosel: could not record {count} unseen problem shape(s) in {self.path}: {exc}", file=sys.stderr)


def _rows(pending: Mapping[ConvProblem, int]) -> pd.DataFrame:
    calls: dict[tuple[str, str], int] = {}
    first: dict[tuple[str, str], ConvProblem] = {}
    for problem, count in pending.items():
        key = (problem.shape_key, problem.layout)  # the layout the network ran it in: swept in it
        calls[key] = calls.get(key, 0) + count
        first.setdefault(key, problem)
    rows = [
        {
            "network": UNSEEN_NETWORK,
            "layer": key[0],
            **{f: getattr(p, f) for f in LAYER_FIELDS},
            "size": f"{p.h}x{p.w}",
            LAYOUT_COLUMN: p.layout,
            CALLS_COLUMN: calls[key],
        }
        for key, p in first.items()
    ]
    return pd.DataFrame(rows, columns=list(LAYERS_COLUMNS))


def _merge(existing: pd.DataFrame | None, pending: Mapping[ConvProblem, int]) -> pd.DataFrame:
    """The file's rows with the pending counts added: rows of another network are kept as they are; the unseen
    rows are summed per shape (old rows first, in their order, then new shapes in the order they were met)."""
    new = _rows(pending)
    if existing is None:
        return new
    unseen = existing["network"] == UNSEEN_NETWORK
    both = pd.concat([existing[unseen], new], ignore_index=True)
    fields = [*LAYER_FIELDS, LAYOUT_COLUMN]
    summed = both.groupby(fields, sort=False, as_index=False).agg(
        network=("network", "first"), layer=("layer", "first"), size=("size", "first"), calls=(CALLS_COLUMN, "sum")
    )
    return pd.concat([existing[~unseen], summed.loc[:, list(LAYERS_COLUMNS)]], ignore_index=True)


def _atomic_write(frame: pd.DataFrame, path: Path) -> None:
    """Write to a temporary file in the same directory, fsync it, and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write_layers(frame, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_recorders: dict[Path, UnseenRecorder] = {}
_recorders_lock = threading.Lock()


def recorder_for(path: str | Path) -> UnseenRecorder:
    """The process's one recorder of ``path`` (so that several hook sessions of a process share its counts)."""
    key = Path(path).resolve()
    with _recorders_lock:
        rec = _recorders.get(key)
        if rec is None:
            rec = _recorders[key] = UnseenRecorder(key)
        return rec


def recorder_from_env(environ: Mapping[str, str] | None = None) -> UnseenRecorder | None:
    """The recorder of the file named by ``ALGOSEL_RECORD_UNSEEN`` (:func:`recorder_for`), or None where it is unset
    or empty."""
    path = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    return recorder_for(path) if path else None
