"""The selector in memory: a ranker, its manifest and its catalogue, choosing the candidates of a problem.

:meth:`Selector.choose` ranks the candidates valid for a problem. They come from, in order of preference: the
live enumeration of each space (where a GPU and the frontend are present), the records of that exact problem, or
the records of the nearest recorded problem of the same kind (:class:`~algosel.records.catalogue.Catalogue`), with
the candidates every problem has offline (GEMM lowering, PyTorch's default: each space says which) added where
the model was trained on their space.

A model covers the candidate spaces of its records (manifest ``spaces``): ``cudnn``, ``gemm`` and ``pytorch`` for
the engine-config selector, ``legacy`` for the legacy-algorithm selector that frameworks on the legacy API use.
The files of a model directory are :mod:`algosel.learn.artifact`'s; finding the right one is
:mod:`algosel.learn.models`'s.

An answer for a problem outside what the model's records cover (a dtype or layout they lack, nothing of its kind
recorded, a size far beyond the recorded ones: :meth:`Selector.coverage`) is still given, but says so: every
:class:`Choice` of it has ``extrapolated`` set and the reason in ``extrapolation``, and the first such answer of each
kind in a process warns (:class:`ExtrapolationWarning`).

A model with a time model (:mod:`algosel.learn.time_model`) also predicts each candidate's device time: every
:class:`Choice` carries it, and :meth:`Selector.predicted_time_ms` gives it for any candidate of the list,
PyTorch's default included.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algosel.learn.artifact import (
    SPACES_DEFAULT,
    SelectorError,
    load_artifact,
    save_artifact,
    space_of,
)
from algosel.learn.compiled import attach_cached
from algosel.learn.features import assemble, hardware_vector, listed_candidate_matrix
from algosel.learn.ranker import Ranker
from algosel.learn.rules import allowed, on_shortlist
from algosel.learn.time_model import TIME_MODEL_FILE, TimeModel
from algosel.problem import ConvProblem
from algosel.records.catalogue import Catalogue
from algosel.records.environment import (
    coverage,
    gpu_slug,
    mismatches,
    model_environments,
    visible_gpu,
    visible_hardware,
)
from algosel.spaces import Candidate, get_space, space_names

#: PyTorch's default's candidate id: the runtime compares a choice's predicted time with it.
DEFAULT_ID = "pytorch:default"
#: The key, beside a problem, of the times predicted for the list :meth:`Selector.rank_rows` ranked.
RANKED = "ranked"


@dataclass(frozen=True)
class Choice:
    """One ranked candidate for a problem."""

    candidate_id: str
    space: str
    engine_id: int
    knobs: str
    score: float
    workspace_bytes: int | None
    source: str  # "live", "records" or "nearest:<problem key>"
    #: For a legacy candidate: the ``cudnnConvolution*Algo_t`` name (e.g.
    #: ``CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM``), its C value (``engine_id``) and the math type
    #: (``cudnnMathType_t`` name) to set on the convolution descriptor; empty otherwise.
    cudnn_algo: str = ""
    cudnn_math_type: str = ""
    #: Where ``algosel.predict(..., measure=k)`` timed it on this GPU: the median device time; else None.
    measured_time_ms: float | None = None
    #: Whether the problem lies outside what the model's records cover (:meth:`Selector.coverage`), and why.
    extrapolated: bool = False
    extrapolation: str = ""
    #: The time model's predicted device time of the candidate on this problem; ``None`` for a model without one.
    predicted_time_ms: float | None = None
    #: cuDNN's behaviour notes of an engine config, comma-separated (e.g. ``runtime_compilation``: its plan build
    #: compiles its kernel); empty otherwise or where the list did not record them.
    notes: str = ""


#: A problem size (a field, or the FLOPs) more than this factor beyond the smallest or largest recorded one lies
#: outside what a model covers: its answer is an extrapolation.
EXTRAPOLATION_FACTOR = 2.0


class ExtrapolationWarning(UserWarning):
    """An answer for a problem outside what the model's records cover; warned once per process and kind of
    extrapolation (each dtype and layout the records lack, each size field beyond them, no problem of its kind)."""


#: The kinds of extrapolation warned about in this process (:func:`_extrapolation_kind`). A frozenset rebound, never
#: changed in place, so that a caller may save and restore it around answers it does not want warned about.
_extrapolation_warned: frozenset[str] = frozenset()


def _extrapolation_kind(why: str) -> str:
    """The kind of a :meth:`Selector.coverage` reason: ``dtype 'bfloat16'``, ``layout 'nhwc'``, a size field
    (``n``, ``h``, ``flops``...) or the reason itself (no problem of its kind)."""
    return why.split(" is ", 1)[0].split("=", 1)[0]


def _warn_extrapolation(problem: ConvProblem, why: str) -> None:
    # Once per kind, not once per process: a first answer beyond the recorded batch sizes must not silence a later
    # one in a dtype the records lack; nor once per problem, which would warn on every layer of a network.
    global _extrapolation_warned  # noqa: PLW0603 - per process, whatever the selector
    kind = _extrapolation_kind(why)
    if kind in _extrapolation_warned:
        return
    _extrapolation_warned = _extrapolation_warned | {kind}
    warnings.warn(
        f"algosel: {problem.key}: {why}; the model's answer is an extrapolation (Choice.extrapolated; "
        f"further ones of this kind ({kind}) are not warned about)",
        ExtrapolationWarning,
        stacklevel=5,  # the caller of algosel.predict (predict -> choose -> _rank -> here)
    )


def candidate_row(c: Candidate, workspace_bytes: int = -1) -> dict[str, Any]:
    """A candidate as a catalogue row (``workspace_bytes`` -1: unknown until its plan is built)."""
    return {"candidate_id": c.candidate_id, "space": c.space, "engine_id": c.engine_id, "knobs": c.knobs,
            "rank_a": c.rank_a, "rank_b": c.rank_b, "rank_fallback": c.rank_fallback, "notes": ",".join(c.notes),
            "workspace_bytes": workspace_bytes, "status": "ok"}  # fmt: skip


def offline_rows(problem: ConvProblem, spaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The candidates ``problem`` has without a GPU or records (GEMM lowering where the math allows, PyTorch's
    default), of the registered spaces in ``spaces`` (default: all), in registry order."""
    rows = []
    for name in space_names():
        if spaces is not None and name not in spaces:
            continue
        cands = get_space(name).offline_candidates(problem)
        rows += [candidate_row(c, workspace_bytes=0) for c in cands or ()]
    return rows


