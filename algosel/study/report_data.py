"""The report's data: the selectors it can show, and everything it shows computed once from records and a model.

:func:`compare` loads records (and a model) and returns a :class:`Comparison`: the per-problem table of each
selector's time and candidate (with a model directory, the model's held-out test shapes as ``algosel evaluate``
judges them, :func:`algosel.learn.evaluate.held_out_table`; without one, every problem of the records), the network
totals of the suites in the records, and notes on what was left out. :mod:`algosel.study.report_figures` draws it
and :mod:`algosel.study.report_html` writes it as a page.

Heavy modules (pandas, LightGBM) are imported inside the functions that need them, so that the command line, which
imports this module to build its parser, stays quick to start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from algosel.learn.selector import Selector

#: the command-line parser does not import the evaluation stack; a test checks that both agree).
KNOWN_SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default", "gemm_else_a")
#: Shown by default, in this order (the model first, where a model directory is given).
DEFAULT_SELECTORS = ("model", "heuristic_a", "heuristic_b", "pytorch_default")
LABELS = {
    "model": "algosel model",
    "heuristic_a": "cuDNN heuristic mode A",
    "heuristic_b": "cuDNN heuristic mode B",
    "pytorch_default": "PyTorch default",
    "gemm_else_a": "GEMM lowering where it applies, else mode A",
}
#: One colour per selector, the same in every figure.
DEFAULT_WORST = 10


class ReportError(ValueError):
    """Arguments the report cannot use (an unknown selector, the model without a model directory, ...).

    A ValueError, like :class:`~algosel.records.RecordsError` and :class:`~algosel.learn.selector.SelectorError`, so
    that the command line prints it as one line.
    """


def check_selectors(selectors: Iterable[str] | None, with_model: bool) -> list[str]:
    """The selectors to compare, validated: known names, no duplicates, ``model`` only with a model.

    ``None`` gives :data:`DEFAULT_SELECTORS` (without ``model`` when there is no model).
    """
    if selectors is None:
        return [s for s in DEFAULT_SELECTORS if with_model or s != "model"]
    if isinstance(selectors, str):  # a bare string would be taken apart into letters
        selectors = [selectors]
    chosen: list[str] = []
    for name in selectors:
        if name not in KNOWN_SELECTORS:
            raise ReportError(f"unknown selector {name!r}; choose from {', '.join(KNOWN_SELECTORS)}")
        if name == "model" and not with_model:
            raise ReportError("selector 'model' needs a model directory (--model DIR)")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ReportError("no selector to compare; choose from " + ", ".join(KNOWN_SELECTORS))
    return chosen


def cudnn_version(code: Any) -> str:
    """cuDNN's integer version (91900) as text (9.19.0); anything else as it is."""
    try:
        value = int(code)
    except (TypeError, ValueError):
        return str(code)
    return f"{value // 10000}.{value % 10000 // 100}.{value % 100}" if value >= 10000 else str(value)


# --------------------------------------------------------------------------------------------------- data
@dataclass
class Comparison:
    """What the report shows, computed once (:func:`compare`) and rendered by :func:`build_report`."""

    table: pd.DataFrame  # one row per compared problem: best and each selector's time (ms) and candidate
    selectors: list[str]
    held_out: bool  # True: the model's held-out test problems; False: every problem of the records
    whole_networks: pd.DataFrame  # network totals over every recorded call (selectors other than the model)
    held_out_networks: pd.DataFrame | None  # with a model: totals over the calls of held-out shapes only
    environments: list[dict[str, Any]]
    records: int
    problems: int  # in the records (of the environment compared)
    notes: list[str] = field(default_factory=list)


def compare(
    data_dirs: str | Path | Sequence[str | Path],
    model_dir: str | Path | None = None,
    selectors: Iterable[str] | None = None,
    force: bool = False,
) -> Comparison:
    """Load records (and a model) and compute everything the report shows.

    Raises :class:`~algosel.records.RecordsError` for a missing or unreadable data directory,
    :class:`~algosel.learn.selector.SelectorError` for a missing or corrupt model directory, or one made for another
    GPU or cuDNN than the records' unless ``force`` (as ``algosel evaluate``), and :class:`ReportError` for bad
    ``selectors``.
    """
    from algosel.learn.evaluate import add_gemm_else_a, held_out_table
    from algosel.learn.ranker import fingerprint
    from algosel.records.analysis import per_problem

    chosen = check_selectors(selectors, with_model=model_dir is not None)
    sel, frame, envs, notes = _load(data_dirs, model_dir, force)
    used_envs = [envs[e] for e in sorted(frame["env_id"].unique())]
    everything = add_gemm_else_a(per_problem(frame))
    if sel is not None:
        if fingerprint(frame) != sel.manifest.get("data_fingerprint"):
            notes.append(
                "these records differ from the model's training records: the held-out split is recomputed on "
                "them, and shapes the model was trained on may be among the test shapes"
            )
        table = held_out_table(sel, frame, envs)
    else:
        table = everything

    # Baselines are not learned, so every recorded call of a network can be summed for them. The model's total
    # over a whole network would include shapes it was trained on: only held-out calls are summed for it (and for
    # every other selector alike).
    whole = suite_totals(frame, everything, [s for s in chosen if s != "model"])
    return Comparison(
        table=table,
        selectors=chosen,
        held_out=sel is not None,
        whole_networks=whole,
        held_out_networks=suite_totals(frame, table, chosen) if sel is not None else None,
        environments=used_envs,
        records=len(frame),
        problems=int(frame["problem_key"].nunique()),
        notes=notes,
    )


