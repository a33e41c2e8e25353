"""The zoo benchmark's driver on the CPU (benchmarks/zoo.py with ALGOSEL_ZOO_SMOKE=1): a process per job, one
result row per (network, dtype) with every measurement the docs' table reads, and the table itself."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


def test_the_paired_job_writes_a_row_per_dtype_and_the_table(tmp_path):
    """FPN (several input sizes a step) in both dtypes; a network of one input size (MyNet) is
    test_repeated_processes_are_pooled_in_the_table's."""
    out = tmp_path / "zoo.jsonl"
    env = {**os.environ, "ALGOSEL_ZOO_SMOKE": "1", "OMP_NUM_THREADS": "1", "ALGOSEL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--nets", "fpn", "--jobs", "paired", "--device",
           "cpu", "--rounds", "2", "--slot-steps", "1", "--timeout-s", "400", "--out", str(out),
           "--model", str(REPO / "models" / "joint-h100-h200-cudnn91900")]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["net"], r["dtype"]) for r in rows) == [("fpn", "amp"), ("fpn", "float32")]
    for r in rows:
        assert "error" not in r, r["error"]
        assert r["job"] == "paired" and r["model"] == str(REPO / "models" / "joint-h100-h200-cudnn91900")
        assert r["inputs"] == r["slot_steps"] == 3  # the smoke run's three FPN sizes, a step each a slot
        modes = ("default", "predict", "verify", "native", *(("tuned",) if r["dtype"] == "amp" else ()))
        for mode in modes:
            assert len(r[f"{mode}_steps_ms"]) == 2 and r[f"{mode}_step_ms"] > 0 and r[f"{mode}_host_ms"] > 0
            # host time per step from the same rotated slots as the step times
            assert len(r[f"{mode}_hosts_ms"]) == 2 and min(r[f"{mode}_hosts_ms"]) <= r[f"{mode}_host_ms"]
            assert r[f"{mode}_threads_ms"]["main"] > 0  # CPU time by thread, from the same slots
            if mode != "default":
                assert "main" in r[f"{mode}_threads_vs_default_ms"]
        assert ("tuned_step_ms" in r) == (r["dtype"] == "amp")  # benchmark mode paired in autocast steps only
        assert r["predict_vs_default"] > 0 and r["verify_cold_first_pass_s"] > 0
        assert r["predict_settled_after_steps"] >= r["inputs"] + 2 and r["predict_model_load_s"] > 0
        assert sum(r["predict_routes"].values()) > 0  # the hook planned the steps' convolutions
        assert r["predict_blocks_aside"] >= 0 and isinstance(r["predict_stats"], dict)
        assert r["verify_looks"] == [0, 0, 0, 0]  # CPU: no look at a device can tell, so none counts
    assert "geomean step time / default over 2 (network, dtype)" in res.stdout
    assert "benchmark mode paired (autocast), over 1:" in res.stdout
    assert "| fpn | float32 |" in res.stdout
    head = "CPU ms per step against the default's, by thread (fpn, float32): predict "
    by_thread = [ln for ln in res.stdout.splitlines() if ln.startswith(head)]
    assert len(by_thread) == 1 and "): predict main " in by_thread[0] and "; verify main " in by_thread[0]


