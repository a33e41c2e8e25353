"""The zoo's table of a results file: a row per (network, dtype, hook configuration), the hook's modes as ratios to
the default's neighbouring slots pooled over the processes, then the geomeans and the lines of :mod:`zoolib.pooling`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from zoolib.modes import AGAIN, MODES, TUNED
from zoolib.pooling import config_label, own_process_lines, pooled_ratio, thread_lines

HEAD = ("| network | dtype | default ms | predict ms (x default, 95% interval) | verify ms (x default, ...) | "
        "control ms (x default, ...) | benchmark mode, paired (x default, ...) | verify / benchmark mode, paired | "
        "benchmark ms (own process) | verify / benchmark | host ms D/P/V/C/T/B | "
        "kernel ms D/P/V/C/T/B | verify cold 1st pass s | benchmark 1st pass s | cold / tuning | "
        "verify warm 1st pass s | benchmark mode 1st pass s, paired | cold / tuning, paired | "
        "1st pass s D/P |")  # fmt: skip


def summarize(path: Path) -> str:
    """The zoo table from a results file (hook modes as ratios to the default's neighbouring slots; host and kernel
    time per step for default / prediction / verify / pass-through control; verify warm against benchmark mode's
    steady step, and verify's cold first pass against benchmark mode's tuning, where both were run)."""
    return summarize_rows([json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()])


def summarize_rows(rows: list[dict]) -> str:
    """:func:`summarize` of rows already read."""
    by, paired = group_rows(rows)
    lines = [HEAD, "|" + "---|" * (HEAD.count("|") - 1)]
    lines += [table_line(net, dtype, r) for (net, dtype), r in sorted(by.items())]
    lines += closing_lines(by, rows)
    lines.extend(own_process_lines(rows))
    lines.extend(thread_lines(paired))
    for r in rows:
        if "error" in r:
            lines.append(f"  failed: {r['job']} {r['net']} {r['dtype']}: {r['error'][-300:]}")
    return "\n".join(lines)


def group_rows(rows: list[dict]) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], list[dict]]]:
    """The table's rows, by (network, dtype and hook configuration): every field of the rows that ran (the paired
    modes' ratios to the default pooled over the processes); and the paired rows of each."""
    by: dict[tuple[str, str], dict] = {}
    paired: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "error" not in r:
            # verify mode timing at a signature's first call (--no-look-first, and every row from before looking
            # first was the default, which has no verify_look_first) is another configuration: a row of its own;
            # benchmark mode's own processes run no verify mode and join the row of their configuration
            first_call = r.get("job") != "benchmark" and not r.get("verify_look_first")
            key = (r["net"], r["dtype"] + (", timing at first call" if first_call else "") + config_label(r))
            by.setdefault(key, {}).update({k: v for k, v in r.items() if k not in ("job",)})
            if r.get("job") == "paired":
                paired.setdefault(key, []).append(r)
    for key, group in paired.items():  # the hook's modes against the default: pooled over the processes
        for m in (*MODES[1:], TUNED, AGAIN):
            pooled = pooled_ratio(group, m)
            if pooled is not None:
                by[key][f"{m}_vs_default"], by[key][f"{m}_interval"] = pooled[0], pooled[1:]
        pooled = pooled_ratio(group, "verify", base=TUNED)  # verify mode against benchmark mode, paired
        if pooled is not None:
            by[key]["verify_vs_tuned"], by[key]["verify_vs_tuned_interval"] = pooled[0], pooled[1:]
        by[key]["processes"] = len(group)
    return by, paired


