"""Records from the runtime's persistent cache beside a sweep's, for ``algosel train --from-cache``.

Verify mode times the model's shortlist and PyTorch's default of every new problem and keeps the times in the
runtime cache; :func:`algosel.runtime.measured.records_from_cache` turns them into records. This module joins those
records to the sweep's for training:

- a problem the sweep's records of that GPU and cuDNN already measured keeps the sweep's rows only (every candidate,
  the sweep's repeats); the cache's rows of it are dropped;
- the cache's rows are weighted against the sweep's (:data:`WEIGHT_COLUMN`, which
  :meth:`algosel.learn.ranker.Ranker.fit_prepared` reads): they are a few candidates of a problem timed a few times;
- the cache's problems are always trained on, never held out (:func:`held_out`): they are the user's own layers,
  and what the retrained model is for. The held-out report stays the sweep's held-out problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from algosel.learn.evaluate import Prepared, is_test_shape
from algosel.records.environment import gpu_slug

#: Per-row training weight (records of a runtime cache carry the ``--cache-weight``; the sweep's 1).
WEIGHT_COLUMN = "weight"
#: Whether a row came from a runtime cache.
FROM_CACHE_COLUMN = "from_cache"


def check_cache_weight(weight: object) -> float:
    """``weight`` as a training weight: a finite number > 0 (ValueError naming the value)."""
    try:
        value = float(weight)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(weight, bool) or not (0 < value < float("inf")):
        raise ValueError(f"cache weight must be a number > 0, got {weight!r}")
    return value


def with_cache_records(
    frame: pd.DataFrame,
    envs: Mapping[str, Mapping[str, Any]],
    cache_frames: list[pd.DataFrame],
    weight: float = 1.0,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], dict[str, int]]:
    """The sweep's records ``frame`` (environments ``envs``) joined by the runtime cache's ``cache_frames`` (each
    with ``attrs["environments"]``), as the module docstring says; and what was joined (rows, engine configs among them
    without heuristic ranks, problems, problems dropped because the sweep measured them)."""
    weight = check_cache_weight(weight)
    envs = {k: dict(v) for k, v in envs.items()}
    pairs = frame[["problem_key", "env_id"]].drop_duplicates()
    slug_of = {e: gpu_slug(env) for e, env in envs.items()}
    measured = set(zip(pairs["problem_key"].tolist(), pairs["env_id"].map(slug_of).tolist()))
    kept, dropped = [], 0
    for cache in cache_frames:
        cache_envs = cache.attrs.get("environments", {})
        slugs = cache["env_id"].map({e: gpu_slug(env) for e, env in cache_envs.items()}).tolist()
        seen = np.array([(k, s) in measured for k, s in zip(cache["problem_key"].tolist(), slugs)], dtype=bool)
        dropped += int(cache.loc[seen, "problem_key"].nunique())
        kept.append(cache[~seen])
        envs.update({k: dict(v) for k, v in cache_envs.items()})
    joined = [frame.assign(**{WEIGHT_COLUMN: 1.0, FROM_CACHE_COLUMN: False})]
    joined += [c.assign(**{WEIGHT_COLUMN: weight, FROM_CACHE_COLUMN: True}) for c in kept if not c.empty]
    out = pd.concat(joined, ignore_index=True)
    cached = out[out[FROM_CACHE_COLUMN]]
    unranked = (cached["space"] == "cudnn") & (cached["rank_a"] < 0) & (cached["rank_b"] < 0)
    summary = {
        "rows": int(len(cached)),
        # engine configs of no candidate list the cache's model had (ranks unknown): off the shortlist, not learnt
        "rows_without_ranks": int(unranked.sum()),
        "problems": int(cached.groupby(["problem_key", "env_id"]).ngroups) if len(cached) else 0,
        "problems_measured_by_the_sweep": dropped,
        "weight": weight,
    }
    return out, envs, summary


def check_cache_gpu(frame: pd.DataFrame, env: Mapping[str, Any], joined: Mapping[str, int] | None) -> None:
    """Refuse (RecordsError naming the GPUs) caches whose rows were all of another GPU or cuDNN than the records'
    ``env`` that ``frame`` kept: a model ranks one GPU's candidates."""
    from algosel.records.store import RecordsError  # noqa: PLC0415

    if joined and joined["rows"] and not frame[FROM_CACHE_COLUMN].any():
        raise RecordsError(
            f"the runtime cache's measurements are not of the records' GPU and cuDNN ({gpu_slug(env)}): "
            "give records of the GPU the cache was filled on"
        )


def held_out(prep: Prepared) -> np.ndarray:
    """The held-out rows of ``prep``: the fixed test split (:func:`~algosel.learn.evaluate.is_test_shape`), less
    the rows from a runtime cache, which are always trained on."""
    test = is_test_shape(prep.shape)
    if FROM_CACHE_COLUMN in prep.data:
        test &= ~prep.data[FROM_CACHE_COLUMN].to_numpy(dtype=bool)
    return test
