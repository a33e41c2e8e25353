"""What the runtime needs of a selector, written down: :class:`RuntimeSelector`.

:class:`algosel.learn.selector.Selector` implements it; so do the stand-ins of :mod:`algosel.runtime.standins` that
tests and benchmarks use to make the runtime take a chosen path. Importing this module loads neither LightGBM nor
pandas, so the runtime can name the protocol without loading a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from algosel.problem import ConvProblem

if TYPE_CHECKING:
    from algosel.learn.selector import Choice


class RecordsCatalogue(Protocol):
    """The measurements a model ships with, by problem key."""

    def rows(self, problem_key: str) -> list[dict[str, Any]] | None:
        """Every recorded candidate row of the problem (None: not recorded)."""

    def time_ms(self, problem_key: str, candidate_id: str) -> float | None:
        """The recorded median device time of one candidate (None: not recorded)."""


class RuntimeSelector(Protocol):
    """The selector as the runtime calls it.

    Attributes
    ----------
    manifest : mapping
        The model's manifest: ``dtypes`` (covered), ``data_fingerprint`` (part of the persistent cache's key).
    spaces : tuple of str
        Candidate spaces the model ranks.
    blocked : set
        Engines the records found failing (:func:`algosel.learn.rules.allowed`).
    catalogue : RecordsCatalogue
    time_model : object or None
        The device-time predictor; None for a model without one (then nothing is predicted, and an unrecorded
        problem passes through unless timed).
    """

    manifest: Mapping[str, Any]
    spaces: tuple[str, ...]
    blocked: set
    catalogue: RecordsCatalogue
    time_model: Any

    def is_recorded(self, problem: ConvProblem) -> bool:
        """Whether the records measured ``problem`` itself."""

    def records_distance(self, problem: ConvProblem) -> float:
        """How far ``problem`` lies from the recorded problems of its kind (sum of |log2 ratio| of shape fields)."""

    def choose(self, problem: ConvProblem, max_workspace_bytes: int | None = None, deterministic: bool = False,
               top_k: int = 1, live: bool = False) -> list[Choice]:  # fmt: skip
        """The model's top ``top_k`` of its own list for ``problem``, best first."""

    def rank_rows(self, problem: ConvProblem, rows: list[dict[str, Any]], max_workspace_bytes: int | None = None
                  ) -> list[Choice]:  # fmt: skip
        """The model's ranking of an explicit list (cuDNN's live list), best first."""

    def predicted_time_ms(self, problem: ConvProblem, candidate_ids: Sequence[str],
                          rows: list[dict[str, Any]] | None = None) -> dict[str, float]:  # fmt: skip
        """Predicted device time (ms) of candidates of ``rows`` (None: of the model's own list), by id."""

    def host_us(self, problem: ConvProblem, candidate_ids: Sequence[str]) -> dict[str, float]:
        """Recorded host time per call (us) of candidates on ``problem`` or its nearest recorded problem."""
