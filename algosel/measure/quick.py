"""A sweep for a GPU new to algosel, ordered so that whatever a time budget cuts off leaves a balanced dataset.

A joint model (trained on several GPUs with hardware features) learns a new GPU fastest from two kinds of shapes:
shapes the shipped records already have (the suites' layers and the first shapes of the shipped grid, seed 0),
where the model sees the same problem on both GPUs and can learn the difference, and shapes of the new GPU's own
(a grid of another seed), so that its held-out score is not a score on memorised problems. ``algosel sweep
--quick MINUTES`` measures them interleaved: one shape of each kind in turn, every dtype and layout of a shape
together (the unit the selector's split and evaluation work in), within the family in a seeded random order. A
sweep stopped by its budget, and the next one resuming it, keep that balance.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from algosel.measure.grid import GridSpec
from algosel.measure.sweeper import SweepCase

#: Shapes of the shipped H200 grid (``data/sweeps/h200``: 300 shapes of seed 0): the shared ones come from these.
SHIPPED_GRID_SHAPES = 300


@dataclass(frozen=True)
class QuickPlan:
    """What ``--quick`` measures: suites' layers and the shipped grid (shared with the shipped records) and a grid
    of the GPU's own (``own_seed``), in ``dtypes`` x ``layouts``, for ``minutes``."""

    minutes: float
    own_seed: int = 1
    own_shapes: int = 300
    dtypes: tuple[str, ...] = ("float32", "float16")
    layouts: tuple[str, ...] = ("nchw", "nhwc")

    def __post_init__(self) -> None:
        if not self.minutes > 0:
            raise ValueError(f"--quick takes minutes > 0, got {self.minutes!r}")
        if self.own_seed == 0:
            raise ValueError("the own grid's seed must differ from the shipped grid's (0)")

    @property
    def shared_grid(self) -> GridSpec:
        return GridSpec(count=SHIPPED_GRID_SHAPES, seed=0)

    @property
    def own_grid(self) -> GridSpec:
        return GridSpec(count=self.own_shapes, seed=self.own_seed)

    @property
    def time_budget_s(self) -> float:
        return 60.0 * self.minutes


def _shape_units(cases: Sequence[SweepCase], salt: str) -> list[list[SweepCase]]:
    """``cases`` grouped by shape (every dtype and layout together), the groups in a seeded random order."""
    units: dict[str, list[SweepCase]] = {}
    for case in cases:
        units.setdefault(case.problem.shape_key, []).append(case)
    return [units[k] for k in sorted(units, key=lambda k: (zlib.crc32(f"{salt}:{k}".encode()), k))]


def interleave(families: Sequence[Sequence[SweepCase]], salt: str = "quick") -> list[SweepCase]:
    """The cases of ``families`` one shape of each family in turn (a family that runs out drops out), each family's
    shapes in a seeded random order; a case in several families is measured once, in its first place."""
    queues = [_shape_units(f, f"{salt}:{i}") for i, f in enumerate(families)]
    out: list[SweepCase] = []
    seen: set[str] = set()
    for depth in range(max((len(q) for q in queues), default=0)):
        for queue in queues:
            if depth < len(queue):
                for case in queue[depth]:
                    if case.key not in seen:
                        seen.add(case.key)
                        out.append(case)
    return out


def quick_cases(plan: QuickPlan, suites: Sequence[str], suites_dir: str | None = None) -> list[SweepCase]:
    """The ordered cases of ``plan``: suite layers, shared grid shapes and own grid shapes, interleaved."""
    from algosel.measure.cases import build_cases  # noqa: PLC0415 - pandas only when a sweep is built

    def family(grid: GridSpec | None, names: Sequence[str]) -> list[SweepCase]:
        return build_cases(grid, names, plan.dtypes, plan.layouts, suites_dir=suites_dir)

    return interleave([family(None, suites), family(plan.shared_grid, ()), family(plan.own_grid, ())])
