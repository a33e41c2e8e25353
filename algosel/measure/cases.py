"""The list of cases a sweep measures: a user's layers files, the real-network suites and the seeded grid."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from algosel.measure.grid import GridSpec, sample_grid
from algosel.measure.sweeper import SweepCase
from algosel.problem import DTYPES, LAYOUTS


def build_cases(
    grid: GridSpec | None,
    suites: Sequence[str],
    dtypes: Sequence[str],
    layouts: Sequence[str] = ("nchw",),
    suites_dir: str | None = None,
    grid_layouts: Sequence[str] | None = None,
    layers: Sequence[str | Path] = (),
) -> list[SweepCase]:
    """Layers files' shapes, suite layers and grid shapes, each in every dtype and layout; deduplicated.

    ``layouts`` are the layouts of the layers files' and the suites' shapes (a layers file's row is also measured in
    the layout its ``layout`` column recorded), ``grid_layouts`` (default: ``layouts``) those of the grid's.
    ``layers`` are layers files (:mod:`algosel.measure.layers`; every file is read and validated before anything is
    returned), whose cases have the source ``layers:<network>``.

    A shape that appears in several places is measured once and labelled with the first: a layers file, then a
    suite, then the grid.
    """
    from algosel.measure import suites as suite_mod  # noqa: PLC0415 - pandas import only when needed
    from algosel.measure.layer_table import suite_problems  # noqa: PLC0415
    from algosel.measure.layers import layers_problems, load_layers  # noqa: PLC0415

    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {d!r}")
    grid_layouts = layouts if grid_layouts is None else grid_layouts
    for lay in (*layouts, *grid_layouts):
        if lay not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {lay!r}")
    cases: dict[str, SweepCase] = {}
    frames = [load_layers(path) for path in layers]  # all files validated before any case is built
    for frame in frames:
        for network, part in frame.groupby("network", sort=False):
            # each row in the layouts asked, and in the one the network ran it in where the file recorded it
            recorded = [(lay, rows) for lay, rows in part.groupby("layout", sort=False) if lay]
            for dtype in dtypes:
                for layout, rows in [*((lay, part) for lay in layouts), *recorded]:
                    for p in layers_problems(rows, dtype=dtype, layout=layout):
                        cases.setdefault(p.case_key, SweepCase(p, f"layers:{network}"))
    kwargs = {} if suites_dir is None else {"directory": suites_dir}
    for name in suites:
        frame = suite_mod.load_suite(name, **kwargs)
        for dtype in dtypes:
            for layout in layouts:
                for p in suite_problems(frame, dtype=dtype, layout=layout):
                    cases.setdefault(p.case_key, SweepCase(p, f"suite:{name}"))
    if grid is not None and grid.count > 0:
        shapes = sample_grid(grid)  # float32 budgets: the larger element size bounds both dtypes
        # Shape by shape: a sweep stopped by its time budget leaves whole shapes (every dtype and layout) behind it,
        # the unit the selector's split and the held-out evaluation work in.
        for p in shapes:
            for dtype in dtypes:
                for layout in grid_layouts:
                    q = p.replace(dtype=dtype, layout=layout)
                    cases.setdefault(q.case_key, SweepCase(q, grid.source))
    return list(cases.values())
