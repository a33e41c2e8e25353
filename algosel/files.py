"""Files written whole or not at all, and the content hashes that prove a file is the one that was written.

Every artifact algosel writes (record parts, model directories, reports, the sweeper's bookkeeping) goes through
these functions: the content is written under a temporary name in the target's directory, flushed to disk
(``fsync``) and renamed over the final name, so that a reader, or a process killed mid-write, never sees half a
file. A directory (a trained model) is written the same way as a whole: filled under a temporary name, then
renamed into place.

Temporary names start with ``.`` and end with ``.tmp``; a kill leaves at most such a hidden file behind.

A command's outputs (:func:`write_output_dir`, :func:`check_output_file`) go one step further: a folder of outputs
is written as one unit, and a file the command did not write itself (a user's, or one changed since) is never
replaced unless the user says so (``--overwrite``); the folder's :data:`OUTPUTS_RECORD` tells which it wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from algosel.resources import shipped_path


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
    tmp = _temporary(path)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.rglob("*"):
            if child.is_file():
                _fsync_file(child)
        fsync_directory(tmp)
        if path.exists():
            _check_replaceable(path, replace)
            old = _temporary(path)
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


# ------------------------------------------------------------------------------------------- a command's outputs
#: The record, in an output folder, of the files each command wrote there: ``{"outputs": {command: {name: sha256}}}``.
#: Hidden, as the temporaries are: it is bookkeeping, not an output.
OUTPUTS_RECORD = ".algosel-outputs.json"


class OutputError(ValueError):
    """An output a command refuses to write (a user's file in the way, a place that takes no file): one line naming
    the path and the way out. A ValueError, so that the command line prints it as one line."""


def check_writable(path: str | Path, option: str, shown: str | Path | None = None) -> None:
    """Refuse, before any work, a place where the files of a directory ``path`` could not be created: the nearest
    existing ancestor of ``path`` (itself included) must be a directory that takes a new file (not read-only, not
    /proc). Probed by creating and deleting a hidden temporary file there, the one test that holds for root and on
    every filesystem.

    Raises
    ------
    OutputError
        One line naming ``option``, ``shown`` (default ``path``: the output the user gave) and the ancestor at
        fault.
    """
    path = Path(path)
    shown = path if shown is None else shown
    ancestor = path
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{option} {shown}: {ancestor} is not a directory")
    try:
        probe = _temporary(ancestor / "probe")
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"{option} {shown}: cannot create files in {ancestor} ({exc.strerror or exc})") from None


def check_not_shipped(path: str | Path, option: str, replace_shipped: bool = False) -> None:
    """Refuse an output inside the models and suites shipped with algosel (``models/`` of a checkout links there)
    unless ``replace_shipped``: no command writes into them unless a flag names them.

    Raises
    ------
    OutputError
        One line naming ``option``, the path and the shipped folder.
    """
    shipped = shipped_path().resolve()
    resolved = Path(path).resolve()
    if not replace_shipped and (resolved == shipped or shipped in resolved.parents):
        raise OutputError(
            f"{option} {path}: inside the models and suites shipped with algosel ({shipped}), which a command "
            f"writes into only where a flag names them (evaluate: --replace-shipped); choose another {option}"
        )


def check_output_file(path: str | Path, overwrite: bool = False, option: str = "--out") -> Path:
    """Refuse, before any work, to write the file ``path``: a directory or something else than a plain file there, a
    place that takes no file, or an existing file unless ``overwrite`` (a command cannot tell a file it wrote
    earlier from a user's of the same name). Returns ``path``.

    Raises
    ------
    OutputError
        One line naming ``option``, the path and why.
    """
    path = Path(path)
    check_not_shipped(path, option)
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; give a file name")
    if path.exists() or path.is_symlink():
        if not path.is_file():  # a device or pipe: renaming a file over it would replace it (/dev/null, for root)
            raise OutputError(f"{option} {path}: exists and is not a plain file")
        if not overwrite:
            raise OutputError(f"{option} {path}: exists; pass --overwrite to replace it")
    check_writable(path.parent, option, shown=path)
    return path


def _read_record(directory: Path) -> dict[str, dict[str, str]]:
    """The outputs record of ``directory`` (empty when missing or unreadable: then no file there counts as written
    by algosel, which errs on the side of asking)."""
    try:
        record = json.loads((directory / OUTPUTS_RECORD).read_text(encoding="utf-8"))
        outputs = record["outputs"]
        if isinstance(outputs, dict) and all(
            isinstance(files, dict) and all(isinstance(v, str) for v in files.values()) for files in outputs.values()
        ):
            return outputs
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {}


def _not_written_by(directory: Path, command: str, names: Collection[str]) -> list[str]:
    """The files of ``names`` in ``directory`` that ``command`` did not write there, or that changed since."""
    written = _read_record(directory).get(command, {})
    return [
        name
        for name in sorted(names)
        if (directory / name).exists() and written.get(name) != sha256_file(directory / name)
    ]


def check_output_dir(
    directory: str | Path,
    command: str,
    names: Collection[str],
    overwrite: bool = False,
    option: str = "--out",
    replace_shipped: bool = False,
) -> Path:
    """Refuse, before any work, to write the files ``names`` of ``command`` into ``directory``: something other
    than a directory there, a place that takes no file, a directory of that name among ``names``, or, unless
    ``overwrite``, a file of one of ``names`` that ``command`` did not write there (see :func:`write_output_dir`);
    a folder of the shipped models unless ``replace_shipped`` (:func:`check_not_shipped`). Returns ``directory``.

    Raises
    ------
    OutputError
        One line naming ``option``, the path and the way out.
    """
    directory = Path(directory)
    check_not_shipped(directory, option, replace_shipped)
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{option} {directory}: exists and is not a directory")
    check_writable(directory, option)
    if not directory.is_dir():
        return directory
    for name in sorted(names):
        if (directory / name).exists() and not (directory / name).is_file():
            raise OutputError(f"{option} {directory}: {directory / name} is not a plain file")
    foreign = _not_written_by(directory, command, names)
    if foreign and not overwrite:
        others = f" (and {len(foreign) - 1} more of its files)" if len(foreign) > 1 else ""
        raise OutputError(
            f"{option} {directory}: {directory / foreign[0]}{others} exists and was not written there by algosel "
            f"{command}, or changed since; pass --overwrite to replace it, or choose another {option}"
        )
    return directory


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs and delivered when it ends: a Ctrl-C during a few renames
    lands after the last one, never between two. The handlers are swapped, not the signal mask, because a signal
    sent to the process may be taken by any of its threads (LightGBM's, torch's). Outside the main thread, which
    alone can set handlers, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)  # SIGINT's default handler raises KeyboardInterrupt
            elif handler in (signal.SIG_DFL, None):
                signal.raise_signal(caught[0])


def write_output_dir(
    directory: str | Path,
    files: Mapping[str, bytes],
    command: str,
    names: Collection[str],
    overwrite: bool = False,
    option: str = "--out",
    record: bool = True,
    replace_shipped: bool = False,
) -> list[Path]:
    """Write the output files of ``command`` into ``directory`` as one unit; returns their paths.

    ``names`` are every file this write is in charge of, ``files`` (name -> content) those of this run: a file of
    ``names`` that ``files`` lacks (an earlier run's, e.g. a table a shorter run does not make) is removed, so that
    the folder never holds two runs' files side by side. A folder that does not exist is filled under a temporary
    name and renamed into place (:func:`atomic_directory`). In an existing one, every file is first written under a
    temporary name, then all are renamed into place with SIGINT and SIGTERM held back (:func:`deferred_signals`):
    an interrupt before leaves the folder as it was, and none comes between the renames.

    A file of ``names`` already there is replaced (or removed) only where ``command`` wrote it, as the folder's
    :data:`OUTPUTS_RECORD` says with its SHA-256 (a file changed since is the user's), or with ``overwrite``;
    other files of the folder are never touched. ``record=False`` keeps no record (a model directory, whose
    manifest lists every file): there every existing file of ``names`` takes ``overwrite``.

    ``replace_shipped``: as :func:`check_output_dir`.

    Raises
    ------
    OutputError
        As :func:`check_output_dir`, checked again here (the folder may have changed while the outputs were made).
    """
    directory = Path(directory)
    extra = set(files) - set(names)
    if extra:
        raise ValueError(f"write_output_dir: {sorted(extra)[0]!r} is not among the names given")
    check_output_dir(directory, command, names, overwrite=overwrite, option=option, replace_shipped=replace_shipped)
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}

    def record_bytes(outputs: dict[str, dict[str, str]]) -> bytes:
        mine = {k: v for k, v in outputs.get(command, {}).items() if k not in names} | hashes
        body = {"outputs": {**outputs, command: dict(sorted(mine.items()))}}
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()

    if not directory.exists():
        with atomic_directory(directory) as tmp:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            if record:
                (tmp / OUTPUTS_RECORD).write_bytes(record_bytes({}))
        return [directory / name for name in files]
    contents = dict(files)
    if record:
        contents[OUTPUTS_RECORD] = record_bytes(_read_record(directory))
    temporaries: dict[str, Path] = {}
    try:
        for name, data in contents.items():
            temporaries[name] = tmp = _temporary(directory / name)
            tmp.write_bytes(data)
            _fsync_file(tmp)
        with deferred_signals():
            for name, tmp in temporaries.items():
                os.replace(tmp, directory / name)
            for name in sorted(set(names) - set(files)):
                (directory / name).unlink(missing_ok=True)
    except BaseException:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return [directory / name for name in files]
