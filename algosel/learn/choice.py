"""What a selector ranks and answers: candidate rows (recorded, live or offline) and the :class:`Choice` of each.

A candidate row is a catalogue row (:func:`candidate_row`): id, space, engine, knobs, heuristic ranks, notes and
workspace. :func:`offline_rows` gives the candidates a problem has without a GPU or records; :func:`choice_of` turns
a ranked row into the :class:`Choice` that :meth:`algosel.learn.selector.Selector.choose` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from algosel.problem import ConvProblem
from algosel.spaces import Candidate, get_space, space_names


@dataclass(frozen=True)
class Choice:
    """One ranked candidate for a problem."""

    candidate_id: str
    space: str
    engine_id: int
    knobs: str
    score: float
    workspace_bytes: int | None
    source: str  # "live", "records" or "nearest:<problem key>"
    #: For a legacy candidate: the ``cudnnConvolution*Algo_t`` name (e.g.
    #: ``CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM``), its C value (``engine_id``) and the math type
    #: (``cudnnMathType_t`` name) to set on the convolution descriptor; empty otherwise.
    cudnn_algo: str = ""
    cudnn_math_type: str = ""
    #: Where ``algosel.predict(..., measure=k)`` timed it on this GPU: the median device time; else None.
    measured_time_ms: float | None = None
    #: Whether the problem lies outside what the model's records cover (:meth:`Selector.coverage`), and why.
    extrapolated: bool = False
    extrapolation: str = ""
    #: The time model's predicted device time of the candidate on this problem; ``None`` for a model without one.
    predicted_time_ms: float | None = None
    #: cuDNN's behaviour notes of an engine config, comma-separated (e.g. ``runtime_compilation``: its plan build
    #: compiles its kernel); empty otherwise or where the list did not record them.
    notes: str = ""


def candidate_row(c: Candidate, workspace_bytes: int = -1) -> dict[str, Any]:
    """A candidate as a catalogue row (``workspace_bytes`` -1: unknown until its plan is built)."""
    return {"candidate_id": c.candidate_id, "space": c.space, "engine_id": c.engine_id, "knobs": c.knobs,
            "rank_a": c.rank_a, "rank_b": c.rank_b, "rank_fallback": c.rank_fallback, "notes": ",".join(c.notes),
            "workspace_bytes": workspace_bytes, "status": "ok"}  # fmt: skip


def offline_rows(problem: ConvProblem, spaces: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The candidates ``problem`` has without a GPU or records (GEMM lowering where the math allows, PyTorch's
    default), of the registered spaces in ``spaces`` (default: all), in registry order."""
    rows = []
    for name in space_names():
        if spaces is not None and name not in spaces:
            continue
        cands = get_space(name).offline_candidates(problem)
        rows += [candidate_row(c, workspace_bytes=0) for c in cands or ()]
    return rows


def choice_of(
    problem: ConvProblem,
    row: Mapping[str, Any],
    score: float,
    source: str,
    extrapolation: str = "",
    predicted_time_ms: float | None = None,
) -> Choice:
    """The :class:`Choice` of a ranked candidate row (``extrapolation``: why the problem lies outside the records)."""
    return Choice(
        candidate_id=row["candidate_id"],
        space=row["space"],
        engine_id=int(row["engine_id"]),
        knobs=row["knobs"] or "",
        score=float(score),
        workspace_bytes=None if row["workspace_bytes"] < 0 else int(row["workspace_bytes"]),
        source=source,
        **_legacy_names(problem, row),
        extrapolated=bool(extrapolation),
        extrapolation=extrapolation,
        predicted_time_ms=predicted_time_ms,
        notes=str(row.get("notes") or ""),
    )


def _legacy_names(problem: ConvProblem, row: Mapping[str, Any]) -> dict[str, str]:
    if row["space"] != "legacy":
        return {}
    from algosel.spaces.cudnn_legacy import algo_enum_name  # noqa: PLC0415

    math_type = (row.get("knobs") or "").removeprefix("math=")
    return {"cudnn_algo": algo_enum_name(problem.direction, int(row["engine_id"])),
            "cudnn_math_type": f"CUDNN_{math_type}"}  # fmt: skip
