"""Tests of algosel.measure.grid: the seeded grid of shapes is deterministic, bounded, prefix-stable and covers
its axes."""

from __future__ import annotations

import pytest

from algosel.measure.grid import LOSS_FAMILIES, TARGETED_FAMILIES, GridSpec, family_of, sample_grid
from algosel.problem import ConvProblem


@pytest.fixture(scope="module")
def grid400() -> list[ConvProblem]:
    return sample_grid(GridSpec(count=400, seed=0))


def test_same_seed_gives_the_same_list() -> None:
    assert sample_grid(GridSpec(count=50, seed=7)) == sample_grid(GridSpec(count=50, seed=7))


def test_different_seeds_give_different_lists() -> None:
    a = sample_grid(GridSpec(count=50, seed=0))
    b = sample_grid(GridSpec(count=50, seed=1))
    assert a != b
    assert {p.shape_key for p in a} != {p.shape_key for p in b}


@pytest.mark.parametrize("count", [1, 17, 120])
def test_count_is_honoured_with_distinct_shapes(count: int) -> None:
    problems = sample_grid(GridSpec(count=count))
    assert len(problems) == count
    assert len({p.shape_key for p in problems}) == count


def test_count_zero_gives_an_empty_list() -> None:
    assert sample_grid(GridSpec(count=0)) == []


def test_problems_are_valid_forward_problems_within_budgets() -> None:
    spec = GridSpec(count=150, seed=3, max_flops=2e9, max_operand_bytes=16 << 20)
    problems = sample_grid(spec, dtype="float16", layout="nhwc")
    assert len(problems) == 150
    for p in problems:
        assert ConvProblem.from_key(p.key) == p  # re-validated from its fields
        assert (p.dtype, p.layout, p.direction) == ("float16", "nhwc", "fwd")
        assert p.flops <= spec.max_flops
        assert p.bytes_moved <= spec.max_operand_bytes


def test_default_budgets_hold_on_the_default_grid(grid400: list[ConvProblem]) -> None:
    spec = GridSpec()
    assert all(p.flops <= spec.max_flops and p.bytes_moved <= spec.max_operand_bytes for p in grid400)


def test_impossible_budgets_raise_instead_of_looping_forever() -> None:
    with pytest.raises(ValueError, match=r"could not draw 5 distinct grid shapes within max_flops=1 .*0 found"):
        sample_grid(GridSpec(count=5, max_flops=1, max_operand_bytes=1))


def test_a_count_beyond_the_bound_is_refused_before_any_draw() -> None:
    with pytest.raises(ValueError, match=r"^grid count 100001: must be 0 to 100,000 shapes"):
        GridSpec(count=100_001)
    assert GridSpec(count=10**8, max_count=None).count == 10**8  # algosel grid: printed as drawn


def test_grid_covers_the_documented_axes(grid400: list[ConvProblem]) -> None:
    kernels = {p.r for p in grid400} | {p.s for p in grid400}
    assert {1, 3, 5, 7, 11} <= kernels
    assert any(p.r != p.s for p in grid400), "asymmetric kernels"
    assert {1, 2, 4} <= {p.stride_h for p in grid400}
    assert any(p.dilation_h > 1 for p in grid400)
    assert any(p.is_depthwise for p in grid400)
    assert any(p.is_fully_connected and p.h > 1 for p in grid400)
    assert any(p.is_pointwise for p in grid400)
    assert any(p.pad_h > 0 for p in grid400) and any(p.pad_h == 0 and p.r > 1 for p in grid400), "same and valid"
    batches = {p.n for p in grid400}
    assert min(batches) == 1 and max(batches) >= 1024
    assert max(max(p.c, p.k) for p in grid400) >= 2048
    assert min(min(p.c, p.k) for p in grid400) <= 3


def test_prefix_is_stable_when_the_count_grows() -> None:
    # The sweep extends a dataset by asking for a larger count: the shapes it already measured must come first.
    assert sample_grid(GridSpec(count=300))[:200] == sample_grid(GridSpec(count=200))