def test_repeated_processes_are_pooled_in_the_table(tmp_path):
    """``--processes 2``: each job twice, each in a new process pinned by ``--cpus``; the table pools the two.
    ``--dtypes float32``: that dtype's steps alone; ``--aa``: the default a second time in the rotation.
    ``--no-look-first``: verify mode times at a signature's first call, its first pass alone (no passes counted
    until every signature is decided: the first passes are the cold job's too), in a row of its own configuration
    (as results from before looking first was the default)."""
    out = tmp_path / "zoo.jsonl"
    env = {**os.environ, "ALGOSEL_ZOO_SMOKE": "1", "OMP_NUM_THREADS": "1", "ALGOSEL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--nets", "mynet", "--jobs", "paired", "--device",
           "cpu", "--rounds", "2", "--slot-steps", "1", "--processes", "2", "--cpus", "0", "--dtypes", "float32",
           "--aa", "--no-look-first", "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["dtype"], r["process"]) for r in rows) == [("float32", 0), ("float32", 1)]
    assert all("error" not in r and r["verify_cold_first_pass_s"] > 0 for r in rows)
    assert all(r["inputs"] == r["slot_steps"] == 1 for r in rows)  # one input size: one step a slot
    # a row apart from verify mode's other configuration, pooled over the two processes
    assert "| mynet (x2 processes) | float32, timing at first call |" in res.stdout
    assert all(r["verify_look_first"] is False and "verify_cold_passes" not in r for r in rows)
    # --aa: the default again, in a slot of its own, paired with the default like the hook's modes
    assert all(len(r["again_steps_ms"]) == len(r["default_steps_ms"]) == 2 for r in rows)
    assert "A/A, the default against itself (mynet, float32, timing at first call): " in res.stdout


def _cold(tmp_path, *flags: str) -> tuple[dict[str, dict], str]:
    """The cold job on MyNet (CPU, smoke sizes): its rows by dtype, and what it printed."""
    out = tmp_path / f"zoo{len(flags)}.jsonl"
    env = {**os.environ, "ALGOSEL_ZOO_SMOKE": "1", "OMP_NUM_THREADS": "1", "ALGOSEL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--nets", "mynet", "--jobs", "cold", "--device",
           "cpu", *flags, "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return {r["dtype"]: r for r in map(json.loads, out.read_text().splitlines())}, res.stdout


@pytest.fixture(scope="module")
def cold_job(tmp_path_factory):
    return _cold(tmp_path_factory.mktemp("cold"))


def test_the_cold_job_writes_the_first_passes_and_their_ratio_to_tuning(cold_job):
    rows, stdout = cold_job
    assert sorted(rows) == ["amp", "float32"]
    for dtype, r in rows.items():
        assert "error" not in r and r["job"] == "cold"
        for k in ("default_first_pass_s", "verify_cold_first_pass_s", "predict_first_pass_s"):
            assert r[k] > 0, k
        assert ("tuned_first_pass_s" in r) == (dtype == "amp")  # benchmark mode's tuning in the same process
        assert "predict_step_ms" not in r  # no steady-state rotation
    ratio = rows["amp"]["verify_cold_first_pass_s"] / rows["amp"]["tuned_first_pass_s"]
    assert f"over 1: geomean {ratio:.3f}, largest {ratio:.3f}" in stdout


def test_looking_first_counts_verify_mode_s_cold_cost_until_every_signature_is_decided(cold_job, monkeypatch):
    """Verify mode's executor looks before timing (the default); the cold job counts its passes until nothing
    is left undecided (on the CPU nothing is timed, so one pass), and the row says so. ``--no-look-first`` (the
    first pass alone, in a row of its own) is test_repeated_processes_are_pooled_in_the_table's."""
    looking, stdout = cold_job
    assert "| mynet | float32 |" in stdout
    row = looking["float32"]
    assert row["verify_look_first"] is True and row["verify_cold_passes"] == 1
    assert row["verify_cold_first_pass_s"] == row["verify_cold_raw_s"] > 0 and row["default_steady_pass_s"] > 0
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    passes = iter([2, 1, 0])  # undecided signatures after each pass: the third pass decides the last
    monkeypatch.setattr(zoo, "undecided_count", lambda ctx: next(passes))
    monkeypatch.setattr(zoo, "wall_s", lambda step, c, n, sync: 2.0 if c is ctx["verify"] else 0.5)
    ctx = {"verify": object(), "default": object()}
    cold = {"verify_cold_first_pass_s": 3.0}
    zoo.settle_verify(None, ctx, 1, None, cold)
    # three passes (3 s, then 2 s twice), less the default's steady pass (0.5 s) for the two after the first
    assert cold == {"verify_cold_first_pass_s": 6.0, "verify_cold_passes": 3, "verify_cold_raw_s": 7.0,
                    "default_steady_pass_s": 0.5}  # fmt: skip


def test_an_unknown_dtype_is_one_line_naming_it(tmp_path):
    zoo = str(REPO / "benchmarks" / "zoo.py")
    cmd = [sys.executable, zoo, "--dtypes", "float32,bf16", "--out", str(tmp_path / "z")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and "--dtypes: unknown bf16 (choose from float32,amp)" in res.stderr
    assert not (tmp_path / "z").exists()


def test_the_rotation_runs_with_the_heap_frozen_and_thaws_it_after(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gc

    import zoo

    seen = []
    times = zoo.rotate(lambda i: seen.append(gc.get_freeze_count()), {"a": contextlib.nullcontext}, 2, 1,
                       lambda: None)  # fmt: skip
    assert len(times["a"]) == 2 and min(seen) > 0  # the objects alive before it: out of the collector's reach
    assert gc.get_freeze_count() == 0


def test_pooled_ratio_resamples_processes_as_well_as_slots(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    steady = {"default_steps_ms": [10.0] * 8, "predict_steps_ms": [10.2] * 8}
    median, lo, hi = zoo.pooled_ratio([steady, steady], "predict")
    assert median == pytest.approx(1.02) and lo == pytest.approx(1.02) and hi == pytest.approx(1.02)
    # two processes that disagree (0.96 and 1.04 in every slot): the interval spans both, the median sits between
    apart = [{"default_steps_ms": [10.0] * 8, "predict_steps_ms": [t] * 8} for t in (9.6, 10.4)]
    median, lo, hi = zoo.pooled_ratio(apart, "predict")
    assert lo == pytest.approx(0.96) and hi == pytest.approx(1.04) and lo <= median <= hi
    assert zoo.pooled_ratio([{"default_steps_ms": [1.0], "predict_steps_ms": [1.0]}], "predict") is None
    assert zoo.cpu_set("0-2,5") == {0, 1, 2, 5}


def test_benchmark_mode_paired_switches_benchmark_on_and_tf32_off_and_restores_them(monkeypatch):
    """The paired benchmark mode: cudnn.benchmark on, cuDNN's TF32 switch off (a plan key of its own for float16
    convolutions) inside its steps, the caller's switches after; verify mode is compared with it slot by slot."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import torch
    import zoo

    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        with zoo.mode_context(zoo.TUNED, None)():
            assert (cudnn.benchmark, cudnn.allow_tf32) == (True, False)
        assert (cudnn.benchmark, cudnn.allow_tf32) == (False, True)
    row = {"tuned_steps_ms": [10.0] * 4, "verify_steps_ms": [9.0] * 4, "default_steps_ms": [12.0] * 4}
    assert zoo.pooled_ratio([row], "verify", base=zoo.TUNED)[0] == pytest.approx(0.9)


def test_each_repeated_process_verifies_into_a_cache_of_its_own(monkeypatch):
    """So that every process's cold first pass is cold; the first process's cache is the one the warm job reads."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    class Hook:
        def enabled(self, **config):
            return config

    for process, folder in ((0, "zoo-verify"), (1, "zoo-verify-p1"), (2, "zoo-verify-p2")):
        monkeypatch.setattr(zoo, "PROCESS", process)
        assert zoo.mode_context("verify", Hook())()["cache"].name == folder


def test_the_least_gain_and_k_reach_the_modes_that_decide_and_a_cache_folder_of_their_own(monkeypatch):
    """``--min-gain-us`` and ``--probe-calls`` go to prediction and verify mode only (the native mode routes every
    call whatever the gain), ``--verify-k`` to verify mode; their decisions land in folders apart from the default
    configuration's."""
    import math

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    class Hook:
        def enabled(self, **config):
            return config

    monkeypatch.setattr(zoo, "PROCESS", 0)
    monkeypatch.setattr(zoo, "MIN_GAIN_US", 5.0)
    monkeypatch.setattr(zoo, "VERIFY_K", 6)
    predict, verify, native = (zoo.mode_context(m, Hook())() for m in ("predict", "verify", "native"))
    assert (predict["min_gain_us"], verify["min_gain_us"], native["min_gain_us"]) == (5.0, 5.0, math.inf)
    assert verify["verify"] == 6 and "verify" not in predict
    assert (predict["cache"].name, verify["cache"].name) == ("zoo-predict-g5.0-k6", "zoo-verify-g5.0-k6")
    monkeypatch.setattr(zoo, "PROBE_CALLS", 0)
    predict, native = zoo.mode_context("predict", Hook())(), zoo.mode_context("native", Hook())()
    assert predict["probe_calls"] == 0 and "probe_calls" not in native
    assert predict["cache"].name == "zoo-predict-g5.0-k6-probe0"
    monkeypatch.setattr(zoo, "PROBE_CALLS", None)
    monkeypatch.setattr(zoo, "MIN_GAIN_US", None)
    monkeypatch.setattr(zoo, "VERIFY_K", 3)
    predict = zoo.mode_context("predict", Hook())()
    assert "min_gain_us" not in predict and "probe_calls" not in predict and predict["cache"].name == "zoo-predict"
    row = {"hook_config": {"min_gain_us": 5.0, "verify_k": 3, "probe_calls": 0}}
    assert zoo.config_label(row) == ", least gain 5 us, verify k 3, probe calls 0"


def test_every_mode_takes_every_place_of_the_rotation_and_follows_every_other(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    modes = ["default", "predict", "verify", "native", "again"]
    orders = [zoo.round_order(modes, r) for r in range(200)]
    assert orders[0] == modes and orders[1] == modes[::-1]  # a pair of rounds: ABBA
    assert all(orders[r + 1] == orders[r][::-1] for r in range(0, 200, 2))
    assert all(sorted(o) == sorted(modes) for o in orders)
    assert orders == [zoo.round_order(modes, r) for r in range(200)]  # seeded: every run rotates alike
    for m in modes:
        assert {o.index(m) for o in orders} == set(range(len(modes)))
        assert {o[o.index(m) - 1] for o in orders if o.index(m) > 0} == set(modes) - {m}


def test_thread_cpu_places_cpu_time_on_the_thread_that_spent_it(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import threading
    import time

    import zoo

    def spin(seconds):
        # on the thread's own CPU clock, not wall time: a preempted thread on a loaded machine still spends `seconds`
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    spun, release = threading.Event(), threading.Event()

    def work():
        spin(0.05)
        spun.set()
        release.wait(10)  # alive (and listed) until the main thread has read the clocks

    before = zoo.thread_cpu_ns()
    assert "main" in before
    spin(0.05)
    worker = threading.Thread(target=work)
    worker.start()
    assert spun.wait(10)
    mid = zoo.thread_cpu_ns()  # after the worker spun, while it lives: listed under its name, apart from main
    release.set()
    worker.join()
    assert mid["main"] - before["main"] >= 40e6
    # the worker's 50 ms of spinning, under a name of its own (per name: a pool thread ending meanwhile cannot hide it)
    assert max(v - before.get(k, 0) for k, v in mid.items() if k != "main") >= 40e6
    slots = {
        "default": [{"main": 1.0, "w": 0.5}, {"main": 2.0, "w": 0.5}, {"main": 1.0}],
        "predict": [{"main": 1.2, "w": 0.5}, {"main": 2.1, "w": 0.6}, {"main": 1.3, "w": 0.1}],
    }
    assert zoo.thread_deltas_ms(slots, "predict") == {"main": pytest.approx(0.2), "w": pytest.approx(0.1)}
    assert zoo.thread_deltas_ms({"predict": slots["predict"]}, "predict") == {}  # no default slots to pair with


def test_the_warm_job_counts_only_its_own_dtype_s_measurements_and_the_table_flags_a_cold_cache(monkeypatch, tmp_path):
    """The verify executor is the process's (shared by the dtypes of one job): each row counts what its own pass
    timed, and a warm pass that timed problems is shown as not warm."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import types

    import zoo

    ex = types.SimpleNamespace(measured_problems=5)  # what an earlier dtype's pass left in the shared executor

    def step(i):
        if zoo_mode[0] == "verify":
            ex.measured_problems += 3

    zoo_mode = ["default"]

    def fake_mode(mode, hook):
        def enter():
            zoo_mode[0] = mode
            return contextlib.nullcontext(ex if mode == "verify" else None)

        return enter

    monkeypatch.setattr(zoo, "build_network", lambda name, dtype, device: (step, 1))
    monkeypatch.setattr(zoo, "mode_context", fake_mode)
    rows = [zoo.job_warm("mynet", dtype, device="cpu") for dtype in ("float32", "amp")]
    assert [r["verify_warm_measured_problems"] for r in rows] == [3, 3]
    results = tmp_path / "warm.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    table = zoo.summarize(results)
    assert table.count("(not warm: 3 timed)") == 2


def test_a_gpu_run_without_the_compiled_path_stops_with_one_line(monkeypatch):
    """On a CUDA device the zoo measures the hook as users run it, with its compiled path: where that is not built
    the driver says so in one line (``--python-path`` measures without it); a CPU run needs none."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import zoo
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    monkeypatch.setattr(zoo, "compiled_path_status", lambda: "not built (run `algosel build-ext`; ...)")
    assert zoo.missing_compiled_path("cpu") is None
    assert zoo.missing_compiled_path("cuda") == "the compiled path: not built (run `algosel build-ext`; ...)"
    monkeypatch.setattr(zoo, "compiled_path_status", lambda: "built: /x/algosel_conv_ext.so")
    assert zoo.missing_compiled_path("cuda:0") is None
    monkeypatch.setattr(zoo, "compiled_path_status", lambda: "built: /x.so (but it does not load: see the log)")
    assert zoo.missing_compiled_path("cuda") is not None
    monkeypatch.setattr(zoo, "compiled_path_status", lambda: "not built")
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--device", "cuda", "--nets", "mynet", "--out", os.devnull])
    with pytest.raises(SystemExit, match="^zoo.py: the compiled path: not built; build it"):
        zoo.main()


def test_pool_puts_prediction_mode_beside_the_default_and_its_second_slot(tmp_path):
    """``--pool``: per (network, dtype), rows of several files pooled; prediction / default, the A/A slot, prediction
    / A/A slot; rows of another model are left out."""
    row = {"net": "resnet50", "dtype": "amp", "job": "paired", "default_steps_ms": [10.0] * 6,
           "predict_steps_ms": [10.2] * 6, "again_steps_ms": [10.1] * 6, "native_steps_ms": [10.5] * 6}  # fmt: skip
    (tmp_path / "a.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({**row, "model": "mine"}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({**row, "predict_steps_ms": [10.0] * 6}) + "\n")
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--pool", "a.jsonl", "b.jsonl"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("| resnet50 | amp |"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[2] == "2"  # two processes: the other model's row is not pooled
    assert cells[3] == "1.010 (1.000-1.020)"  # 1.02 in one process, 1.00 in the other, pooled
    assert cells[4] == "1.010 (1.010-1.010)" and cells[6] == "1.050 (1.050-1.050)"
    assert cells[5] == "1.000 (0.990-1.010)"  # 10.2 / 10.1 and 10.0 / 10.1
    assert "prediction / A/A slot over 1: 1.000" in res.stdout
    bad = subprocess.run([*cmd[:2], "--pool", "missing.jsonl"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert bad.returncode == 2 and "--pool: no such file 'missing.jsonl'" in bad.stderr


def test_jobs_run_network_by_network_and_alternate_their_order_between_processes(monkeypatch):
    """Paired and benchmark processes alternate (A B, B A) so that a comparison across processes shares the
    machine's drift; a warm job keeps its place after the paired job whose cache it reads."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    assert zoo.run_order(["a", "b"], ["paired", "benchmark"], 2) == [
        ("paired", "a", 0), ("benchmark", "a", 0), ("benchmark", "a", 1), ("paired", "a", 1),
        ("paired", "b", 0), ("benchmark", "b", 0), ("benchmark", "b", 1), ("paired", "b", 1)]  # fmt: skip
    assert zoo.run_order(["a"], ["paired", "warm"], 2) == [
        ("paired", "a", 0), ("warm", "a", 0), ("paired", "a", 1), ("warm", "a", 1)]  # fmt: skip


def test_verify_mode_meets_benchmark_mode_across_processes_with_an_interval_over_both_sides(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    ratio, lo, hi = zoo.cross_process_ratio([9.0, 10.0, 11.0], [10.0, 10.0])
    assert ratio == pytest.approx(1.0) and lo == pytest.approx(0.9) and hi == pytest.approx(1.1)
    assert zoo.cross_process_ratio([9.0], [10.0]) == pytest.approx((0.9, 0.9, 0.9))
    assert zoo.cross_process_ratio([], [10.0]) is None
    rows = [
        {"net": "n", "dtype": "float32", "job": "paired", "verify_step_ms": 9.0, "verify_kernel_ms": 4.0,
         "verify_cold_first_pass_s": 1.0},
        {"net": "n", "dtype": "float32", "job": "benchmark", "benchmark_step_ms": 10.0, "benchmark_kernel_ms": 5.0,
         "benchmark_first_pass_s": 8.0},
        {"net": "n", "dtype": "float32", "job": "benchmark", "error": "timed out"},  # failed jobs are left out
        {"net": "m", "dtype": "float32", "job": "paired", "verify_step_ms": 9.0},  # no benchmark job: no line
    ]  # fmt: skip
    assert zoo.own_process_lines(rows) == [
        "verify mode (warm) / benchmark mode in processes of their own (n, float32; 1 + 1 processes): "
        "steps 0.900 (0.900-0.900), kernels 0.800 (0.800-0.800), cold / tuning 0.125 (0.125-0.125)"]  # fmt: skip


def test_benchmark_mode_s_own_process_joins_the_row_of_verify_mode_looking_first(tmp_path, monkeypatch):
    """A benchmark job runs no verify mode: its row is not one "timing at first call", but the paired row's own, so
    that the table sets verify mode's warm steps against its steady steps and cold pass against its tuning."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo

    paired = {"net": "squeezenet1_1", "dtype": "float32", "job": "paired", "verify_look_first": True,
              "default_step_ms": 8.0, "verify_step_ms": 8.0, "verify_cold_first_pass_s": 0.4}  # fmt: skip
    bench = {"net": "squeezenet1_1", "dtype": "float32", "job": "benchmark", "benchmark_step_ms": 7.0,
             "benchmark_first_pass_s": 8.0}  # fmt: skip
    path = tmp_path / "zoo.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (paired, bench)) + "\n")
    table = zoo.summarize(path)
    rows = [line for line in table.splitlines() if line.startswith("| squeezenet1_1")]
    assert len(rows) == 1 and "timing at first call" not in rows[0]
    assert "| 1.143 |" in rows[0] and "| 0.050 |" in rows[0]  # 8.0 / 7.0 and 0.4 / 8.0
