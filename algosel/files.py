"""Files written whole or not at all, and the content hashes that prove a file is the one that was written.

Every artifact algosel writes (record parts, model directories, reports, the sweeper's bookkeeping) goes through
these functions: the content is written under a temporary name in the target's directory, flushed to disk
(``fsync``) and renamed over the final name, so that a reader, or a process killed mid-write, never sees half a
file. A directory (a trained model) is written the same way as a whole: filled under a temporary name, then
renamed into place.

Temporary names start with ``.`` and end with ``.tmp``; a kill leaves at most such a hidden file behind.

A command's outputs are :mod:`algosel.outputs`'s: written whole with these functions, never over a file the command
did not write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path


def temporary_path(path: Path) -> Path:
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


def fsync_file(path: Path) -> None:
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
    tmp = temporary_path(path)
    try:
        yield tmp
        fsync_file(tmp)
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
def atomic_directory(path: str | Path, replace: Collection[str] | None = None) -> Iterator[Path]:
    """A temporary directory to fill; renamed to ``path`` as a whole when the block ends without error.

    ``path`` must not exist unless ``replace`` names the files it may hold (a model's own files, as its manifest
    lists them): then a ``path`` holding anything else is refused, the old directory is moved aside, the new one
    renamed into place, and only the named files of the old one are deleted. A folder is never removed wholesale:
    a file that appears in the old directory meanwhile stays there (under its hidden temporary name).

    Raises
    ------
    FileExistsError
        When ``path`` exists and ``replace`` is None (checked before and after filling).
    OutputError
        When ``path`` holds an entry ``replace`` does not name (checked before and after filling).
    """
    path = Path(path)
    _check_replaceable(path, replace)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                fsync_file(child)
        fsync_directory(tmp)
        if path.exists():
            _check_replaceable(path, replace)
            old = temporary_path(path)
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the old directory back in place: never neither of the two
                raise
            _remove_named(old, replace or ())
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_directory(path.parent)


def _check_replaceable(path: Path, replace: Collection[str] | None) -> None:
    """Refuse an existing ``path`` unless every entry of it is a plain file named in ``replace``."""
    if not path.exists() and not path.is_symlink():
        return
    if replace is None:
        raise FileExistsError(f"{path} exists")
    if not path.is_dir():
        raise OutputError(f"{path}: exists and is not a directory; not replaced")
    for entry in sorted(path.iterdir()):
        if entry.name not in replace or not entry.is_file() or entry.is_symlink():
            raise OutputError(
                f"{path}: holds {entry.name!r}, which is not among the files it would replace; nothing was "
                "changed (move that file away, or choose another name)"
            )


def _remove_named(old: Path, names: Collection[str]) -> None:
    """Delete the files ``names`` of ``old`` and then ``old`` itself if empty (else it is kept: not ours)."""
    for name in names:
        (old / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        old.rmdir()


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


class OutputError(ValueError):
    """An output a command refuses to write (a user's file in the way, a place that takes no file): one line naming
    the path and the way out. A ValueError, so that the command line prints it as one line."""
