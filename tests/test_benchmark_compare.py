"""benchmarks/compare.py, the kept benchmarks' comparison: paired ratios, medians and their bootstrap intervals, on
data whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO


@pytest.fixture
def compare(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import compare

    return compare


def _slots(rng, n, level=10.0, noise=0.03):
    """``n`` slot times around ``level`` ms with a few percent of multiplicative noise."""
    return level * np.exp(rng.normal(0.0, noise, n))


def test_paired_ratios_pair_each_slot_with_its_neighbour_and_refuse_what_was_not_measured_side_by_side(compare):
    assert compare.paired_ratios([2.0, 3.0], [1.0, 6.0]).tolist() == [2.0, 0.5]
    assert compare.paired_ratios([1.0, 2.0], [1.0]) is None  # counts differ
    assert compare.paired_ratios([], []) is None and compare.paired_ratios(None, [1.0]) is None


def test_two_arms_alike_read_one_and_a_known_shift_is_found(compare):
    rng = np.random.default_rng(1)
    base = _slots(rng, 80)
    same = compare.paired_ratios(_slots(rng, 80), base)  # the same distribution: an A/A comparison
    median, lo, hi = compare.median_interval(same)
    assert lo < 1.0 < hi and lo <= median <= hi and hi - lo < 0.03
    slower = compare.paired_ratios(1.05 * _slots(rng, 80), base)  # 5% slower
    median, lo, hi = compare.median_interval(slower)
    assert 1.0 < lo < 1.05 < hi and median == pytest.approx(1.05, abs=0.01)
    # the geomean of the ratios, as any statistic of the sample
    from algosel.records.analysis import geomean

    lo, hi = compare.bootstrap_interval(geomean, slower)
    assert 1.0 < lo < 1.05 < hi
    # identical slots: every draw is the same, so is the interval
    assert compare.median_interval(np.full(8, 1.02)) == pytest.approx((1.02, 1.02, 1.02))


def test_a_grouped_sample_resamples_its_groups_so_that_processes_that_disagree_widen_the_interval(compare):
    rng = np.random.default_rng(2)
    processes = [1.03 * np.exp(rng.normal(0.0, 0.01, 40)), 0.97 * np.exp(rng.normal(0.0, 0.01, 40))]
    median, lo, hi = compare.median_interval(processes)
    assert median == pytest.approx(float(np.median(np.concatenate(processes))))
    assert lo < 0.98 and hi > 1.02  # either process alone is a possible draw
    # four processes apart by a few percent, each steady: resampling only the slots, as if each were independent,
    # would give an interval less than half as wide
    processes = [level * np.exp(rng.normal(0.0, 0.005, 40)) for level in (1.02, 0.99, 1.01, 0.98)]
    median, lo, hi = compare.median_interval(processes)
    flat = compare.median_interval(np.concatenate(processes))
    assert lo < 0.99 < 1.01 < hi and flat[2] - flat[1] < (hi - lo) / 2


def test_a_ratio_of_medians_resamples_each_side_on_its_own(compare):
    ratio, lo, hi = compare.ratio_of_medians([9.0, 10.0, 11.0], [10.0, 10.0])
    assert (ratio, lo, hi) == pytest.approx((1.0, 0.9, 1.1))
    rng = np.random.default_rng(3)
    ratio, lo, hi = compare.ratio_of_medians(_slots(rng, 30, 12.0), _slots(rng, 30, 10.0))
    assert 1.1 < lo < 1.2 < hi < 1.3 and lo <= ratio <= hi


def test_the_interval_is_seeded_and_narrows_with_the_level(compare):
    rng = np.random.default_rng(4)
    sample = _slots(rng, 50)
    assert compare.bootstrap_interval(np.median, sample) == compare.bootstrap_interval(np.median, sample)
    lo95, hi95 = compare.bootstrap_interval(np.median, sample)
    lo50, hi50 = compare.bootstrap_interval(np.median, sample, level=0.5)
    assert lo95 < lo50 < hi50 < hi95
    with pytest.raises(ValueError, match="at least one value"):
        compare.bootstrap_interval(np.median, [])
    with pytest.raises(ValueError, match="at least one value"):
        compare.bootstrap_interval(np.median, [np.ones(3), np.array([])])
