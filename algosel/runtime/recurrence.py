"""What the process has seen of a layer: how many calls a new problem can expect, and the layer's verdicts so far.

A layer (:func:`~algosel.runtime.candidates.layer_key`: a convolution without its batch and input size) is met at one
size in a fixed-shape step and at many in a multi-scale run. The rule (:mod:`algosel.runtime.rule`) needs the calls
a new problem can expect:

- the layer's calls still to come: ``run_steps`` (a training run's steps yet to come once a layer is met; a prior,
  :class:`~algosel.runtime.policy.SwitchPolicy.expected_run_steps`), or the steps seen so far where more (a run that
  has gone on for ``t`` steps is expected to go on for about as long again);
- shared among the sizes the layer has been met at: a layer met at one size keeps all of them, a layer met at 30
  input sizes gives each a thirtieth.

Verdicts carry between a layer's sizes (from the H200 records, at near sizes of one layer, "PyTorch's default is
fastest" holds again in 89.4% of pairs, while a faster candidate found at one size is slower than the default at a
near size in 26%: ``benchmarks/pick_stability.py``): :meth:`near_verdict` gives the measured verdict of a near size
(same batch, height and width within :data:`NEAR_SIZE_RATIO`), which lets a default verdict pass a new size through
untimed and limits a switch verdict's timing at a new size to that one candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from algosel.problem import ConvProblem
from algosel.runtime.candidates import layer_key

#: Height and width within this ratio of a size with a verdict (the batch the same): a near size.
NEAR_SIZE_RATIO = 1.35


@dataclass(frozen=True)
class Verdict:
    """A measured decision at one size of a layer: the candidate kept (``DEFAULT_ID``: none was faster)."""

    n: int
    h: int
    w: int
    candidate_id: str


class Recurrence:
    """Sizes and measured verdicts per layer, as the executor meets problems (see the module docstring)."""

    def __init__(self, run_steps: float):
        self.run_steps = float(run_steps)
        self.steps = 0  # blocks (training steps) ended so far
        self._sizes: dict[tuple, set[tuple[int, int, int]]] = {}
        self._verdicts: dict[tuple, list[Verdict]] = {}

    def met(self, problem: ConvProblem) -> None:
        """``problem`` was met (its first call)."""
        self._sizes.setdefault(layer_key(problem), set()).add((problem.n, problem.h, problem.w))

    def sizes(self, problem: ConvProblem) -> int:
        """Sizes the problem's layer has been met at (at least 1)."""
        return max(1, len(self._sizes.get(layer_key(problem), ())))

    def expected_calls(self, problem: ConvProblem) -> float:
        """Calls of ``problem`` still to come: its layer's (the larger of the prior and the steps seen), shared among
        the layer's sizes."""
        return max(self.run_steps, float(self.steps)) / self.sizes(problem)

    def layer_calls(self, problem: ConvProblem) -> float:
        """Calls of the problem's layer still to come, whatever its size."""
        return max(self.run_steps, float(self.steps))

    def remember(self, problem: ConvProblem, candidate_id: str) -> None:
        """A measured verdict on ``problem``."""
        self._verdicts.setdefault(layer_key(problem), []).append(Verdict(problem.n, problem.h, problem.w, candidate_id))

    def near_verdict(self, problem: ConvProblem) -> Verdict | None:
        """The measured verdict of the nearest size of the problem's layer within :data:`NEAR_SIZE_RATIO` (same
        batch), or None."""
        best, best_distance = None, None
        for v in self._verdicts.get(layer_key(problem), ()):
            if v.n != problem.n:
                continue
            rh, rw = max(v.h, problem.h) / min(v.h, problem.h), max(v.w, problem.w) / min(v.w, problem.w)
            if rh <= NEAR_SIZE_RATIO and rw <= NEAR_SIZE_RATIO and (best_distance is None or rh * rw < best_distance):
                best, best_distance = v, rh * rw
        return best