def table_line(net: str, dtype: str, r: dict) -> str:
    """The table's line of one (network, dtype) from its fields ``r`` (:func:`group_rows`)."""

    def f(k, d=2):
        v = r.get(k)
        return "" if v is None else f"{v:.{d}f}"

    def ratio(a, b):
        return f"{r[a] / r[b]:.3f}" if r.get(a) and r.get(b) else ""

    def interval(m):
        lo_hi = r.get(f"{m}_interval")
        return f", {lo_hi[0]:.3f}-{lo_hi[1]:.3f}" if lo_hi else ""

    hosts = "/".join(f(f"{m}_host_ms", 1) for m in (*MODES, TUNED, "benchmark"))
    kernels = "/".join(f(f"{m}_kernel_ms", 1) for m in (*MODES, TUNED, "benchmark"))
    modes = " | ".join(f"{f(f'{m}_step_ms')} ({f(f'{m}_vs_default', 3)}{interval(m)})" for m in MODES[1:])
    tuned = f"{f('tuned_step_ms')} ({f('tuned_vs_default', 3)}{interval(TUNED)})" if "tuned_step_ms" in r else ""
    verify_tuned = f"{f('verify_vs_tuned', 3)}{interval('verify_vs_tuned')}" if "verify_vs_tuned" in r else ""
    name = net if r.get("processes", 1) == 1 else f"{net} (x{r['processes']} processes)"
    warm = f("verify_warm_first_pass_s")
    if r.get("verify_warm_measured_problems"):  # the cache was not warm: the pass is not a warm one
        warm += f" (not warm: {r['verify_warm_measured_problems']} timed)"
    return (
        f"| {name} | {dtype} | {f('default_step_ms')} | {modes} | {tuned} | {verify_tuned} | "
        f"{f('benchmark_step_ms')} | "
        f"{ratio('verify_step_ms', 'benchmark_step_ms')} | {hosts} | {kernels} | {f('verify_cold_first_pass_s')} | "
        f"{f('benchmark_first_pass_s')} | {ratio('verify_cold_first_pass_s', 'benchmark_first_pass_s')} | "
        f"{warm} | {f('tuned_first_pass_s')} | "
        f"{ratio('verify_cold_first_pass_s', 'tuned_first_pass_s')} | "
        f"{f('default_first_pass_s')}/{f('predict_first_pass_s')} |"
    )


def closing_lines(by: dict[tuple[str, str], dict], rows: list[dict]) -> list[str]:
    """The lines under the table: the geomeans of the hook's modes against the default, benchmark mode's paired
    ratio, verify mode's cold first pass against benchmark mode's tuning, and each A/A ratio."""
    from algosel.records.analysis import geomean as gm

    ratios: dict[str, list[float]] = {m: [] for m in (*MODES[1:], TUNED)}
    cold_ratios: list[float] = []
    for _, r in sorted(by.items()):
        for m, values in ratios.items():
            if f"{m}_vs_default" in r:
                values.append(r[f"{m}_vs_default"])
        for tuning in ("tuned_first_pass_s", "benchmark_first_pass_s"):  # paired where both ran
            if r.get("verify_cold_first_pass_s") and r.get(tuning):
                cold_ratios.append(r["verify_cold_first_pass_s"] / r[tuning])
                break
    errors = sum("error" in r for r in rows)
    lines = ["", f"geomean step time / default over {len(ratios['predict'])} (network, dtype): prediction mode "
             f"{gm(ratios['predict']):.3f}, verify mode {gm(ratios['verify']):.3f}, pass-through control "
             f"{gm(ratios['native']):.3f}; {errors} job(s) failed"]  # fmt: skip
    if ratios[TUNED]:
        lines.append(f"benchmark mode paired (autocast), over {len(ratios[TUNED])}: {gm(ratios[TUNED]):.3f}")
    if cold_ratios:
        lines.append(f"verify mode's cold first pass / benchmark mode's tuning (paired where both ran in one "
                     f"process), over {len(cold_ratios)}: geomean {gm(cold_ratios):.3f}, "
                     f"largest {max(cold_ratios):.3f}")  # fmt: skip
    for (net, dtype), r in sorted(by.items()):
        if f"{AGAIN}_vs_default" in r:
            lo, hi = r.get(f"{AGAIN}_interval") or (math.nan, math.nan)
            lines.append(f"A/A, the default against itself ({net}, {dtype}): {r[f'{AGAIN}_vs_default']:.3f} "
                         f"({lo:.3f}-{hi:.3f})")  # fmt: skip
    return lines
