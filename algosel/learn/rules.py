"""Which candidates a selector scores and which it may choose: the shortlist rule and the filters.

Both are written once here and used by training, evaluation and prediction alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd

#: Engine configs outside the first ``SHORTLIST_RANK`` of both of cuDNN's lists are not scored (see
#: :func:`on_shortlist`).
SHORTLIST_RANK = 8


def on_shortlist(space: Any, rank_a: Any, rank_b: Any, shortlist_rank: int | None = SHORTLIST_RANK) -> Any:
    """Whether a candidate is scored: every candidate of a space other than ``cudnn`` (GEMM lowering, PyTorch's
    default, legacy algorithms), and the engine configs ranked below ``shortlist_rank`` in cuDNN's mode A or mode
    B list (``None``: all). Works on scalars (one row) and on arrays or Series (a frame's columns).

    Cross-validation on the training shapes of the H200 records gave the same geomean ratio for shortlists of 4,
    8, 16 and every candidate (1.085), 1.089 for 2: the model's pick is almost always near the top of one of
    the two lists, and scoring a fifth of the rows makes a prediction several times cheaper.
    """
    if shortlist_rank is None:
        return np.ones(np.shape(space), dtype=bool) if np.ndim(space) else True
    return (
        (space != "cudnn") | ((rank_a >= 0) & (rank_a < shortlist_rank)) | ((rank_b >= 0) & (rank_b < shortlist_rank))
    )


def shortlist_mask(data: pd.DataFrame, shortlist_rank: int | None = SHORTLIST_RANK) -> np.ndarray:
    """:func:`on_shortlist` of every row of a records frame."""
    return np.asarray(on_shortlist(data["space"], data["rank_a"], data["rank_b"], shortlist_rank), dtype=bool)


def allowed(
    row: Mapping[str, Any],
    direction: str,
    dtype: str,
    blocked: Collection[tuple[int, str, str]] = (),
    max_workspace_bytes: int | None = None,
    deterministic: bool = False,
    numeric_notes_recorded: bool = False,
) -> bool:
    """Whether a selector may choose a candidate row for a problem of ``direction`` and ``dtype``.

    - engine configs of an engine that gave a wrong result in that direction and dtype (``blocked``) never;
    - a candidate measured failing on this very problem never (one over the sweep's workspace limit may be);
    - one known to need more than ``max_workspace_bytes`` not;
    - ``deterministic``: GEMM lowering and PyTorch's default (deterministic under
      ``torch.backends.cudnn.deterministic``); legacy algorithms the v7 heuristic lists as deterministic; engine
      configs only where numerical notes were recorded and say so. The frontend of the shipped records (1.32)
      does not expose numerical notes, so ``deterministic=True`` never picks an engine config with those models.
    """
    space = row["space"]
    if space == "cudnn" and (int(row["engine_id"]), direction, dtype) in blocked:
        return False
    if row.get("status", "ok") not in ("ok", "workspace_exceeded"):
        return False
    ws = row.get("workspace_bytes")
    if max_workspace_bytes is not None and ws is not None and ws > max_workspace_bytes:
        return False
    if deterministic and space == "cudnn":
        return numeric_notes_recorded and "nondeterministic" not in (row.get("notes") or "").split(",")
    if deterministic and space == "legacy":
        # The v7 heuristic states determinism for the algorithms it lists; unlisted ones are unknown.
        return row["rank_a"] >= 0 and "nondeterministic" not in (row.get("notes") or "").split(",")
    return True
