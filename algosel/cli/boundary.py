"""The command line's one error boundary: every command ends in one line, never a traceback, for the errors a
user can meet (:func:`run_command`)."""

from __future__ import annotations

import argparse
import os
import signal
import sys


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command behind the command line's one error boundary: the user's mistakes and the machine's
    refusals end as one line on stderr (status 2), never a traceback.

    - :class:`CliError` and ValueError (the library's own errors: RecordsError, SelectorError, OutputError, ...
      each names the file, field or value);
    - OSError, naming the path (a folder that takes no file, a full disk, a file that vanished);
    - BrokenPipeError: the reader of stdout left (``algosel grid | head``): no message, status 141 (see
      :func:`_stdout_closed`);
    - KeyboardInterrupt: "interrupted", status 130; outputs are written whole or not at all (algosel.files).

    Anything else is a bug of algosel and keeps its traceback, to be reported.
    """
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not in Python's flush at exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except (CliError, ValueError) as exc:  # validation errors of the library name the field and value
        return _error(args.command, str(exc))
    except OSError as exc:
        return _error(args.command, _os_error_text(exc))
    except KeyboardInterrupt:  # Ctrl-C outside a sweep's case: nothing half-written (every write is atomic)
        print(f"algosel {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def _error(command: str, text: str) -> int:
    """Print one error line (a message of several lines joined into one) and return status 2."""
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())
    try:
        print(f"algosel {command}: error: {line}", file=sys.stderr)
    except BrokenPipeError:  # stderr piped too, and closed: the status still says it
        pass
    return 2


def _os_error_text(exc: OSError) -> str:
    """``path: reason`` of an OSError (both paths of a rename), or its own text when it names none."""
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    if not paths or not exc.strerror:
        return str(exc)
    return f"{' -> '.join(paths)}: {exc.strerror}"


def _stdout_closed() -> int:
    """Stop quietly once stdout's reader has gone, as Unix tools do, with the status a shell shows for them.

    The status is 141 (128 + SIGPIPE), what ``seq 1e9 | head`` gives under ``set -o pipefail``: the output was
    cut short, so a script that checks the writer's status learns that it did not finish; 0 would claim a
    complete output. No message: the reader chose to stop. Python ignores SIGPIPE (so the write raised instead of
    killing the process); stdout is pointed at /dev/null so that the flush at exit finds no closed pipe again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (an embedding host's stream)
        pass
    return 128 + signal.SIGPIPE
