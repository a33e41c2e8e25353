"""How far each selector's choice is from the best measured candidate, per problem and in aggregate.

A *selector* maps a problem to one candidate. The baselines are read off the records:

- ``heuristic_a`` / ``heuristic_b``: the first engine config of cuDNN's mode A (B) list that ran correctly.
  Frameworks walk the list in order until a plan builds, so a failing rank 0 falls through to rank 1;
- ``pytorch_default``: PyTorch's own convolution with ``cudnn.benchmark = False``;
- ``best``: the fastest correct candidate of any space (engine configs, GEMM lowering, PyTorch's default).

Records of cuDNN's legacy algorithms (space ``legacy``) rank them by the legacy ``cudnnGet*Algorithm_v7`` heuristic
(as ``rank_a``). Alone, they are analysed like the rest (``heuristic_a`` is then the v7 heuristic's choice). Mixed
with engine-config records of the same problems, the heuristics above are read off the engine configs, and two more
columns compare the APIs: ``heuristic_v7`` (the v7 heuristic's choice) and ``best_legacy`` (the fastest legacy
algorithm); ``best`` is then the fastest of everything.

The *time ratio* of a selector on a problem is its candidate's median time over the best one's (1.0 = best).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from algosel.records.environment import gpu_slug

WITHIN = 1.05  # "within 5% of best"


def ok_mask(frame: pd.DataFrame) -> pd.Series:
    """Which rows are candidates that ran correctly and were timed."""
    return (frame["status"] == "ok") & frame["time_ms_median"].notna()


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of candidates that ran correctly and were timed."""
    return frame[ok_mask(frame)]


