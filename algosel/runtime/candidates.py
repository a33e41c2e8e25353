"""Where the runtime's candidates come from: the model's ranking of a problem's candidate list.

For a problem the records lack, the list is the nearest recorded problem's (offline, no GPU call), or cuDNN's live
list of the problem itself (heuristic modes' lists queried through the frontend: a few to ~50 ms a problem). An
executor takes its source as an argument (``Executor(candidates=...)``): tests and benchmarks pass stand-ins that
return chosen lists, without patching the executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from algosel.problem import ConvProblem

if TYPE_CHECKING:
    from algosel.learn.protocol import RuntimeSelector
    from algosel.learn.selector import Choice


@dataclass(frozen=True)
class Ranked:
    """The model's top candidates of one list, best first, and the list itself where it is not the model's own
    offline list (cuDNN's live list: the rows its predicted times are asked of)."""

    choices: list[Choice]
    rows: list[dict[str, Any]] | None = None


class CandidateSource(Protocol):
    """What an executor asks for candidates (see the module docstring)."""

    def live_available(self) -> bool:
        """Whether cuDNN's live lists can be queried here."""

    def ranked(self, problem: ConvProblem, live: bool, k: int, modes: tuple[str, ...] | None = None) -> Ranked:
        """The model's top ``k``: of cuDNN's live list of ``problem`` (of the heuristic ``modes``' lists; None: all
        three) where ``live``, else of the model's offline list (the records', or the nearest recorded problem's)."""


class ModelCandidates:
    """The selector's rankings (:meth:`Selector.choose` offline, :meth:`Selector.rank_rows` of cuDNN's live list)."""

    def __init__(self, selector: RuntimeSelector, max_workspace_bytes: int | None = None, live: bool | None = None):
        self.selector = selector
        self.max_workspace_bytes = max_workspace_bytes
        self._live = live  # None: where the GPU, the frontend and the model's environment allow
        self.live_queries = 0

    def live_available(self) -> bool:
        if self._live is None:
            from algosel.learn.models import live_available  # noqa: PLC0415

            self._live = live_available(self.selector)
        return self._live

    def ranked(self, problem: ConvProblem, live: bool, k: int, modes: tuple[str, ...] | None = None) -> Ranked:
        if not live:
            return Ranked(self.selector.choose(problem, self.max_workspace_bytes, top_k=k, live=False))
        from algosel.learn.selector import candidate_row, offline_rows  # noqa: PLC0415
        from algosel.spaces import CandidateError, get_space  # noqa: PLC0415

        self.live_queries += 1
        space = get_space("cudnn")
        try:
            cands = space.enumerate(problem, modes=modes)
        except CandidateError:
            cands = []
        finally:
            space.release(problem)
        rows = [candidate_row(c) for c in cands] + offline_rows(problem, self.selector.spaces)
        return Ranked(self.selector.rank_rows(problem, rows, self.max_workspace_bytes)[:k], rows)
