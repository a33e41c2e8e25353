"""``algosel.predict``: the fastest candidates for a convolution, for any framework."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from algosel.candidates import DEFAULT_ID, DecisionSource
from algosel.learn.models import MODEL_SPACES, live_available, load_default
from algosel.learn.selector import Choice, Selector
from algosel.problem import ConvProblem
from algosel.spaces import get_space

_selectors: dict[Any, Selector] = {}


def shared_selector(model: str | Path | Selector | None = None, force: bool = False, space: str = "cudnn") -> Selector:
    """The selector ``algosel.predict`` answers with for these arguments: ``model`` itself where it is one, else the
    model directory (``None``: the shipped one of ``space`` for this GPU) loaded once per process."""
    if isinstance(model, Selector):
        return model
    key = (str(model) if model is not None else None, force, space)
    sel = _selectors.get(key)
    if sel is None:
        sel = load_default(force=force, space=space) if model is None else Selector.load(model, force=force)
        _selectors[key] = sel
    return sel


_FIELDS = {f.name for f in dataclasses.fields(ConvProblem)}


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and hasattr(value, "__index__")


def _check_arguments(problem, model, max_workspace_bytes, deterministic, top_k, live, force, measure,
                     verify=0) -> None:  # fmt: skip
    """ValueErrors naming the argument and its value, before any model is loaded.

    The usual values pass on ``type(...) is`` tests alone: a repeated prediction costs a few microseconds, and
    these checks run on every one.
    """
    if problem is not None and type(problem) is not ConvProblem and not isinstance(problem, ConvProblem):
        raise ValueError(
            f"predict() takes a ConvProblem or its fields as keywords (n=, c=, ...), got {problem!r} "
            f"({type(problem).__name__})"
        )
    if model is not None and type(model) is not str and not isinstance(model, (os.PathLike, Selector)):
        raise ValueError(f"predict(model=...) must be a model directory or a Selector, got {model!r}")
    if not (type(top_k) is int and top_k >= 1) and (not _is_int(top_k) or top_k < 1):
        raise ValueError(f"predict(top_k=...) must be an integer >= 1, got {top_k!r}")
    if max_workspace_bytes is not None and not (type(max_workspace_bytes) is int and max_workspace_bytes >= 0):
        if not _is_int(max_workspace_bytes) or max_workspace_bytes < 0:
            raise ValueError(
                f"predict(max_workspace_bytes=...) must be None or an integer number of bytes >= 0, got "
                f"{max_workspace_bytes!r}"
            )
    if type(deterministic) is not bool:
        raise ValueError(f"predict(deterministic=...) must be True or False, got {deterministic!r}")
    if type(force) is not bool:
        raise ValueError(f"predict(force=...) must be True or False, got {force!r}")
    if live is not None and type(live) is not bool:
        raise ValueError(f"predict(live=...) must be None, True or False, got {live!r}")
    if measure != 0 and (not _is_int(measure) or measure < 0):
        raise ValueError(f"measure must be a non-negative integer (candidates to time), got {measure!r}")
    if verify != 0 and (not _is_int(verify) or verify < 0):
        raise ValueError(f"predict(verify=...) must be a non-negative integer (candidates to time), got {verify!r}")
    if verify and measure:
        raise ValueError(f"predict() takes verify= or measure=, not both (got verify={verify!r}, measure={measure!r})")


def predict(problem: ConvProblem | None = None, /, *, model: str | Path | Selector | None = None,
            max_workspace_bytes: int | None = None, deterministic: bool = False, top_k: int = 1,
            live: bool | None = None, force: bool = False, space: str = "cudnn", measure: int = 0,
            measurer: Any = None, verify: int = 0, cache: Any = True, device_probe: Any = None,
            **fields: Any) -> list[Choice]:  # fmt: skip
    """Rank the candidates for a convolution, best first (memoised per problem and arguments).

    ``problem``: a ConvProblem, or its fields as keywords (``n=..., c=..., k=..., h=..., w=..., r=..., s=...``,
    padding, stride, dilation, groups, ``dtype``, ``layout``, ``direction``), not both. ``model``: a model directory
    or Selector (default: the shipped model for this GPU); ``force`` uses one made for another GPU or cuDNN, warning.
    ``max_workspace_bytes`` and ``deterministic`` filter the candidates (:func:`algosel.learn.rules.allowed`);
    ``top_k`` choices are returned. ``live``: rank cuDNN's live list (default: where a GPU and the frontend allow;
    True where they do not is a ValueError saying why). ``space``: ``"cudnn"`` (engine configs, GEMM lowering,
    PyTorch's default) or ``"legacy"`` (the legacy API's algorithms, each choice with ``cudnn_algo`` and
    ``cudnn_math_type``).

    ``verify=k``: as the hook's verify mode, for any framework: on a GPU, time the top ``k`` and (``cudnn`` space)
    PyTorch's default once per problem and environment, return them fastest first (``source`` "measured"; a failed
    candidate last, without a time), then the rest of the ``top_k``; the times are kept in the hook's persistent
    ``cache`` (``True``, a folder, a cache object or ``False``), so a later call, process or the hook times nothing
    again. Without a GPU (``device_probe`` says) it answers as without ``verify``. ``measure=k`` times on every
    call and needs a GPU; ``measurer`` is what times (default: the sweeper with the runtime's timer).

    Returns
    -------
    list of Choice
        ``candidate_id`` (``cudnn:eng..``, ``gemm:fc``, ``gemm:pointwise``, ``pytorch:default`` or
        ``legacy:<ALGO>.<MATH_TYPE>``), space, engine id and knobs, score, workspace bytes where known, source.

    Raises
    ------
    ValueError
        A bad problem or argument (naming it and its value), or no candidate passing the filters.
    """
    _check_arguments(problem, model, max_workspace_bytes, deterministic, top_k, live, force, measure, verify)
    problem = _problem_of(problem, fields)
    if space not in MODEL_SPACES:
        raise ValueError(f"space must be {' or '.join(map(repr, MODEL_SPACES))}, got {space!r}")
    sel = shared_selector(model, force, space)
    if sel.space != space:
        raise ValueError(f"the model {model} selects {sel.space} candidates, not {space}")
    live = _live(sel, live)
    if type(top_k) is not int:  # a numpy integer: the memo keys on plain ints
        top_k = int(top_k.__index__())
    if max_workspace_bytes is not None and type(max_workspace_bytes) is not int:
        max_workspace_bytes = int(max_workspace_bytes.__index__())
    if verify:
        verify = int(verify.__index__())
        device = _timing_device()
        if (device_probe or _cuda_probe()).can_time(device):
            choices = sel.choose(problem, max_workspace_bytes, deterministic, max(top_k, verify), live)
            timed = _verified(problem, choices[:verify], measurer, _cache_of(cache, sel), space == "cudnn")
            return [*timed, *(c for c in choices if c.candidate_id not in {t.candidate_id for t in timed})][:top_k]
    if not measure:
        return sel.choose(problem, max_workspace_bytes, deterministic, top_k, live)  # memoised per arguments
    choices = sel.choose(problem, max_workspace_bytes, deterministic, max(top_k, measure), live)
    return _measured(problem, choices[:measure], measurer)[:top_k]


def _problem_of(problem: ConvProblem | None, fields: dict[str, Any]) -> ConvProblem:
    """The problem ``predict`` was given: a ConvProblem, or its fields as keywords (never both)."""
    if not fields:
        if problem is None:
            raise ValueError("predict() needs a ConvProblem or its fields as keywords (n=, c=, k=, h=, w=, r=, s=...)")
        return problem
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise ValueError(f"predict() got an unknown problem field {unknown[0]!r}; fields: {', '.join(sorted(_FIELDS))}")
    if problem is not None:  # which one counts would be a guess: the caller says
        given = ", ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
        raise ValueError(
            f"predict() takes a ConvProblem or its fields, not both (got a problem and {given}); pass "
            "problem.replace(...) to change a field"
        )
    return ConvProblem(**fields)


def _live(sel: Selector, live: bool | None) -> bool:
    """Whether to rank cuDNN's live list: where it can be had (None), or as asked (True where it cannot: why)."""
    if live is None:
        return live_available(sel)
    if live:  # asked for: say why it cannot be had, rather than fail inside the enumeration
        why = get_space(sel.space).available()
        if why:
            raise ValueError(
                f"predict(live=True): cuDNN's live candidate list cannot be enumerated here ({why}); "
                "live=None ranks it where it can and the records' candidates elsewhere, live=False never does"
            )
    return live


def _measured(problem: ConvProblem, choices: list[Choice], measurer: Any) -> list[Choice]:
    """``choices`` and PyTorch's default, timed here once, fastest first (failures last, untimed)."""
    if not any(c.candidate_id == DEFAULT_ID for c in choices):
        choices = [*choices, _default_choice(choices)]
    rows = _measured_rows(problem, choices, measurer)
    times = {r["candidate_id"]: float(r["time_ms_median"]) for r in rows if r["status"] == "ok"}
    timed = [dataclasses.replace(c, measured_time_ms=times.get(c.candidate_id), source="measured") for c in choices]
    return sorted(timed, key=lambda c: (c.measured_time_ms is None, c.measured_time_ms or 0.0))


def _measured_rows(problem: ConvProblem, choices: list[Choice], measurer: Any,
                   math_mode: str = "caller") -> list[dict[str, Any]]:  # fmt: skip
    """The measurer's rows of ``choices`` on ``problem``, PyTorch's default first where it is among them (its result
    is what the others are checked against); default measurer: the runtime's (TF32 switches: ``math_mode``)."""
    if measurer is None:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise ValueError("measure needs a CUDA GPU (none is visible); predict without it ranks by the model alone")
        from algosel.runtime.policy import DEFAULT_POLICY  # noqa: PLC0415
        from algosel.runtime.verify import runtime_measurer  # noqa: PLC0415

        measurer = runtime_measurer(DEFAULT_POLICY, math=math_mode)
    pairs = []
    for c in sorted(choices, key=lambda c: c.candidate_id != DEFAULT_ID):
        space = get_space(c.space)
        pairs.append((space, space.candidate(c.candidate_id.partition(":")[2], problem.direction)))
    return measurer.measure_candidates(problem, pairs, source="predict")


def _default_choice(choices: list[Choice]) -> Choice:
    return Choice(candidate_id=DEFAULT_ID, space="pytorch", engine_id=-1, knobs="", score=float("nan"),
                  workspace_bytes=0, source=choices[0].source if choices else "none")  # fmt: skip


# ------------------------------------------------------------------------------------------------ verify=k
def _timing_device() -> Any:
    import torch  # noqa: PLC0415

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _cuda_probe() -> Any:
    from algosel.runtime.device import CudaDevice  # noqa: PLC0415

    return CudaDevice()


def _cache_of(cache: Any, sel: Selector) -> Any:
    """The persistent cache ``verify`` keeps its times in: the hook's folder for ``sel``'s environment."""
    if hasattr(cache, "get") and hasattr(cache, "put"):  # a cache object
        return cache
    import torch  # noqa: PLC0415

    if cache is False or not torch.cuda.is_available():  # no GPU to key the folder by
        return None
    from algosel.runtime.cache import RuntimeCache, runtime_environment  # noqa: PLC0415
    from algosel.runtime.native import cache_root  # noqa: PLC0415

    root = cache_root() if cache is True else Path(cache)
    key = (str(root), id(sel))
    if key not in _caches:  # one per folder and model: its decisions are read from disk once
        _caches[key] = RuntimeCache(root, runtime_environment(sel))
    return _caches[key]


_caches: dict[Any, Any] = {}


def _verified(problem: ConvProblem, choices: list[Choice], measurer: Any, cache: Any,
              with_default: bool) -> list[Choice]:  # fmt: skip
    """``choices`` (and PyTorch's default where ``with_default``) with their measured times, fastest first, failures
    last: from ``cache`` where it has them (the hook's measurements count), the rest timed here and added to it."""
    from algosel.runtime.decision import Decision, Reason, keep  # noqa: PLC0415

    hit = cache.get(problem.key) if cache is not None else None
    times = dict(hit.times_ms) if hit is not None and hit.source == DecisionSource.MEASURED else {}
    host_us = dict(hit.host_us) if hit is not None and hit.source == DecisionSource.MEASURED else {}
    if with_default and not any(c.candidate_id == DEFAULT_ID for c in choices):
        choices = [*choices, _default_choice(choices)]
    todo = [c for c in choices if c.candidate_id not in times]
    if todo:
        # PyTorch's default is timed again with what is new: each candidate is checked against the first one timed
        if with_default and all(c.candidate_id != DEFAULT_ID for c in todo):
            todo = [next(c for c in choices if c.candidate_id == DEFAULT_ID), *todo]
        rows = _measured_rows(problem, todo, measurer, math_mode="problem")
        ok = {r["candidate_id"]: r for r in rows if r["status"] == "ok"}
        for c in todo:  # a candidate that failed (or was not timed) is kept as inf: it is not timed again
            row = ok.get(c.candidate_id)
            times[c.candidate_id] = float(row["time_ms_median"]) if row else math.inf
            if row is not None and row.get("host_overhead_us") is not None:
                host_us[c.candidate_id] = float(row["host_overhead_us"])
        best = min(times, key=times.get)
        keep(cache, Decision(problem.key, best, DecisionSource.MEASURED, Reason.FASTEST if best == DEFAULT_ID else "",
                             times, host_us, by="predict"))  # fmt: skip
    timed = [dataclasses.replace(c, measured_time_ms=None if math.isinf(times[c.candidate_id]) else
                                 times[c.candidate_id], source="measured") for c in choices]  # fmt: skip
    return sorted(timed, key=lambda c: (c.measured_time_ms is None, c.measured_time_ms or 0.0))