def _first_by_rank(ok: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per problem, the time and id of the lowest-ranked (by ``column``) correct candidate."""
    # the four columns it reads only: every other column's take costs as much
    ranked = ok.loc[ok[column] >= 0, ["problem_key", column, "time_ms_median", "candidate_id"]]
    ranked = ranked.sort_values(["problem_key", column])
    return ranked.groupby("problem_key")[["time_ms_median", "candidate_id"]].first()


def _fastest(ok: pd.DataFrame) -> pd.DataFrame:
    """Per problem, the time and id of the fastest of the given correct candidates."""
    return ok.loc[ok.groupby("problem_key")["time_ms_median"].idxmin()].set_index("problem_key")[
        ["time_ms_median", "candidate_id"]
    ]


_PER_PROBLEM_COLUMNS = (
    "problem_key", "direction", "dtype", "layout", "source", "candidate_id", "space", "time_ms_median"
)  # fmt: skip


def per_problem(frame: pd.DataFrame, extra: Mapping[str, pd.Series] | None = None) -> pd.DataFrame:
    """One row per problem: the best time and the time of each baseline selector (and of ``extra`` ones).

    ``extra`` maps a selector name to a Series of times indexed by ``problem_key``. Each baseline ``<name>``
    also gets ``<name>_candidate``, the id of the candidate it chose (for listing its worst cases).
    """
    # the columns read below only: a filter or sort takes every column it is given
    ok = frame.loc[ok_mask(frame), [*_PER_PROBLEM_COLUMNS, "rank_a", "rank_b"]]
    if ok.empty:
        raise ValueError("no correct, timed records to analyse")
    g = ok.groupby("problem_key")
    best_idx = g["time_ms_median"].idxmin()
    out = ok.loc[best_idx, list(_PER_PROBLEM_COLUMNS)].set_index("problem_key")
    out = out.rename(columns={"candidate_id": "best_candidate", "space": "best_space", "time_ms_median": "best"})
    legacy = ok["space"] == "legacy"
    # cuDNN's graph API lists rank the engine configs; alone, legacy records' rank_a is the v7 heuristic's.
    ranked = ok[~legacy] if (~legacy).any() else ok
    chosen = {
        "heuristic_a": _first_by_rank(ranked, "rank_a"),
        "heuristic_b": _first_by_rank(ranked, "rank_b"),
        "pytorch_default": _fastest(ok[ok["space"] == "pytorch"]),
        "gemm": _fastest(ok[ok["space"] == "gemm"]),
    }
    if legacy.any() and (~legacy).any():
        chosen["heuristic_v7"] = _first_by_rank(ok[legacy], "rank_a")
        chosen["best_legacy"] = _fastest(ok[legacy])
    for name, picks in chosen.items():
        out[name] = picks["time_ms_median"]
        out[f"{name}_candidate"] = picks["candidate_id"]
    out["gemm_applicable"] = out.index.isin(frame.loc[frame["space"] == "gemm", "problem_key"])
    for name, series in (extra or {}).items():
        out[name] = series
    return out


def geomean(values: pd.Series | np.ndarray) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.exp(np.log(v).mean())) if v.size else float("nan")


def selector_stats(ratios: pd.Series) -> dict[str, float]:
    """Geomean, p95 and worst of time ratios, share within 5% of best, and top-1 share."""
    r = ratios.dropna()
    if r.empty:
        return {"problems": 0, "geomean": np.nan, "p95": np.nan, "worst": np.nan, "within_5pct": np.nan, "top1": np.nan}
    return {
        "problems": int(r.size),
        "geomean": geomean(r),
        "p95": float(np.percentile(r, 95)),
        "worst": float(r.max()),
        "within_5pct": float((r <= WITHIN).mean()),
        "top1": float((r <= 1.0 + 1e-12).mean()),
    }


def comparison_table(table: pd.DataFrame, selectors: list[str]) -> pd.DataFrame:
    """Stats of every selector per direction, per dtype and overall (rows: group x selector)."""
    rows = []
    groups: list[tuple[str, Callable[[pd.DataFrame], pd.Series]]] = [
        ("direction", lambda t: t["direction"]),
        ("dtype", lambda t: t["dtype"]),
    ]
    slices = [("all", "all", table)]
    for label, key in groups:
        for value, part in table.groupby(key(table)):
            slices.append((label, str(value), part))
    for label, value, part in slices:
        for sel in selectors:
            stats = selector_stats(part[sel] / part["best"])
            rows.append({"group": label, "value": value, "selector": sel, **stats})
    return pd.DataFrame(rows)


#: The comparisons of :func:`legacy_comparison`: (label, numerator column, denominator column).
LEGACY_RATIOS: tuple[tuple[str, str, str], ...] = (
    ("v7 heuristic / best legacy algorithm", "heuristic_v7", "best_legacy"),
    ("best legacy algorithm / best of everything", "best_legacy", "best"),
    ("v7 heuristic / best of everything", "heuristic_v7", "best"),
    ("graph API mode A / best of everything", "heuristic_a", "best"),
)


def legacy_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """On problems measured in both APIs (a :func:`per_problem` table of mixed records): how far the legacy v7
    heuristic is from the best legacy algorithm, and the best legacy algorithm from the best of every candidate
    (engine configs, GEMM lowering, PyTorch's default), overall and per direction and dtype."""
    if "best_legacy" not in table:
        raise ValueError("the records hold no legacy algorithms next to engine configs of the same problems")
    both = table.dropna(subset=["best_legacy", "heuristic_a"])
    rows = []
    slices = [("all", "all", both)] + [(g, str(v), part) for g in ("direction", "dtype") for v, part in both.groupby(g)]
    for group, value, part in slices:
        for label, num, den in LEGACY_RATIOS:
            rows.append({"group": group, "value": value, "comparison": label, **selector_stats(part[num] / part[den])})
    return pd.DataFrame(rows)


def summarize(frame: pd.DataFrame, worst: int = 10) -> str:
    """The text report of ``algosel summarize``."""
    table = per_problem(frame)
    selectors = ["heuristic_a", "heuristic_b", "pytorch_default"]
    comp = comparison_table(table, selectors)
    lines = [
        f"{frame['problem_key'].nunique()} problems ({frame['case_key'].nunique()} cases), "
        f"{len(frame)} records, {int((frame['status'] != 'ok').sum())} failures "
        f"({', '.join(f'{k} {v}' for k, v in frame.loc[frame['status'] != 'ok', 'status'].value_counts().items())})",
        "",
        "Time of each selector's choice / best measured candidate (geomean; share within 5% of best):",
    ]
    shown = comp.copy()
    for col in ("geomean", "p95", "worst"):
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    for col in ("within_5pct", "top1"):
        shown[col] = shown[col].map(lambda v: f"{100 * v:.1f}%")
    lines.append(shown.to_string(index=False))
    app = table[table["gemm_applicable"]]
    wins = (app["best_space"] == "gemm").sum()
    gain = app["pytorch_default"] / app["best"]
    lines += [
        "",
        f"GEMM lowering applies to {len(app)} problems and is the best candidate on {wins} of them "
        f"(speedup of the best over PyTorch's default there: geomean {geomean(gain):.2f}x, max {gain.max():.1f}x).",
        "",
        f"Best candidate by space: {table['best_space'].value_counts().to_dict()}",
        "",
    ]
    if "best_legacy" in table:
        comp_legacy = legacy_comparison(table)
        overall = comp_legacy[comp_legacy["group"] == "all"]
        lines.append(f"Legacy API ({int(overall['problems'].iloc[0])} problems measured in both APIs):")
        for _, r in overall.iterrows():
            lines.append(f"  {r['comparison']:45s} geomean {r['geomean']:.3f}  p95 {r['p95']:.2f}  "
                         f"within 5% {100 * r['within_5pct']:.1f}%  worst {r['worst']:.1f}x")  # fmt: skip
        lines.append("")
    for sel in selectors:
        ratio = (table[sel] / table["best"]).sort_values(ascending=False).head(worst)
        lines.append(f"Worst {len(ratio)} cases of {sel}:")
        for key, r in ratio.items():
            best = f"{table.at[key, 'best_candidate']}, {table.at[key, 'best']:.4f} ms"
            lines.append(f"  {r:7.2f}x  {key}  (best: {best})")
        lines.append("")
    return "\n".join(lines)


def summarize_per_gpu(frame: pd.DataFrame, envs: Mapping[str, Mapping], worst: int = 10) -> str:
    """``algosel summarize``: :func:`summarize` per GPU x cuDNN (candidates' times are comparable on one only),
    each table after the environments it covers."""
    slugs = {e: gpu_slug(env) for e, env in envs.items()}
    lines = []
    for slug in sorted(set(slugs.values())):
        mine = [e for e, s in slugs.items() if s == slug]
        if len(set(slugs.values())) > 1:
            lines.append(f"== {slug}")
        for e in mine:
            env = envs[e]
            lines.append(
                f"environment {env['env_id']}: {env.get('gpu_name')}, cuDNN {env.get('cudnn')}, "
                f"torch {env.get('torch')}, driver {env.get('driver')}"
            )
        lines.append(summarize(frame[frame["env_id"].isin(mine)], worst=worst))
    return "\n".join(lines)
