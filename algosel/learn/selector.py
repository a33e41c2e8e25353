"""The selector in memory: a ranker, its manifest and its catalogue, choosing the candidates of a problem.

:meth:`Selector.choose` ranks the candidates valid for a problem. They come from, in order of preference: the
live enumeration of each space (where a GPU and the frontend are present), the records of that exact problem, or
the records of the nearest recorded problem of the same kind (:class:`~algosel.records.catalogue.Catalogue`), with
the candidates every problem has offline (GEMM lowering, PyTorch's default: each space says which) added where
the model was trained on their space.

A model covers the candidate spaces of its records (manifest ``spaces``); its files are
:mod:`algosel.learn.artifact`'s. An answer for a problem outside what the records cover (:meth:`Selector.coverage`)
is still given, but says so (``Choice.extrapolated``), warning once per kind (:class:`ExtrapolationWarning`). A
model with a time model also predicts each candidate's device time (:meth:`Selector.predicted_time_ms`).

Three ideas live beside this module: what it answers (:mod:`algosel.learn.choice`: candidate rows and the
:class:`Choice`), which GPU a loaded model ranks for (:mod:`algosel.learn.model_environment`), and its predicted
times, kept per problem and list (:mod:`algosel.learn.predicted_time`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.learn.artifact import (
    SPACES_DEFAULT,
    SelectorError,
    load_artifact,
    save_artifact,
    space_of,
)

# Choice, candidate_row and offline_rows are the choice's; check_environment, new_gpu_fix and
# JointModelWarning the model environment's: public names, importable from here as they always were.
from algosel.learn.choice import (  # noqa: F401
    Choice,
    candidate_row,
    choice_of,
    offline_rows,
)
from algosel.learn.compiled import attach_cached

# ExtrapolationWarning is the extrapolation module's: importable from here as it always was.
from algosel.learn.extrapolation import ExtrapolationWarning, warn_extrapolation  # noqa: F401
from algosel.learn.features import assemble, hardware_vector, listed_candidate_matrix
from algosel.learn.model_environment import JointModelWarning, check_environment, new_gpu_fix  # noqa: F401
from algosel.learn.predicted_time import (
    RANKED,
    PredictedTimes,
    default_position,
    predict_candidates,
    predict_returned,
)
from algosel.learn.ranker import Ranker
from algosel.learn.rules import allowed, on_shortlist
from algosel.learn.time_model import TIME_MODEL_FILE, TimeModel
from algosel.problem import ConvProblem
from algosel.records.catalogue import Catalogue
from algosel.records.environment import model_environments
from algosel.spaces import get_space, space_names

#: A problem size (a field, or the FLOPs) more than this factor beyond the smallest or largest recorded one lies
#: outside what a model covers: its answer is an extrapolation.
EXTRAPOLATION_FACTOR = 2.0


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
            ids = set(catalogue["env_id"].unique())  # not set(column): iterating an Arrow column is slow
            mine = self.target.get("env_id") if self.target.get("env_id") in ids else self.environment.get("env_id")
            catalogue = catalogue[catalogue["env_id"] == mine].drop(columns="env_id").reset_index(drop=True)
        self.catalogue = Catalogue(catalogue, self.environment)
        self._listed = tuple(s for s in self.spaces if s in space_names() and get_space(s).from_lists)
        self._cache: dict[tuple, list[Choice]] = {}
        self._matrices: dict[tuple, tuple[list[int], np.ndarray]] = {}  # candidate feature rows per candidate list
        self._times = PredictedTimes()  # the times choose() and rank_rows() predicted, per problem and list
        self._nearest_rows: dict[str, list[dict[str, Any]]] = {}  # a nearest problem's rows, as new problems get them
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

    def with_manifest(self, manifest: dict[str, Any]) -> Selector:
        """The same ranker, time model and catalogue (every GPU's, for a joint model) under another manifest: a
        model fitted in memory, saved with the fields of the run that made it."""
        return Selector(self.ranker, manifest, self._saved_catalogue, self.time_model)

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
            self._times.ranking(problem, rows)
        return self._rank(
            problem, rows, "live", None, max_workspace_bytes, False, len(rows), time_key=(problem, RANKED)
        )

    def _rank(
        self, problem, all_rows, source, mkey, max_workspace_bytes, deterministic, top_k, time_key=None
    ) -> list[Choice]:
        eligible, matrix = self._shortlist(all_rows, mkey)
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
        scores = self.ranker.score(X_all[positions])
        order = np.argsort(-scores, kind="stable")[: max(1, top_k)]
        times: list[float | None] = [None] * len(order)
        if self.time_model is not None:
            # Times only for the candidates returned, and PyTorch's default beside them in the same call (the
            # runtime asks for it next): the time model walks its trees once per row, and each call has a cost.
            default = default_position([all_rows[i] for i in eligible])
            times, default_ms = predict_returned(self.time_model, X_all, [positions[i] for i in order], default)
            if time_key is not None:
                known = dict(zip((rows[i]["candidate_id"] for i in order), times))
                self._times.keep(time_key, known if default_ms is None else {**known, DEFAULT_ID: default_ms})
        why = self.coverage(problem, source)
        if why:
            warn_extrapolation(problem, why)
        return [choice_of(problem, rows[i], scores[i], source, why, t) for i, t in zip(order, times)]

    def _shortlist(self, all_rows: list[dict[str, Any]], mkey: tuple | None) -> tuple[list[int], np.ndarray]:
        """The positions of ``all_rows`` on the shortlist and their candidate feature rows; cached by ``mkey``.

        Features are built for the shortlist only: it depends on the list alone, so it is cached with it."""
        cached = self._matrices.get(mkey) if mkey is not None else None
        if cached is None:
            shortlist = self.manifest.get("shortlist_rank")
            eligible = [
                i for i, r in enumerate(all_rows) if on_shortlist(r["space"], r["rank_a"], r["rank_b"], shortlist)
            ]
            cached = (eligible, listed_candidate_matrix([all_rows[i] for i in eligible], all_rows))
            if mkey is not None:
                self._matrices[mkey] = cached
        return cached

    def predicted_time_ms(
        self,
        problem: ConvProblem,
        candidate_ids: list[str] | tuple[str, ...],
        rows: list[dict[str, Any]] | None = None,
        live: bool = False,
    ) -> dict[str, float]:
        """The time model's predicted device time (ms) of candidates of ``problem``, by candidate id.

        Any candidate of the problem's list may be asked for, shortlisted or not, ``DEFAULT_ID`` included
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
        known = self._times.known(problem, rows, live)
        if all(c in known for c in candidate_ids):
            return {c: known[c] for c in candidate_ids}
        if rows is None:
            rows, _ = self.candidates_for(problem, live=live)
        return predict_candidates(self.time_model, problem, candidate_ids, rows, self._features)

    def _features(self, problem: ConvProblem, matrix: np.ndarray) -> np.ndarray:
        """The model's features of ``problem`` beside a candidate matrix, for the GPU ranked for."""
        return assemble(problem, matrix, self.target, self._hardware)

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
        t_default = self.catalogue.time_ms(problem.key, DEFAULT_ID)
        if t is None or t_default is None:
            return None
        return 1000.0 * (t_default - t)
