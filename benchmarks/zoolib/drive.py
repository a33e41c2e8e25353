"""The zoo's driver: every job in a process of its own (``script --child``), its rows appended to ``--out``; and the
child, which runs one job over its dtypes and prints a ``RESULT`` line per row.

A process per job, because PyTorch caches the plan it picked per shape in a process whatever the benchmark flag
(benchmark mode needs a process of its own), and because host-bound steps differ more between processes than within
one (``--processes N`` runs each job N times, each in a new process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from zoolib.tables import summarize

if TYPE_CHECKING:
    from zoolib.config import ZooConfig

#: The fields of a row the driver prints as it goes.
BRIEF = ("default_step_ms", "predict_vs_default", "verify_vs_default", "native_vs_default", "benchmark_step_ms",
         "error")  # fmt: skip


# ----------------------------------------------------------------------------------------------- the child
def cpu_set(text: str) -> set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def run_child(args, cfg: ZooConfig) -> int:
    """Run ``--job`` on ``--net`` in each of ``--dtype``'s dtypes, in this process: a ``RESULT`` line per dtype (a
    failed dtype's row holds its error; the next one still runs)."""
    if args.cpus:
        os.sched_setaffinity(0, cpu_set(args.cpus))  # before torch starts its threads: they inherit it
    for dtype in args.dtype.split(","):
        try:
            kwargs = {"rounds": args.rounds, "slot_steps": args.slot_steps} if args.job == "paired" else {}
            result = cfg.jobs[args.job](cfg, args.net, dtype, args.device, **kwargs)
            annotate(result, cfg, args.device)
        except Exception as exc:  # noqa: BLE001 - a failed dtype is a result row; the next one still runs
            import traceback

            result = {"net": args.net, "dtype": dtype, "job": args.job,
                      "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}"}  # fmt: skip
        print("RESULT " + json.dumps(result, default=float), flush=True)
    return 0


def annotate(result: dict, cfg: ZooConfig, device: str) -> None:
    """What every row says of where it ran: its process, the model and card, the hook's settings, the compiled
    path."""
    result["process"] = cfg.process
    if cfg.force:
        result["forced_model"] = True
    if name := model_name(cfg):
        result["model_name"] = name  # the model the hook ranked with (H100: the joint model)
    if card := device_name(device):
        result["gpu"] = card  # timings of different cards are never compared
    if (hook_config := cfg.hook_config()) is not None:
        result["hook_config"] = hook_config
    result["compiled_path"] = compiled_path_status()


def model_name(cfg: ZooConfig) -> str | None:
    """The name of the model the hook loads in this process (``--model``, else the shipped one for this GPU)."""
    if cfg.model:
        return Path(cfg.model).name
    try:
        from algosel.learn.models import default_model_dir

        return default_model_dir().name
    except Exception:  # noqa: BLE001 - a row without the name rather than no row
        return None


def device_name(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name()


def compiled_path_status() -> str:
    from algosel.runtime import native

    return native.status()


def missing_compiled_path(device: str, status=compiled_path_status) -> str | None:
    """Why a run on ``device`` would measure the hook without its compiled path (a CUDA device where the extension
    is not built or does not load: every hooked call would take the Python path), else None. ``status()``: the
    compiled path's (``algosel.runtime.native.status``)."""
    if not device.startswith("cuda"):
        return None
    text = status()
    if text.startswith("built") and "does not load" not in text:
        return None
    return f"the compiled path: {text}"


# ---------------------------------------------------------------------------------------------- the driver
def run_order(nets: list[str], jobs: list[str], processes: int) -> list[tuple[str, str, int]]:
    """(job, network, process) in the order they run: network by network, the jobs of each process one after
    another, their order reversed every second process (A B, B A, ...) so that jobs compared across processes
    (verify mode's warm steps in the paired job against benchmark mode's in its own) share the machine's drift.
    With ``warm`` among the jobs the order stays: a warm job reads the cache its process's paired job filled."""
    runs = []
    for net in nets:
        for k in range(processes):
            order = jobs if k % 2 == 0 or any(j.endswith("warm") for j in jobs) else jobs[::-1]
            runs += [(job, net, k) for job in order]
    return runs


def done_rows(out: Path) -> set[tuple[str, str, str, int]]:
    """(job, network, dtype, process) of the rows of ``out`` that hold a result (not an error): what ``--resume``
    does not run again."""
    if not out.is_file():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["job"], r["net"], r["dtype"], r.get("process", 0)) for r in rows if "error" not in r}


