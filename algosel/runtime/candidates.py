"""Where the runtime's candidates come from: the model's ranking of a problem's candidate list.

For a problem the records lack, the list is the nearest recorded problem's (offline, no GPU call), or cuDNN's live
list of the problem itself (heuristic modes' lists queried through the frontend: a few to ~50 ms a problem). An
executor takes its source as an argument (``Executor(candidates=...)``): tests and benchmarks pass stand-ins that
return chosen lists, without patching the executor.
"""

from __future__ import annotations

from collections.abc import Callable
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


def layer_key(problem: ConvProblem) -> tuple:
    """``problem`` without its batch and input size: one layer of a network whatever images it is given."""
    p = problem
    return (p.c, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups,
            p.dtype, p.layout, p.direction)  # fmt: skip


#: What queries cuDNN's live list of a problem in heuristic modes (None: all three).
Lister = Callable[[ConvProblem, "tuple[str, ...] | None"], list]

#: ``ModelCandidates(scope=...)``: cuDNN's live list queried once per problem, or once per layer (its other batch
#: and input sizes rank the list of the first size met; the runtime's way: a network whose input size keeps changing,
#: multi-scale training, otherwise pays the query, a few to ~50 ms, at every new size of every layer).
LIST_SCOPES = ("problem", "layer")
#: cuDNN's heuristic modes whose lists the runtime ranks: mode B's query costs several times A's and FALLBACK's
#: together, and found the same 0.905 of the default's total time on 834 unrecorded problems (H200).
LIVE_MODES = ("a", "fallback")


class ModelCandidates:
    """The selector's rankings (:meth:`Selector.choose` offline, :meth:`Selector.rank_rows` of cuDNN's live list).

    ``scope="layer"``: a live list queried for one batch and input size of a layer serves the layer's other sizes
    (the model ranks it for the new size; a config that does not build for it falls back to PyTorch's path), so that
    a network whose input size keeps changing pays the query once per layer, not once per size."""

    def __init__(self, selector: RuntimeSelector, max_workspace_bytes: int | None = None, live: bool | None = None,
                 scope: str = "layer", lister: Lister | None = None):  # fmt: skip
        """``lister``: what queries cuDNN's live list of a problem in heuristic modes (default: the cuDNN space's
        ``enumerate``; tests pass a stand-in)."""
        if scope not in LIST_SCOPES:
            raise ValueError(f"ModelCandidates scope must be one of {LIST_SCOPES}, got {scope!r}")
        self.selector = selector
        self.max_workspace_bytes = max_workspace_bytes
        self._live = live  # None: where the GPU, the frontend and the model's environment allow
        self.scope = scope
        self.live_queries = 0  # cuDNN queried
        self.live_reused = 0  # a layer's list of another size ranked instead
        self._lists: dict[tuple, list[dict[str, Any]]] = {}  # scope "layer": live rows by (layer, modes)
        self._lister = lister or _cudnn_list

    def live_available(self) -> bool:
        if self._live is None:
            from algosel.learn.models import live_available  # noqa: PLC0415

            self._live = live_available(self.selector)
        return self._live

    def ranked(self, problem: ConvProblem, live: bool, k: int, modes: tuple[str, ...] | None = None) -> Ranked:
        if not live:
            return Ranked(self.selector.choose(problem, self.max_workspace_bytes, top_k=k, live=False))
        from algosel.learn.selector import candidate_row, offline_rows  # noqa: PLC0415

        key = (layer_key(problem), tuple(modes) if modes is not None else None)
        live_rows = self._lists.get(key) if self.scope == "layer" else None
        if live_rows is not None:
            self.live_reused += 1
        else:
            self.live_queries += 1
            live_rows = [candidate_row(c) for c in self._lister(problem, modes)]
            if self.scope == "layer" and live_rows:
                self._lists[key] = live_rows
        rows = [dict(r) for r in live_rows] + offline_rows(problem, self.selector.spaces)
        return Ranked(self.selector.rank_rows(problem, rows, self.max_workspace_bytes)[:k], rows)


def _cudnn_list(problem: ConvProblem, modes: tuple[str, ...] | None) -> list:
    """cuDNN's live list of ``problem`` (its heuristic ``modes``' lists; none where it has no candidate)."""
    from algosel.spaces import CandidateError, get_space  # noqa: PLC0415

    space = get_space("cudnn")
    try:
        return space.enumerate(problem, modes=modes)
    except CandidateError:
        return []
    finally:
        space.release(problem)
