"""How the benchmarks compare two arms: ratios of paired slots, medians, and one bootstrap for their intervals.

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder on ``sys.path``).

A benchmark times its arms in slots side by side (ABBA order: benchmarks/zoolib/timing.py's ``round_order``), so that
the drift of the machine adds the same to both; each slot of one arm is compared with its neighbouring slot of the other
(:func:`paired_ratios`, or differences). The figure reported is a median (of the paired ratios or differences, or of
each arm where the arms cannot share a process: :func:`ratio_of_medians`) with a 95% percentile bootstrap interval
(:func:`bootstrap_interval`). A sample measured in several processes is resampled process by process and then slot by
slot within each (host-bound steps differ more between processes than within one), so that its interval holds both
spreads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Bootstrap draws per interval.
RESAMPLES = 2000
#: The seed of every interval's draws: the same results file gives the same interval on every run.
SEED = 0

#: A sample: values (resampled value by value), or groups of values, e.g. one array per process (resampled group by
#: group, then value by value within each drawn group).
Sample = Sequence[float] | np.ndarray | Sequence[Sequence[float]]


def paired_ratios(a: Sequence[float] | None, b: Sequence[float] | None) -> np.ndarray | None:
    """``a[i] / b[i]``: each slot of one arm over its neighbouring slot of the other; None where either is missing
    or empty, or their counts differ (they were not measured side by side)."""
    if a is None or b is None or not len(a) or len(a) != len(b):
        return None
    return np.asarray(a, dtype=float) / np.asarray(b, dtype=float)


def _grouped(sample: Sample) -> bool:
    return len(sample) > 0 and np.ndim(sample[0]) > 0


def _pooled(sample: Sample) -> np.ndarray:
    """Every value of a sample, its groups (if any) concatenated."""
    if _grouped(sample):
        return np.concatenate([np.asarray(g, dtype=float) for g in sample])
    return np.asarray(sample, dtype=float)


def _draws(sample: Sample, resamples: int, rng: np.random.Generator) -> list[np.ndarray] | np.ndarray:
    """``resamples`` bootstrap draws of a sample (see :data:`Sample`), each as one array of values."""
    if not _grouped(sample):
        values = np.asarray(sample, dtype=float)
        return values[rng.integers(0, len(values), (resamples, len(values)))]
    groups = [np.asarray(g, dtype=float) for g in sample]
    draws = []
    for _ in range(resamples):
        picked = rng.integers(0, len(groups), len(groups))
        draws.append(np.concatenate([groups[j][rng.integers(0, len(groups[j]), len(groups[j]))] for j in picked]))
    return draws


def bootstrap_interval(
    statistic: Callable[..., float],
    *samples: Sample,
    resamples: int = RESAMPLES,
    level: float = 0.95,
    seed: int = SEED,
) -> tuple[float, float]:
    """The percentile bootstrap interval (two-sided, ``level``) of ``statistic(*samples)``.

    Each sample (:data:`Sample`) is resampled with replacement on its own, ``resamples`` times; ``statistic`` gets one
    array of values per sample (a grouped sample's drawn groups concatenated), e.g. ``np.median`` of one sample of
    paired ratios, ``algosel.records.analysis.geomean`` of one, or the ratio of two samples' medians."""
    if not samples or any(len(s) == 0 or (_grouped(s) and any(len(g) == 0 for g in s)) for s in samples):
        raise ValueError("bootstrap_interval: every sample needs at least one value (and every group of one)")
    rng = np.random.default_rng(seed)
    draws = [_draws(s, resamples, rng) for s in samples]
    values = np.array([statistic(*(d[i] for d in draws)) for i in range(resamples)], dtype=float)
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


def median_interval(sample: Sample, resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """The median of every value of ``sample`` (e.g. paired ratios or differences, grouped by process or not), and
    its 95% bootstrap interval."""
    lo, hi = bootstrap_interval(np.median, sample, resamples=resamples)
    return float(np.median(_pooled(sample))), lo, hi


def ratio_of_medians(a: Sample, b: Sample, resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """``median(a) / median(b)`` of two samples that cannot be paired (e.g. a step time per process of two
    configurations that cannot share a process), and its 95% bootstrap interval, each side resampled on its own."""
    lo, hi = bootstrap_interval(lambda x, y: np.median(x) / np.median(y), a, b, resamples=resamples)
    return float(np.median(_pooled(a)) / np.median(_pooled(b))), lo, hi
