"""A command's outputs: a folder of outputs is written as one unit (:func:`write_output_dir`), and a file the command
did not write itself (a user's, or one changed since) is never replaced unless the user says so (``--overwrite``); the
folder's :data:`OUTPUTS_RECORD` tells which it wrote. Outputs are checked before any long work
(:func:`check_output_dir`, :func:`check_output_file`, :func:`check_writable`), and a shipped model's folder is never
written into unless a flag names it (:func:`check_not_shipped`). The writing itself is :mod:`algosel.files`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from algosel.files import OutputError, atomic_directory, fsync_directory, fsync_file, sha256_file, temporary_path
from algosel.resources import shipped_path

#: The record, in an output folder, of the files each command wrote there: ``{"outputs": {command: {name: sha256}}}``.
#: Hidden, as the temporaries are: it is bookkeeping, not an output.
OUTPUTS_RECORD = ".algosel-outputs.json"


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
        probe = temporary_path(ancestor / "probe")
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
    _replace_in_place(directory, contents, sorted(set(names) - set(files)))
    return [directory / name for name in files]


def _replace_in_place(directory: Path, contents: Mapping[str, bytes], removed: list[str]) -> None:
    """Write ``contents`` into the existing ``directory`` under temporary names, then rename them all into place and
    remove ``removed`` with SIGINT and SIGTERM held back; an error before the renames leaves the folder as it was."""
    temporaries: dict[str, Path] = {}
    try:
        for name, data in contents.items():
            temporaries[name] = tmp = temporary_path(directory / name)
            tmp.write_bytes(data)
            fsync_file(tmp)
        with deferred_signals():
            for name, tmp in temporaries.items():
                os.replace(tmp, directory / name)
            for name in removed:
                (directory / name).unlink(missing_ok=True)
    except BaseException:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
