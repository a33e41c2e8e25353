"""``algosel sweep --quick MINUTES``: a new GPU's sweep, balanced whatever its budget cuts off (measure/quick.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from algosel.cli import main
from algosel.measure.quick import QuickPlan, interleave, quick_cases
from algosel.measure.sweep import SweepCase
from algosel.problem import ConvProblem


def _cases(
    source: str, shapes: int, k: int = 8, variants=(("float32", "nchw"), ("float16", "nhwc"))
) -> list[SweepCase]:
    return [
        SweepCase(ConvProblem(n=1, c=8 + i, k=k, h=8, w=8, r=3, s=3, dtype=d, layout=lay), source)
        for i in range(shapes)
        for d, lay in variants
    ]


def test_interleave_takes_one_shape_of_each_family_in_turn_with_all_its_variants():
    a, b, c = _cases("suite:x", 3, k=8), _cases("grid", 1, k=9), _cases("grid:own", 2, k=10)
    out = interleave([a, b, c])
    sources = [case.source for case in out]
    # whole shapes (both variants together), one family after the other, an exhausted family dropping out
    assert (
        sources
        == ["suite:x"] * 2 + ["grid"] * 2 + ["grid:own"] * 2 + ["suite:x"] * 2 + ["grid:own"] * 2 + ["suite:x"] * 2
    )
    for i in range(0, len(out), 2):
        assert out[i].problem.shape_key == out[i + 1].problem.shape_key
    assert sorted(c.key for c in out) == sorted(c.key for c in a + b + c)


def test_interleave_measures_a_case_of_two_families_once_and_is_deterministic():
    a = _cases("suite:x", 2)
    again = [SweepCase(c.problem, "grid") for c in a]
    out = interleave([a, again])
    assert len(out) == len(a) and {c.key for c in out} == {c.key for c in a}  # each case once, where it came first
    assert [c.key for c in interleave([a, again])] == [c.key for c in out]


def test_quick_cases_hold_suites_the_shipped_grid_and_an_own_grid_in_both_dtypes_and_layouts():
    plan = QuickPlan(minutes=5, own_shapes=20)
    cases = quick_cases(plan, ["alexnet"])
    sources = {c.source for c in cases}
    assert sources == {"suite:alexnet", "grid"}
    first = cases[:12]  # three shapes, four variants each: a suite layer, a shipped-grid shape, an own shape
    assert [c.source for c in first[::4]] == ["suite:alexnet", "grid", "grid"]
    assert {(c.problem.dtype, c.problem.layout) for c in first[:4]} == {
        ("float32", "nchw"),
        ("float32", "nhwc"),
        ("float16", "nchw"),
        ("float16", "nhwc"),
    }
    from algosel.measure.grid import sample_grid

    shipped = {p.shape_key for p in sample_grid(plan.shared_grid)}
    assert first[4].problem.shape_key in shipped and first[8].problem.shape_key not in shipped
    assert plan.time_budget_s == 300.0


@pytest.mark.parametrize(("plan", "said"), [({"minutes": 0}, "minutes > 0"), ({"minutes": 1, "own_seed": 0}, "differ")])
def test_quick_plan_refuses_bad_values(plan, said):
    with pytest.raises(ValueError, match=said):
        QuickPlan(**plan)


def test_sweep_quick_dry_run_and_its_refusals(capsys, tmp_path: Path):
    assert main(["sweep", "--quick", "3", "--out", str(tmp_path / "q"), "--dry-run", "--suites", "alexnet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "2416 cases (2396 from the grid)"
    )  # alexnet: 5 layers x 4; grids: 300 + 300 shapes x 4, less duplicates
    assert main(["sweep", "--quick", "3", "--grid", "4", "--out", str(tmp_path / "q"), "--dry-run"]) == 2
    assert "--quick chooses the shapes itself" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["sweep", "--quick", "0", "--out", str(tmp_path / "q"), "--dry-run"])
    assert stop.value.code == 2 and "argument --quick: expected a positive number, got '0'" in capsys.readouterr().err
