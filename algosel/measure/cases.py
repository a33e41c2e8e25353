"""The list of cases a sweep measures: the seeded grid plus the real-network suites."""

from __future__ import annotations

from collections.abc import Sequence

from algosel.measure.grid import GridSpec, sample_grid
from algosel.measure.sweep import SweepCase
from algosel.problem import DTYPES, LAYOUTS


def build_cases(
    grid: GridSpec | None,
    suites: Sequence[str],
    dtypes: Sequence[str],
    layouts: Sequence[str] = ("nchw",),
    suites_dir: str | None = None,
    grid_layouts: Sequence[str] | None = None,
) -> list[SweepCase]:
    """Grid shapes and suite layers, each in every dtype and layout; deduplicated, suites first.

    ``grid_layouts`` (default: ``layouts``) are the layouts of the grid's shapes.

    A shape that appears in a suite and in the grid is measured once and labelled with the suite.
    """
    from algosel.measure import suites as suite_mod  # noqa: PLC0415 - pandas import only when needed

    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {d!r}")
    grid_layouts = layouts if grid_layouts is None else grid_layouts
    for lay in (*layouts, *grid_layouts):
        if lay not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {lay!r}")
    cases: dict[str, SweepCase] = {}
    kwargs = {} if suites_dir is None else {"directory": suites_dir}
    for name in suites:
        frame = suite_mod.load_suite(name, **kwargs)
        for dtype in dtypes:
            for layout in layouts:
                for p in suite_mod.suite_problems(frame, dtype=dtype, layout=layout):
                    cases.setdefault(p.case_key, SweepCase(p, f"suite:{name}"))
    if grid is not None and grid.count > 0:
        shapes = sample_grid(grid)  # float32 budgets: the larger element size bounds both dtypes
        for dtype in dtypes:
            for layout in grid_layouts:
                for p in shapes:
                    q = p.replace(dtype=dtype, layout=layout)
                    cases.setdefault(q.case_key, SweepCase(q, "grid"))
    return list(cases.values())