def drive(args, cfg: ZooConfig, script: str, summary=None, *, status=compiled_path_status) -> None:
    """Run the jobs, a process each (``script --child``), appending their rows to ``--out``; then print the table
    (``summary(out)``, default :func:`zoolib.tables.summarize`). ``--resume``: jobs whose rows are there already are
    not run again. ``--budget-s``: a job is started only where the time left holds the longest job of this run so
    far (the first: ``cfg.budget_first_job_s``), and is stopped when the budget is spent (an error row, which
    ``--resume`` runs again); a later call with ``--resume`` goes on. ``status``: the compiled path's, which a run on
    a GPU needs (``--python-path`` measures without it)."""
    missing = None if args.python_path else missing_compiled_path(args.device, status)
    if missing:
        raise SystemExit(f"zoo.py: {missing}; build it (algosel build-ext) or pass --python-path to measure without it")
    nets = list(cfg.nets) if args.nets == "all" else args.nets.split(",")
    out = Path(args.out)
    done = done_rows(out) if args.resume else set()
    started, job_times_s = time.perf_counter(), []
    for job, net, process in run_order(nets, args.jobs.split(","), args.processes):
        dtypes = args.dtypes.split(",") if job != "benchmark" or net != "fpn" else ("float32",)
        dtypes = [d for d in dtypes if (job, net, d, process) not in done]
        if not dtypes:
            continue
        timeout_s = args.timeout_s
        if args.budget_s:
            left_s = args.budget_s - (time.perf_counter() - started)
            if left_s < min(max(job_times_s, default=cfg.budget_first_job_s), timeout_s):
                print(f"budget: {args.budget_s:g} s would be passed; stopping before {job} {net} (run again with "
                      f"--resume to go on)", flush=True)  # fmt: skip
                break
            timeout_s = min(timeout_s, left_s)
        env = {"PYTHONUNBUFFERED": "1", **os.environ, **cfg.child_env(process)}
        t0 = time.perf_counter()
        rows = run_job(child_command(args, script, job, net, dtypes), env, timeout_s, job, net, dtypes)
        job_times_s.append(round(time.perf_counter() - t0, 1))
        write_rows(out, rows, job, net, job_times_s[-1])
    print((summary or summarize)(out))


def child_command(args, script: str, job: str, net: str, dtypes: list[str]) -> list[str]:
    """The command of one job's process: one process per (job, network), the dtypes sharing it (their shapes
    differ, so do PyTorch's plans)."""
    return [sys.executable, script, "--child", "--job", job, "--net", net, "--dtype", ",".join(dtypes),
            "--device", args.device, "--rounds", str(args.rounds), "--slot-steps", str(args.slot_steps),
            *(["--cpus", args.cpus] if args.cpus else [])]  # fmt: skip


def run_job(cmd: list[str], env: dict, timeout_s: float, job: str, net: str, dtypes: list[str]) -> list[dict]:
    """The rows of one job's process: its ``RESULT`` lines, and an error row for each dtype without one (the end
    of its stderr, or the timeout that stopped it)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
        text, error = proc.stdout, proc.stderr[-1500:] or "no result"
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        error = f"timed out after {timeout_s:.0f} s"
    rows = [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
    done = {r["dtype"] for r in rows}
    return rows + [{"net": net, "dtype": d, "job": job, "error": error} for d in dtypes if d not in done]


def write_rows(out: Path, rows: list[dict], job: str, net: str, job_s: float) -> None:
    """Append the rows of one job (each with the job's seconds) to ``out``, and print a line of each."""
    for row in rows:
        row["job_s"] = job_s
        with out.open("a") as fh:
            fh.write(json.dumps(row, default=float) + "\n")
        brief = {k: row[k] for k in BRIEF if k in row}
        print(f"{job:9s} {net:20s} {row['dtype']:7s} {job_s:6.1f}s {json.dumps(brief, default=float)[:300]}",
              flush=True)  # fmt: skip
