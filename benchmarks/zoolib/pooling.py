"""Ratios pooled over the slots of one process and over processes, with 95% bootstrap intervals (benchmarks/
compare.py's), and the table's lines built on them: verify mode against benchmark mode in processes of their own,
prediction mode pooled over results files (``--pool``), CPU time by thread.

Host-bound steps differ more between processes than within one, so an interval resamples the processes, then the
slots within each.
"""

from __future__ import annotations

import json
from pathlib import Path

from compare import median_interval, paired_ratios, ratio_of_medians

from zoolib.modes import AGAIN, MODES


def slot_ratios(row: dict, mode: str, base: str = "default"):
    """The ratios of ``mode``'s slots to their neighbouring ``base`` slots in one paired row (None: not
    recorded)."""
    return paired_ratios(row.get(f"{mode}_steps_ms"), row.get(f"{base}_steps_ms"))


def pooled_ratio(rows: list[dict], mode: str, resamples: int = 2000, base: str = "default"
                 ) -> tuple[float, float, float] | None:  # fmt: skip
    """The median slot ratio of ``mode`` to ``base`` over the paired rows of one (network, dtype), each from a
    process of its own, with a 95% bootstrap interval that resamples the processes and then the slots within each
    (host-bound steps vary more between processes than within one); None where fewer than 4 slots were recorded."""
    per_process = [r for r in (slot_ratios(row, mode, base) for row in rows) if r is not None]
    if sum(len(r) for r in per_process) < 4:
        return None
    return median_interval(per_process, resamples)


def cross_process_ratio(a_ms: list[float], b_ms: list[float], resamples: int = 2000
                        ) -> tuple[float, float, float] | None:  # fmt: skip
    """The median of ``a_ms`` over the median of ``b_ms``, each a value per process (a step or kernel time of two
    configurations that cannot share a process), with a 95% bootstrap interval that resamples the processes of each
    side; None where either side is empty. With one process on a side the interval holds only the other side's
    spread: host-bound steps vary by up to 15% between processes, so read it with the processes counted."""
    if not len(a_ms) or not len(b_ms):
        return None
    return ratio_of_medians(a_ms, b_ms, resamples)


def config_label(row: dict) -> str:
    """``, least gain 5 us, verify k 3`` for a row made with ``--min-gain-us``, ``--verify-k`` or ``--probe-calls``
    (``, probe calls 0`` then), else ``""``."""
    config = row.get("hook_config")
    if not config:
        return ""
    gain = "" if config.get("min_gain_us") is None else f", least gain {config['min_gain_us']:g} us"
    probe = "" if config.get("probe_calls") is None else f", probe calls {config['probe_calls']}"
    return f"{gain}, verify k {config.get('verify_k', 3)}{probe}"


def own_process_lines(rows: list[dict]) -> list[str]:
    """Per (network, dtype) where both ran: verify mode's warm steps (paired job) against benchmark mode's steady
    steps (benchmark job, a process of its own), in wall time and in kernel time per step, and verify mode's cold
    first pass against benchmark mode's tuning (its first pass), pooled over the processes
    (:func:`cross_process_ratio`)."""
    by: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in rows:
        if "error" not in r and r.get("job") in ("paired", "benchmark") and not r.get("model"):
            # paired rows per hook configuration, each against every benchmark row of its (network, dtype)
            job = r["job"] + (config_label(r) if r["job"] == "paired" else "")
            by.setdefault((r["net"], r["dtype"]), {}).setdefault(job, []).append(r)
    lines = []
    for (net, dtype), jobs in sorted(by.items()):
        bench = jobs.get("benchmark", [])
        for job, paired in sorted(jobs.items()):
            if job != "benchmark" and bench:
                lines.append(own_process_line(net, dtype + job[len("paired") :], paired, bench))
    return lines


def own_process_line(net: str, dtype: str, paired: list[dict], bench: list[dict]) -> str:
    """:func:`own_process_lines`'s line of one (network, dtype, hook configuration)."""
    parts = []
    for what, a_key, b_key in (
        ("steps", "verify_step_ms", "benchmark_step_ms"),
        ("kernels", "verify_kernel_ms", "benchmark_kernel_ms"),
        ("cold / tuning", "verify_cold_first_pass_s", "benchmark_first_pass_s"),
    ):
        got = cross_process_ratio([r[a_key] for r in paired if r.get(a_key)], [r[b_key] for r in bench if r.get(b_key)])
        if got is not None:
            parts.append(f"{what} {got[0]:.3f} ({got[1]:.3f}-{got[2]:.3f})")
    return (f"verify mode (warm) / benchmark mode in processes of their own ({net}, {dtype}; "
            f"{len(paired)} + {len(bench)} processes): " + ", ".join(parts))  # fmt: skip


def pooled_prediction_table(paths: list[Path]) -> str:
    """Markdown: prediction mode against the default and against the default's second slot (``--aa``), and the
    control against the default, pooled per (network, dtype) over the paired rows of every file (each a process of
    its own; rows made with another model than the shipped one are left out), with 95% intervals
    (:func:`pooled_ratio`); then the geomeans. Prediction mode's routes do not depend on verify mode's settings, so
    rows that time at the first call pool with rows that look first."""
    from algosel.records.analysis import geomean as gm

    groups: dict[tuple[str, str], list[dict]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("job") == "paired" and "error" not in r and not r.get("model") and not r.get("hook_config"):
                groups.setdefault((r["net"], r["dtype"]), []).append(r)
    lines = ["| network | dtype | processes | prediction / default | A/A | prediction / A/A slot | control / default |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    ratios: dict[str, list[float]] = {"default": [], AGAIN: []}
    for (net, dtype), group in sorted(groups.items()):
        cells = []
        for mode, base in (("predict", "default"), (AGAIN, "default"), ("predict", AGAIN), ("native", "default")):
            v = pooled_ratio(group, mode, base=base)
            cells.append("" if v is None else f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f})")
            if mode == "predict" and v is not None:
                ratios[base].append(v[0])
        lines.append(f"| {net} | {dtype} | {len(group)} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"geomean prediction / default over {len(ratios['default'])}: {gm(ratios['default']):.3f}; "
                 f"prediction / A/A slot over {len(ratios[AGAIN])}: {gm(ratios[AGAIN]):.3f}")  # fmt: skip
    return "\n".join(lines)


def thread_lines(paired: dict[tuple[str, str], list[dict]], top: int = 3) -> list[str]:
    """Per (network, dtype) and hook mode, the main thread's CPU time per step against the default's and the
    ``top - 1`` other threads' that differ most (the mean over processes of each process's median paired
    difference, ms), where the rows recorded it."""
    lines = []
    for (net, dtype), group in sorted(paired.items()):
        parts = []
        for m in (*MODES[1:], AGAIN):
            per_process = [r[f"{m}_threads_vs_default_ms"] for r in group if r.get(f"{m}_threads_vs_default_ms")]
            if not per_process:
                continue
            names = {k for d in per_process for k in d}
            mean = {k: sum(d.get(k, 0.0) for d in per_process) / len(per_process) for k in names}
            # the main thread (which enqueues the step) always, then the threads that differ most
            others = sorted(((k, v) for k, v in mean.items() if k != "main"), key=lambda kv: -abs(kv[1]))
            biggest = [("main", mean.get("main", 0.0)), *others[: top - 1]]
            parts.append(f"{m} " + ", ".join(f"{k} {v:+.3f}" for k, v in biggest))
        if parts:
            lines.append(f"CPU ms per step against the default's, by thread ({net}, {dtype}): " + "; ".join(parts))
    return lines
