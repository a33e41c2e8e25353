"""What verify mode measures, kept as records for ``algosel train`` (``Executor(record_measured=folder)``).

Verify mode times a shortlist of every new problem with the sweeper (:mod:`algosel.runtime.verify`): its rows are
records (:class:`algosel.records.schema.Record`) of this GPU, each candidate checked against PyTorch's default. Kept,
they are a dataset of the problems the model's records lacked, measured where they ran: ``algosel train`` on them
(with the shipped records) makes a model that knows those problems, as ``algosel sweep --layers`` does with a fuller
measurement (every candidate, the sweep's budget; verify mode's is a shortlist with a few repeats).

Rows go to a journal of this process (``journal-<pid>.jsonl``, appended and flushed per problem: a kill loses at most
the problem being written) and are moved into a Parquet part (``part-verify-<time>-<pid>.parquet``) when the process
exits or :meth:`MeasuredRecords.close` is called; a journal left by a process that died is moved the next time one
is opened on the folder. ``algosel train FOLDER`` reads the parts.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from algosel.problem import ConvProblem


class MeasuredRecords:
    """A folder of verify mode's measurements as records (see the module docstring).

    Parameters
    ----------
    folder : path
        The dataset folder (made on first use).
    environment : callable, optional
        This GPU's environment record (default: :func:`algosel.records.environment.collect_environment`, read once
        at the first measurement); every row's ``env_id`` is its own.
    """

    def __init__(self, folder: str | os.PathLike, environment: Callable[[], dict[str, Any]] | None = None):
        from algosel.records.store import Journal  # noqa: PLC0415

        self.folder = Path(folder)
        self._environment_of = environment
        self._environment: dict[str, Any] | None = None
        self.journal = Journal(self.folder / f"journal-{os.getpid()}.jsonl")
        self.problem_keys: set[str] = set()  # the problems kept so far
        self._compact_orphans()
        atexit.register(self.close)

    def environment(self) -> dict[str, Any]:
        if self._environment is None:
            if self._environment_of is None:
                from algosel.records.environment import collect_environment  # noqa: PLC0415

                self._environment = collect_environment()
            else:
                self._environment = dict(self._environment_of())
        return self._environment

    def add(self, problem: ConvProblem, rows: list[dict[str, Any]]) -> None:
        """Keep the rows of one measured problem (rows that are not records, a stand-in measurer's, are left)."""
        env = self.environment()
        rows = [{**r, "env_id": env["env_id"], "source": "verify"} for r in rows if "case_key" in r]
        if rows:
            self.journal.append(problem.case_key, rows, env)
            self.problem_keys.add(problem.key)

    def close(self) -> Path | None:
        """Move this process's journal into a part (None where it holds nothing)."""
        return self._compact(self.journal)

    def _compact(self, journal: Any) -> Path | None:
        if not journal.path.exists():
            return None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        return journal.compact(self.folder, f"verify-{stamp}-{journal.path.stem.removeprefix('journal-')}")

    def _compact_orphans(self) -> None:
        """Journals of processes that are gone (killed before their exit): into parts of their own."""
        from algosel.records.store import Journal  # noqa: PLC0415

        for path in sorted(self.folder.glob("journal-*.jsonl")) if self.folder.is_dir() else []:
            pid = path.stem.removeprefix("journal-")
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                self._compact(Journal(path))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