class JointModelWarning(UserWarning):
    """A joint model ranks for a GPU it was not trained on, one of the same family (warned once per process)."""


_joint_warned: set[str] = set()


def new_gpu_fix(here: Mapping[str, Any]) -> str:
    """The commands that make a model for the GPU ``here`` (docs/selector.md, "A GPU of your own")."""
    slug = gpu_slug(here)
    return f"`algosel sweep --quick 20 --out data/sweeps/{slug}` then `algosel train data/sweeps/{slug}`"


def check_environment(
    model_env: Mapping[str, Any] | Sequence[Mapping[str, Any]], directory: Path | str, force: bool
) -> dict[str, Any]:
    """The environment whose hardware features the model ranks for here; refuse (or, with ``force``, warn about)
    a model that does not cover the visible GPU and cuDNN (:func:`~algosel.records.environment.coverage`).

    ``model_env``: the model's environment, or a joint model's environments (main first). Without a GPU the
    model answers for its main environment; on a GPU it trained on, for that GPU; on a GPU of a joint model's
    family, for this GPU's own hardware (warned once: its picks there are unmeasured)."""
    envs = [dict(model_env)] if isinstance(model_env, Mapping) else [dict(e) for e in model_env]
    here = visible_gpu()
    if here is None:
        return envs[0]  # offline use (no GPU here): the model is read for its own GPU
    kind, env = coverage(envs, here)
    if kind == "exact":
        return env
    if kind == "family":
        trained = ", ".join(str(e.get("gpu_name")) for e in envs)
        if str(directory) not in _joint_warned:
            _joint_warned.add(str(directory))
            warnings.warn(
                f"algosel: {here.get('gpu_name')} has no model of its own; {directory} is a joint model of {trained} "
                f"(compute capability {env.get('compute_capability')}, cuDNN {env.get('cudnn')}) and ranks for "
                f"this GPU's hardware, unmeasured here; make a model of its own with {new_gpu_fix(here)}",
                JointModelWarning,
                stacklevel=3,
            )
        return {**env, **visible_hardware(), "gpu_name": here.get("gpu_name")}
    found = mismatches(envs[0], here)
    text = f"{directory} was trained for another environment: this process has {', '.join(found)}"
    if not force:
        raise SelectorError(text + f"; make a model for this GPU with {new_gpu_fix(here)}, or pass force=True")
    warnings.warn(text, stacklevel=3)
    return envs[0]


