"""Files written whole or not at all, and the content hashes that prove a file is the one that was written.

Every artifact algosel writes (record parts, model directories, reports, the sweeper's bookkeeping) goes through
these functions: the content is written under a temporary name in the target's directory, flushed to disk
(``fsync``) and renamed over the final name, so that a reader, or a process killed mid-write, never sees half a
file. A directory (a trained model) is written the same way as a whole: filled under a temporary name, then
renamed into place.

Temporary names start with ``.`` and end with ``.tmp``; a kill leaves at most such a hidden file behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def fsync_directory(path: str | Path) -> None:
    """Flush a directory's entries (a rename inside it) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename itself is still atomic
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; renamed over ``path`` when the block ends without error.

    For writers that take a file name (Parquet, matplotlib, LightGBM)::

        with atomic_path(out) as tmp:
            table.to_parquet(tmp)

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring); returns ``path``."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module docstring); returns ``path``."""
    return write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def atomic_directory(path: str | Path, replace: bool = False) -> Iterator[Path]:
    """A temporary directory to fill; renamed to ``path`` as a whole when the block ends without error.

    ``path`` must not exist unless ``replace``: then the old directory is moved aside, the new one renamed into
    place and the old one deleted, so that no file of the old directory survives beside the new ones.

    Raises
    ------
    FileExistsError
        When ``path`` exists and ``replace`` is false (checked before and after filling).
    """
    path = Path(path)
    if path.exists() and not replace:
        raise FileExistsError(f"{path} exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                _fsync_file(child)
        fsync_directory(tmp)
        if path.exists():
            if not replace:
                raise FileExistsError(f"{path} exists")
            old = _temporary(path)
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the old directory back in place: never neither of the two
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_directory(path.parent)


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """The SHA-256 of a file's content, as hex."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            h.update(chunk)
    return h.hexdigest()


def describe_file(path: str | Path) -> dict[str, int | str]:
    """``{"bytes": size, "sha256": hex}`` of a file: what a manifest records to verify it later."""
    path = Path(path)
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