# ------------------------------------------------------------------------------------------------------- mixes
def test_the_networks_mix_is_the_default_and_unchanged() -> None:
    # The shipped records were swept from the default grid: naming its mix must not move a single shape.
    assert GridSpec().mix == "networks"
    assert sample_grid(GridSpec(count=60, mix="networks")) == sample_grid(GridSpec(count=60))
    assert GridSpec().source == "grid"


def test_the_loss_mix_draws_families_by_their_shares() -> None:
    shapes = sample_grid(GridSpec(count=600, seed=1, mix="loss"))
    counts = {f: 0 for f, _ in LOSS_FAMILIES}
    for p in shapes:
        family = family_of(p)
        # a stem: a large kernel or a 3x3 drawn strided over few channels; counted as the large kernel it mostly is
        counts[family if family != "stem" else "large_kernel"] += 1
    shares = {f: counts[f] / len(shapes) for f in counts}
    # Pointwise is the largest share of the loss and of this mix; it is a fifth of the networks mix.
    assert shares["pointwise"] > 0.25
    assert max(shares, key=shares.get) == "pointwise"
    assert all(counts[f] > 0 for f in counts), "every family still grows"
    networks = sample_grid(GridSpec(count=600, seed=1))
    assert sum(family_of(p) == "pointwise" for p in networks) / 600 < shares["pointwise"]


def test_the_loss_mix_is_seeded_and_prefix_stable() -> None:
    spec = GridSpec(count=80, seed=1, mix="loss")
    assert sample_grid(spec) == sample_grid(spec)
    assert sample_grid(GridSpec(count=120, seed=1, mix="loss"))[:80] == sample_grid(spec)
    assert spec.source == "grid:loss"


def test_family_of_tells_each_family_from_its_shapes() -> None:
    seen = {family_of(p) for p in sample_grid(GridSpec(count=300))}
    # every family of the networks mix, and a few of its large kernels drawn strided over 3 channels: stems
    assert {f for f, _ in LOSS_FAMILIES} <= seen <= {f for f, _ in TARGETED_FAMILIES}
    assert family_of(ConvProblem(8, 3, 64, 224, 224, 7, 7, 3, 3, 2, 2)) == "stem"
    assert family_of(ConvProblem(8, 3, 64, 224, 224, 4, 4, stride_h=4, stride_w=4)) == "stem"
    assert family_of(ConvProblem(8, 3, 64, 224, 224, 7, 7, 3, 3)) == "large_kernel"  # stride 1: not a stem
    assert family_of(ConvProblem(8, 64, 64, 28, 28, 3, 3, 1, 1)) == "conv3x3"
    assert family_of(ConvProblem(8, 64, 64, 28, 28, 3, 3, 1, 1, groups=64)) == "depthwise"
    assert family_of(ConvProblem(8, 64, 64, 28, 28, 1, 1, stride_h=2, stride_w=2)) == "pointwise"
    assert family_of(ConvProblem(8, 64, 64, 6, 6, 6, 6)) == "fully_connected"


def test_unknown_mix_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'lossy'"):
        GridSpec(mix="lossy")


def test_the_targeted_mix_draws_stems_over_few_channels_first_and_records_its_source() -> None:
    shapes = sample_grid(GridSpec(count=100, seed=2, mix="targeted"))
    families = [family_of(p) for p in shapes]
    assert max(set(families), key=families.count) == "stem"
    assert set(families) == {f for f, _ in TARGETED_FAMILIES}
    stems = [p for p, f in zip(shapes, families) if f == "stem"]
    assert all(p.c <= 4 and p.stride_h >= 2 and p.r >= 3 for p in stems)
    assert {p.r for p in stems} >= {3, 4, 7} and {p.stride_h for p in stems} == {2, 4}
    assert GridSpec(mix="targeted").source == "grid:targeted"
    assert sample_grid(GridSpec(count=120, seed=2, mix="targeted"))[:100] == shapes