def _load(
    data_dirs: str | Path | Sequence[str | Path], model_dir: str | Path | None, force: bool
) -> tuple[Selector | None, pd.DataFrame, dict[str, dict[str, Any]], list[str]]:
    """The model (or None), the records of their main environment, every environment by id, and notes on them."""
    from algosel.learn.models import check_records_environment
    from algosel.learn.selector import Selector
    from algosel.records.store import load_records, main_environment

    # The model first: a bad model directory is reported before seconds are spent reading records.
    # force: the report runs anywhere, and the model is judged on the records of its own GPU.
    sel = Selector.load(model_dir, force=True) if model_dir is not None else None
    data = [data_dirs] if isinstance(data_dirs, (str, Path)) else list(data_dirs)
    frame, envs = load_records(*data)
    notes = []
    # One GPU x cuDNN at a time: a problem's candidates are only comparable when measured on the same one.
    kept, records_env = main_environment(frame, envs)
    if sel is not None:  # the model's picks priced on another GPU's records would mean nothing
        other = check_records_environment(sel.manifest, model_dir, records_env, force)
        if other:
            notes.append(f"scored on records of another environment (--force): {', '.join(other)}")
    if len(kept) < len(frame):
        notes.append(f"{len(frame) - len(kept):,} records of other environments left out")
    if set(kept["space"].unique()) == {"legacy"}:
        notes.append(
            "these records are of cuDNN's legacy algorithms only: 'cuDNN heuristic mode A' is here the legacy "
            "API's cudnnGet*Algorithm_v7 ranking, and the other baselines do not apply"
        )
    return sel, kept, envs, notes


def suite_totals(frame: pd.DataFrame, table: pd.DataFrame, selectors: Sequence[str]) -> pd.DataFrame:
    """fwd + bwd totals per network and dtype (:func:`algosel.learn.evaluate.network_totals`) of the network suites in
    the records (``source`` ``suite:<network>``), summed over the problems of ``table`` only.

    Calls whose problem is not in ``table`` are counted in ``missing_problems``; networks with no call in it are
    left out. Where a selector had no correct candidate, PyTorch's default stands in, as in a framework.
    """
    import pandas as pd

    from algosel.learn.evaluate import with_pytorch_fallback
    from algosel.learn.evaluate_networks import network_totals
    from algosel.measure.suites import load_suites

    networks = sorted(s.removeprefix("suite:") for s in frame["source"].unique() if s.startswith("suite:"))
    if not networks:
        return pd.DataFrame(columns=["network", "size", "dtype", "missing_problems", "calls", "best_ms"])
    tables = dict.fromkeys(networks, with_pytorch_fallback(table, selectors))
    totals = network_totals(tables, load_suites(), sorted(frame["dtype"].unique()), selectors)
    return totals[totals["calls"] > 0].reset_index(drop=True)


def ratios(table: pd.DataFrame, selectors: Sequence[str]) -> pd.DataFrame:
    """Per problem, each selector's time over the best measured time (1.0 = the best)."""
    return table[list(selectors)].div(table["best"], axis=0)


def worst_cases(table: pd.DataFrame, selector: str, n: int = DEFAULT_WORST) -> pd.DataFrame:
    """The ``n`` problems where ``selector`` is furthest from the best, worst first."""
    ratio = (table[selector] / table["best"]).nlargest(n)
    rows = table.loc[ratio.index]
    return rows.assign(ratio=ratio)[
        ["ratio", "source", f"{selector}_candidate", selector, "best_candidate", "best"]
    ].rename(columns={f"{selector}_candidate": "chosen_candidate", selector: "chosen_time_ms", "best": "best_time_ms"})