class Selector:
    """A loaded model: ``Selector.load(path)``; then :meth:`choose`. Not thread-safe (memoisation dicts)."""

    def __init__(
        self,
        ranker: Ranker,
        manifest: dict[str, Any],
        catalogue: pd.DataFrame,
        time_model: TimeModel | None = None,
        target: Mapping[str, Any] | None = None,
    ):
        self.ranker = ranker
        #: Predicts device times (:mod:`algosel.learn.time_model`); ``None`` for a model trained without one.
        self.time_model = time_model
        self.manifest = manifest
        self.environment: dict[str, Any] = manifest["environment"]
        self.blocked = {tuple(b) for b in manifest.get("blocked_engines", [])}
        #: Candidate spaces the model was trained on (models of schema 1 without the field: the first three).
        self.spaces: tuple[str, ...] = tuple(manifest.get("spaces", SPACES_DEFAULT))
        self.space = space_of(self.spaces)
        #: The GPU ranked for (its hardware features): the model's own, or where a joint model loads on a GPU of
        #: its family, that GPU (:func:`check_environment`).
        self.target = dict(target or self.environment)
        self._saved_catalogue = catalogue  # what save() writes: a joint model's keeps every GPU's records
        if "env_id" in catalogue.columns:  # a joint model's: the records of the GPU ranked for, else the main GPU's
            ids = set(catalogue["env_id"])
            mine = self.target.get("env_id") if self.target.get("env_id") in ids else self.environment.get("env_id")
            catalogue = catalogue[catalogue["env_id"] == mine].drop(columns="env_id").reset_index(drop=True)
        self.catalogue = Catalogue(catalogue, self.environment)
        self._listed = tuple(s for s in self.spaces if s in space_names() and get_space(s).from_lists)
        self._cache: dict[tuple, list[Choice]] = {}
        self._matrices: dict[tuple, tuple[list[int], np.ndarray]] = {}  # candidate feature rows per candidate list
        # Predicted times by (problem, live) as choose() filled them, or (problem, RANKED) as rank_rows() did.
        self._times: dict[tuple, dict[str, float]] = {}
        self._nearest_rows: dict[str, list[dict[str, Any]]] = {}  # a nearest problem's rows, as new problems get them
        self._ranked_rows: dict[ConvProblem, list[dict[str, Any]]] = {}  # the last list rank_rows ranked per problem
        self._hardware = hardware_vector(self.target)
        #: Where it was loaded from (None: made in memory): the runtime reads the model's calibration there.
        self.directory: Path | None = None

    # ------------------------------------------------------------------------------------------ persistence
    def save(
        self,
        directory: str | Path,
        replace: bool = False,
        extra_files: Mapping[str, str | bytes] | None = None,
        replace_shipped: bool = False,
    ) -> Path:
        """Write the model directory as a whole (:func:`~algosel.learn.artifact.save_artifact`), the time model
        (where there is one) among its files; an existing ``directory`` is refused unless ``replace`` (and
        ``replace_shipped`` for a shipped model), and replaced only where it holds a model's own files alone."""
        files = dict(extra_files or {})
        if self.time_model is not None:
            files[TIME_MODEL_FILE] = self.time_model.model_text()
        return save_artifact(
            directory,
            self.ranker,
            self.manifest,
            self._saved_catalogue,
            extra_files=files,
            replace=replace,
            replace_shipped=replace_shipped,
        )

    @classmethod
    def load(cls, directory: str | Path, force: bool = False) -> Selector:
        """Load a model directory.

        Where a GPU is visible and it (or its cuDNN) differs from the model's, this raises :class:`SelectorError`
        unless ``force`` (then it warns): engine configs and their speeds are specific to both.
        """
        artifact = load_artifact(directory)
        target = check_environment(model_environments(artifact.manifest), directory, force)
        section = artifact.manifest.get("time_model")
        try:
            time_model = TimeModel.load(directory, section, artifact.manifest) if section else None
        except ValueError as exc:  # TimeModelError or SelectorError: a listed file missing, damaged or corrupt
            raise SelectorError(str(exc)) from exc
        selector = cls(artifact.ranker, artifact.manifest, artifact.catalogue, time_model, target=target)
        selector.directory = Path(directory)
        attach_cached(selector)  # the trees as native code, where `algosel compile` cached them on this machine
        return selector

    # ------------------------------------------------------------------------------------------- choosing
    def candidates_for(self, problem: ConvProblem, live: bool = False) -> tuple[list[dict[str, Any]], str]:
        """Candidate rows valid for ``problem`` and where they came from (see the module docstring)."""
        if live:
            rows = []
            for name in self._listed:
                space = get_space(name)
                try:
                    rows += [candidate_row(c) for c in space.enumerate(problem)]
                finally:
                    space.release(problem)
            return rows + offline_rows(problem, self.spaces), "live"
        rows = self.catalogue.rows(problem.key)
        if rows is not None:
            return rows, "records"
        nearest = self.catalogue.nearest(problem)
        if nearest is None:
            # Nothing of this kind was recorded: the offline candidates alone (PyTorch's default, GEMM lowering).
            rows, src = [], "none"
        else:
            rows = self._nearest_rows.get(nearest)
            if rows is None:  # the listed candidates of a recorded problem, their workspace unknown for this one
                rows = [dict(r, workspace_bytes=-1) for r in self.catalogue.rows(nearest) if r["space"] in self._listed]
                self._nearest_rows[nearest] = rows
            src = f"nearest:{nearest}"
        return rows + offline_rows(problem, self.spaces), src

    def choose(
        self,
        problem: ConvProblem,
        max_workspace_bytes: int | None = None,
        deterministic: bool = False,
        top_k: int = 1,
        live: bool = False,
    ) -> list[Choice]:
        """The ``top_k`` best candidates for ``problem``, best first (memoised per arguments).

        ``deterministic`` and ``max_workspace_bytes`` filter as :func:`algosel.learn.rules.allowed` says (with the
        shipped models, whose records have no numerical notes, ``deterministic`` never picks an engine config).
        """
        key = (problem, max_workspace_bytes, deterministic, top_k, live)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        all_rows, source = self.candidates_for(problem, live=live)
        if not all_rows:  # a legacy model asked for a dtype its records lack: no list to rank, said as such
            why = self.coverage(problem, source) or "its records hold no candidate near it"
            raise SelectorError(f"no candidate for {problem.key} in this {self.space} model: {why}")
        # The candidate part of the features depends only on the list, which nearby problems share.
        kind = "fc" if problem.is_fully_connected else "pointwise" if problem.is_pointwise else None
        mkey = (source, problem.key if source in ("records", "live") else kind)
        result = self._rank(
            problem, all_rows, source, mkey, max_workspace_bytes, deterministic, top_k, time_key=(problem, live)
        )
        self._cache[key] = result
        return result

    def is_recorded(self, problem: ConvProblem) -> bool:
        """Whether the records this model ships with measured ``problem`` itself."""
        return self.catalogue.is_recorded(problem)

    def records_distance(self, problem: ConvProblem) -> float:
        """How far ``problem`` lies from the problems this model's records measured (:meth:`Catalogue.distance`):
        its predicted times are extrapolations the farther it lies."""
        return self.catalogue.distance(problem)

    def coverage(self, problem: ConvProblem, source: str = "") -> str:
        """Why ``problem`` lies outside what the model's records cover; empty when it does not.

        Outside: a dtype or layout the records lack (manifest ``dtypes``), no recorded problem of its kind
        (``source`` ``"none"``), or a size (n, c, k, h, w, r, s, groups, FLOPs) more than
        :data:`EXTRAPOLATION_FACTOR` beyond the smallest or largest recorded one. A recorded problem is covered.
        """
        if source == "records":
            return ""
        dtypes = self.manifest.get("dtypes") or sorted(self.catalogue.dtypes)
        if problem.dtype not in dtypes:
            return f"dtype {problem.dtype!r} is not among the model's records ({', '.join(dtypes)})"
        if self.catalogue.layouts and problem.layout not in self.catalogue.layouts:
            layouts = ", ".join(sorted(self.catalogue.layouts))
            return f"layout {problem.layout!r} is not among the model's records ({layouts})"
        if source == "none":
            return "the records hold no problem of its kind (direction, dtype, layout, fully connected, pointwise)"
        for name, (lo, hi) in self.catalogue.extent().items():
            value = getattr(problem, name)
            if value > EXTRAPOLATION_FACTOR * hi:
                return f"{name}={value} is {value / hi:.3g}x the largest recorded {name} ({int(hi)})"
            if value * EXTRAPOLATION_FACTOR < lo:
                return f"{name}={value} is 1/{lo / value:.3g} of the smallest recorded {name} ({int(lo)})"
        return ""

    def rank_rows(
        self, problem: ConvProblem, rows: list[dict[str, Any]], max_workspace_bytes: int | None = None
    ) -> list[Choice]:
        """Rank an explicit candidate list (e.g. cuDNN's live list, as the runtime hook has it), best first.

        The times predicted for the candidates returned (and PyTorch's default) are kept for
        :meth:`predicted_time_ms` of the same list."""
        if self.time_model is not None:
            self._ranked_rows[problem] = rows
            # the times of another list ranked before are of other list-context features: the last list's only
            self._times.pop((problem, RANKED), None)
        return self._rank(
            problem, rows, "live", None, max_workspace_bytes, False, len(rows), time_key=(problem, RANKED)
        )

    def _rank(
        self, problem, all_rows, source, mkey, max_workspace_bytes, deterministic, top_k, time_key=None
    ) -> list[Choice]:
        # Features are built for the shortlist only (it depends on the list alone, so it is cached with it).
        cached = self._matrices.get(mkey) if mkey is not None else None
        if cached is None:
            shortlist = self.manifest.get("shortlist_rank")
            eligible = [
                i for i, r in enumerate(all_rows) if on_shortlist(r["space"], r["rank_a"], r["rank_b"], shortlist)
            ]
            cached = (eligible, listed_candidate_matrix([all_rows[i] for i in eligible], all_rows))
            if mkey is not None:
                self._matrices[mkey] = cached
        eligible, matrix = cached
        notes_recorded = bool(self.manifest.get("numeric_notes_recorded", False))
        positions = [j for j, i in enumerate(eligible)
                     if allowed(all_rows[i], problem.direction, problem.dtype, self.blocked, max_workspace_bytes,
                                deterministic, notes_recorded)]  # fmt: skip
        keep = [eligible[j] for j in positions]
        if not keep:
            raise ValueError(
                f"no candidate for {problem.key} satisfies the filters "
                f"(max_workspace_bytes={max_workspace_bytes}, deterministic={deterministic})"
            )
        rows = [all_rows[i] for i in keep]
        X_all = assemble(problem, matrix, self.target, self._hardware)
        X = X_all[positions]
        scores = self.ranker.score(X)
        order = np.argsort(-scores, kind="stable")[: max(1, top_k)]
        times: list[float | None] = [None] * len(order)
        if self.time_model is not None:
            # Times only for the candidates returned, and PyTorch's default beside them in the same call (the
            # runtime asks for it next): the time model walks its trees once per row, and each call has a cost.
            default = [j for j, i in enumerate(eligible) if all_rows[i]["candidate_id"] == DEFAULT_ID][:1]
            predicted = self.time_model.predict_ms(X_all[[positions[i] for i in order] + default]).tolist()
            times = predicted[: len(order)]
            if time_key is not None:
                known = self._times.setdefault(time_key, {})
                known.update(zip((rows[i]["candidate_id"] for i in order), times))
                if default:
                    known[DEFAULT_ID] = predicted[-1]
        why = self.coverage(problem, source)
        if why:
            _warn_extrapolation(problem, why)
        return [
            Choice(
                candidate_id=rows[i]["candidate_id"],
                space=rows[i]["space"],
                engine_id=int(rows[i]["engine_id"]),
                knobs=rows[i]["knobs"] or "",
                score=float(scores[i]),
                workspace_bytes=None if rows[i]["workspace_bytes"] < 0 else int(rows[i]["workspace_bytes"]),
                source=source,
                **_legacy_names(problem, rows[i]),
                extrapolated=bool(why),
                extrapolation=why,
                predicted_time_ms=t,
                notes=str(rows[i].get("notes") or ""),
            )
            for i, t in zip(order, times)
        ]

    def predicted_time_ms(
        self,
        problem: ConvProblem,
        candidate_ids: list[str] | tuple[str, ...],
        rows: list[dict[str, Any]] | None = None,
        live: bool = False,
    ) -> dict[str, float]:
        """The time model's predicted device time (ms) of candidates of ``problem``, by candidate id.

        Any candidate of the problem's list may be asked for, shortlisted or not, ``"pytorch:default"`` included
        (the runtime compares a choice's predicted time with the default's to decide whether a switch pays for
        its host overhead).

        Parameters
        ----------
        problem : ConvProblem
        candidate_ids : sequence of str
            Ids of candidates in the list.
        rows : list of dict, optional
            The candidate list (e.g. cuDNN's live list, as :meth:`rank_rows` takes it; the times it predicted for
            that very list are reused). Default: the list :meth:`choose` ranks (:meth:`candidates_for` with
            ``live``: offline, the nearest recorded problem's list with GEMM lowering and PyTorch's default), with
            the times :meth:`choose` predicted where they hold every id asked for.
        live : bool
            Passed to :meth:`candidates_for` when ``rows`` is not given.

        Raises
        ------
        SelectorError
            When the model has no time model (``time_model`` is None; retrain with ``algosel train``).
        ValueError
            Naming the first id that is not in the list.
        """
        if self.time_model is None:
            raise SelectorError(
                "this model has no time model (trained before it existed); retrain with `algosel train`"
            )
        # Times predicted already for the same list, by choose() (the model's own list) or rank_rows() (that list)
        key = (problem, live) if rows is None else (problem, RANKED) if rows is self._ranked_rows.get(problem) else None
        known = self._times.get(key, {}) if key is not None else {}
        if all(c in known for c in candidate_ids):
            return {c: known[c] for c in candidate_ids}
        if rows is None:
            rows, _ = self.candidates_for(problem, live=live)
        index = {r["candidate_id"]: r for r in rows}
        missing = [c for c in candidate_ids if c not in index]
        if missing:
            raise ValueError(f"{missing[0]!r} is not a candidate of {problem.key} ({len(rows)} candidates)")
        if not candidate_ids:
            return {}
        picked = [index[c] for c in candidate_ids]
        X = assemble(problem, listed_candidate_matrix(picked, rows), self.target, self._hardware)
        return dict(zip(candidate_ids, self.time_model.predict_ms(X).tolist()))

    def host_us(self, problem: ConvProblem, candidate_ids) -> dict[str, float]:
        """Host time per call of ``candidate_ids`` as the records measured it (the sweep's ``host_overhead_us``) on
        ``problem``, or where it is not recorded on the nearest recorded problem of its kind, whose candidate list
        the model ranks for it: the part of a candidate's host cost that depends on its engine (its kernels'
        launches) carries over between neighbouring shapes. Empty where the catalogue predates the column."""
        key = problem.key if self.catalogue.is_recorded(problem) else self.catalogue.nearest(problem)
        return {} if key is None else self.catalogue.host_us(key, candidate_ids)

    def recorded_gain_us(self, problem: ConvProblem, candidate_id: str) -> float | None:
        """Device time the candidate saves over PyTorch's default per call, where both were measured on this
        very problem; else None."""
        t = self.catalogue.time_ms(problem.key, candidate_id)
        t_default = self.catalogue.time_ms(problem.key, "pytorch:default")
        if t is None or t_default is None:
            return None
        return 1000.0 * (t_default - t)


def _legacy_names(problem: ConvProblem, row: Mapping[str, Any]) -> dict[str, str]:
    if row["space"] != "legacy":
        return {}
    from algosel.spaces.cudnn_legacy import algo_enum_name  # noqa: PLC0415

    math_type = (row.get("knobs") or "").removeprefix("math=")
    return {"cudnn_algo": algo_enum_name(problem.direction, int(row["engine_id"])),
            "cudnn_math_type": f"CUDNN_{math_type}"}  # fmt: skip


def build_catalogue(frame: pd.DataFrame) -> pd.DataFrame:
    """The catalogue of a model trained on ``frame``."""
    return Catalogue.from_records(frame).frame


def blocked_engines(frame: pd.DataFrame) -> list[list[Any]]:
    """(engine id, direction, dtype) of cuDNN engines that ever gave a wrong result: never chosen there."""
    bad = frame[(frame["status"] == "wrong_result") & (frame["space"] == "cudnn")]
    return sorted({(int(e), d, t) for e, d, t in bad[["engine_id", "direction", "dtype"]].itertuples(index=False)})
