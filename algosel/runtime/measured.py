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

Without that option, verify mode's times still stay in the persistent cache (:mod:`algosel.runtime.cache`):
:func:`records_from_cache` turns a cache folder's measured decisions into the same rows, which ``algosel train
--from-cache`` learns from. It lives here rather than in ``records/`` or ``learn/`` because it reads the runtime's
cache format, which those packages, above the runtime, cannot import.
"""

from __future__ import annotations

import atexit
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.candidates import DecisionSource
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


#: ``source`` of the rows of verify mode's measurements (this module's parts and :func:`records_from_cache`'s).
VERIFY_SOURCE = "verify"


def records_from_cache(folder: str | os.PathLike, selector: Any = None) -> pd.DataFrame:
    """The measured decisions of one runtime cache folder as records (:class:`~algosel.records.schema.Record`
    rows): one row per timed candidate (the model's shortlist and PyTorch's default) of every problem that verify
    mode or ``algosel.predict(verify=k)`` timed. Decisions from records or from predicted times are no measurement
    and are left out. ``frame.attrs["environments"]`` holds the one environment the rows refer to.

    Parameters
    ----------
    folder : path
        An environment folder of the cache (``<root>/runtime/<key>``; :func:`~algosel.runtime.cache.folder_environment`
        must prove it one).
    selector : Selector, optional
        The model that made the decisions. Its candidate list of each problem gives the timed candidates' columns
        (cuDNN's heuristic ranks, which the selector's shortlist and features read): cuDNN's live list where this
        machine can rank it (the GPU and the frontend the cache was filled with, as verify mode's was), else the
        model's own (its records', the nearest recorded problem's); its environment of this GPU gives the hardware
        fields. A candidate of no such list (and every candidate without ``selector``) has its columns decoded from
        its id, its ranks unknown (-1): a cuDNN engine config is then off the shortlist and not learnt from.

    Raises
    ------
    ValueError
        ``folder`` is not a runtime cache folder (one line naming it and why).
    """
    from algosel.records.environment import env_id  # noqa: PLC0415
    from algosel.records.schema import COLUMNS, Record  # noqa: PLC0415
    from algosel.runtime.cache import RuntimeCache  # noqa: PLC0415

    cache = RuntimeCache.at(folder)
    environment = cache.environment
    env = {**_hardware_of(selector, environment), **environment, "source": "runtime cache"}
    env["env_id"] = env_id(env)
    rows = []
    for decision in cache.decisions():
        if decision.source != DecisionSource.MEASURED or not decision.times_ms:
            continue  # records' or predicted times: nothing measured here
        try:
            problem = ConvProblem.from_key(decision.problem)
        except (TypeError, ValueError):
            continue  # a key of another algosel's format
        listed = _listed_rows(selector, problem)
        for cid, time_ms in sorted(decision.times_ms.items()):
            cand = listed.get(cid) or _decoded(cid, problem.direction)
            if cand is None:
                continue  # a candidate of a space this algosel lacks
            outcome = _outcome(time_ms, decision.host_us.get(cid))
            if outcome is not None:
                rows.append(Record.of(problem, VERIFY_SOURCE, cand, env["env_id"], **outcome).to_dict())
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame.attrs["environments"] = {env["env_id"]: env}
    return frame


def _hardware_of(selector: Any, environment: Mapping[str, Any]) -> dict[str, Any]:
    """The hardware fields of ``selector``'s environment of the cache's GPU and cuDNN (empty without one)."""
    from algosel.records.environment import HARDWARE_FIELDS, coverage, model_environments  # noqa: PLC0415

    if selector is None:
        return {}
    kind, env = coverage(model_environments(selector.manifest), environment)
    if kind != "exact" or env is None:
        return {}
    return {f: env[f] for f in HARDWARE_FIELDS if f in env}


def _listed_rows(selector: Any, problem: ConvProblem) -> dict[str, Any]:
    """``selector``'s candidates of ``problem`` (cuDNN's live list where it can rank one, else its records', the
    nearest recorded problem's; and the offline ones) as :class:`~algosel.spaces.base.Candidate` by id."""
    from algosel.learn.models import live_available  # noqa: PLC0415
    from algosel.spaces.base import Candidate, split_candidate_id  # noqa: PLC0415

    if selector is None:
        return {}
    out = {}
    for row in selector.candidates_for(problem, live=live_available(selector))[0]:
        space, name = split_candidate_id(row["candidate_id"])
        notes = tuple(n for n in str(row.get("notes") or "").split(",") if n)
        out[row["candidate_id"]] = Candidate(
            space=space, name=name, engine_id=int(row["engine_id"]), knobs=str(row["knobs"] or ""),
            notes=notes, rank_a=int(row["rank_a"]), rank_b=int(row["rank_b"]),
            rank_fallback=int(row["rank_fallback"]),
        )  # fmt: skip
    return out


def _decoded(candidate_id: str, direction: str) -> Any:
    """The candidate of an id by its space's codec, ranks unknown; ``None`` for a space not registered."""
    from algosel.spaces import get_space  # noqa: PLC0415
    from algosel.spaces.base import split_candidate_id  # noqa: PLC0415

    try:
        space, name = split_candidate_id(candidate_id)
        return get_space(space).candidate(name, direction)
    except (KeyError, ValueError):
        return None


def _outcome(time_ms: Any, host_us: Any) -> dict[str, Any] | None:
    """A record's outcome columns from a cached time: ``ok`` with that time, ``run_failed`` for ``inf`` (a
    candidate that failed when timed); ``None`` for a time that says nothing (NaN, not a number, not positive)."""
    try:
        t = float(time_ms)
    except (TypeError, ValueError):
        return None
    if math.isinf(t) and t > 0:
        return {"status": "run_failed", "reason": "failed when verify mode timed it"}
    if not (t > 0 and math.isfinite(t)):
        return None
    host = float(host_us) if isinstance(host_us, (int, float)) and math.isfinite(host_us) else math.nan
    return {"status": "ok", "time_ms_median": t, "time_ms_p25": t, "time_ms_p75": t, "time_ms_min": t,
            "repeats": 0, "host_overhead_us": host}  # fmt: skip
