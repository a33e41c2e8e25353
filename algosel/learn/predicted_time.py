"""A selector's predicted device times: those its answers carry, kept per problem and list, and any candidate's.

The time model (:mod:`algosel.learn.time_model`) walks its trees once per row, and each call has a cost: a ranking
predicts the times of the candidates it returns and of PyTorch's default in one call (:func:`predict_returned`),
:class:`PredictedTimes` keeps them per problem and candidate list, and :func:`predict_candidates` predicts any
other candidate of a list.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from algosel.candidates import DEFAULT_ID
from algosel.learn.features import listed_candidate_matrix
from algosel.learn.time_model import TimeModel
from algosel.problem import ConvProblem

#: The key, beside a problem, of the times predicted for the list :meth:`Selector.rank_rows` ranked.
RANKED = "ranked"


class PredictedTimes:
    """The times predicted for a selector's answers: by ``(problem, live)`` as ``choose`` filled them, or by
    ``(problem, RANKED)`` for the last list ``rank_rows`` ranked for the problem (that very list object)."""

    def __init__(self) -> None:
        self._times: dict[tuple[ConvProblem, Hashable], dict[str, float]] = {}
        self._ranked_rows: dict[ConvProblem, list[dict[str, Any]]] = {}

    def ranking(self, problem: ConvProblem, rows: list[dict[str, Any]]) -> None:
        """``rows`` is the list ranked now for ``problem``: the times of another list ranked before are of other
        list-context features, and are forgotten."""
        self._ranked_rows[problem] = rows
        self._times.pop((problem, RANKED), None)

    def keep(self, key: tuple[ConvProblem, Hashable], times: Mapping[str, float]) -> None:
        """Keep ``times`` (by candidate id) under ``key``, beside those kept there already."""
        self._times.setdefault(key, {}).update(times)

    def known(self, problem: ConvProblem, rows: list[dict[str, Any]] | None, live: bool) -> dict[str, float]:
        """The times kept for ``problem``'s list: the model's own (``rows`` None, by ``live``) or ``rows`` where it is
        the list ranked last; empty otherwise."""
        if rows is None:
            key: tuple[ConvProblem, Hashable] | None = (problem, live)
        else:
            key = (problem, RANKED) if rows is self._ranked_rows.get(problem) else None
        return self._times.get(key, {}) if key is not None else {}


def predict_returned(
    time_model: TimeModel, features: np.ndarray, returned: Sequence[int], default: int | None
) -> tuple[list[float], float | None]:
    """The predicted times of the rows ``returned`` of ``features`` and of PyTorch's default's row (``default``; None:
    not in the list), in one call."""
    rows = [*returned, *([] if default is None else [default])]
    predicted = time_model.predict_ms(features[rows]).tolist()
    return predicted[: len(returned)], None if default is None else predicted[-1]


def default_position(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The position of PyTorch's default in ``rows``, or None."""
    return next((i for i, r in enumerate(rows) if r["candidate_id"] == DEFAULT_ID), None)


def predict_candidates(
    time_model: TimeModel,
    problem: ConvProblem,
    candidate_ids: Sequence[str],
    rows: list[dict[str, Any]],
    features_of: Callable[[ConvProblem, np.ndarray], np.ndarray],
) -> dict[str, float]:
    """The predicted time (ms) of each of ``candidate_ids`` in the list ``rows`` of ``problem``; a ValueError
    naming the first id not in the list. ``features_of`` assembles the problem's features beside a candidate
    matrix (the selector's hardware)."""
    index = {r["candidate_id"]: r for r in rows}
    missing = [c for c in candidate_ids if c not in index]
    if missing:
        raise ValueError(f"{missing[0]!r} is not a candidate of {problem.key} ({len(rows)} candidates)")
    if not candidate_ids:
        return {}
    picked = [index[c] for c in candidate_ids]
    X = features_of(problem, listed_candidate_matrix(picked, rows))
    return dict(zip(candidate_ids, time_model.predict_ms(X).tolist()))
