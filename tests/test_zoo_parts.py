"""The zoo benchmark's parts (benchmarks/zoolib/) through their arguments: a ``ZooConfig``, and the builder,
contexts and clocks they take; the rotation, the pooled ratios and the tables (the driver end to end:
test_zoo_driver.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
from conftest import REPO


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch):
    """benchmarks/ on the path (zoo.py and its parts, zoolib), for the test only."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))


def test_the_rotation_runs_with_the_heap_frozen_and_thaws_it_after():
    import gc

    from zoolib.timing import rotate

    seen = []
    times = rotate(lambda i: seen.append(gc.get_freeze_count()), {"a": contextlib.nullcontext}, 2, 1,
                       lambda: None)  # fmt: skip
    assert len(times["a"]) == 2 and min(seen) > 0  # the objects alive before it: out of the collector's reach
    assert gc.get_freeze_count() == 0


def test_pooled_ratio_resamples_processes_as_well_as_slots():
    from zoolib.drive import cpu_set
    from zoolib.pooling import pooled_ratio

    steady = {"default_steps_ms": [10.0] * 8, "predict_steps_ms": [10.2] * 8}
    median, lo, hi = pooled_ratio([steady, steady], "predict")
    assert median == pytest.approx(1.02) and lo == pytest.approx(1.02) and hi == pytest.approx(1.02)
    # two processes that disagree (0.96 and 1.04 in every slot): the interval spans both, the median sits between
    apart = [{"default_steps_ms": [10.0] * 8, "predict_steps_ms": [t] * 8} for t in (9.6, 10.4)]
    median, lo, hi = pooled_ratio(apart, "predict")
    assert lo == pytest.approx(0.96) and hi == pytest.approx(1.04) and lo <= median <= hi
    assert pooled_ratio([{"default_steps_ms": [1.0], "predict_steps_ms": [1.0]}], "predict") is None
    assert cpu_set("0-2,5") == {0, 1, 2, 5}


def test_benchmark_mode_paired_switches_benchmark_on_and_tf32_off_and_restores_them():
    """The paired benchmark mode: cudnn.benchmark on, cuDNN's TF32 switch off (a plan key of its own for float16
    convolutions) inside its steps, the caller's switches after; verify mode is compared with it slot by slot."""
    import torch
    from zoolib.config import ZooConfig
    from zoolib.modes import TUNED, mode_context
    from zoolib.pooling import pooled_ratio

    cudnn = torch.backends.cudnn
    with cudnn.flags(enabled=True, benchmark=False, allow_tf32=True):
        with mode_context(ZooConfig(), TUNED, None)():
            assert (cudnn.benchmark, cudnn.allow_tf32) == (True, False)
        assert (cudnn.benchmark, cudnn.allow_tf32) == (False, True)
    row = {"tuned_steps_ms": [10.0] * 4, "verify_steps_ms": [9.0] * 4, "default_steps_ms": [12.0] * 4}
    assert pooled_ratio([row], "verify", base=TUNED)[0] == pytest.approx(0.9)


def test_each_repeated_process_verifies_into_a_cache_of_its_own():
    """So that every process's cold first pass is cold; the first process's cache is the one the warm job reads."""
    from zoolib.config import ZooConfig
    from zoolib.modes import mode_context

    class Hook:
        def enabled(self, **config):
            return config

    for process, folder in ((0, "zoo-verify"), (1, "zoo-verify-p1"), (2, "zoo-verify-p2")):
        assert mode_context(ZooConfig(process=process), "verify", Hook())()["cache"].name == folder


def test_the_least_gain_and_k_reach_the_modes_that_decide_and_a_cache_folder_of_their_own():
    """``--min-gain-us`` and ``--probe-calls`` go to prediction and verify mode only (the native mode routes every
    call whatever the gain), ``--verify-k`` to verify mode; their decisions land in folders apart from the default
    configuration's."""
    import math

    from zoolib.config import ZooConfig
    from zoolib.modes import mode_context
    from zoolib.pooling import config_label

    class Hook:
        def enabled(self, **config):
            return config

    cfg = ZooConfig(process=0, min_gain_us=5.0, verify_k=6)
    predict, verify, native = (mode_context(cfg, m, Hook())() for m in ("predict", "verify", "native"))
    assert (predict["min_gain_us"], verify["min_gain_us"], native["min_gain_us"]) == (5.0, 5.0, math.inf)
    assert verify["verify"] == 6 and "verify" not in predict
    assert (predict["cache"].name, verify["cache"].name) == ("zoo-predict-g5.0-k6", "zoo-verify-g5.0-k6")
    cfg = dataclasses.replace(cfg, probe_calls=0)
    predict, native = mode_context(cfg, "predict", Hook())(), mode_context(cfg, "native", Hook())()
    assert predict["probe_calls"] == 0 and "probe_calls" not in native
    assert predict["cache"].name == "zoo-predict-g5.0-k6-probe0"
    cfg = dataclasses.replace(cfg, probe_calls=None, min_gain_us=None, verify_k=3)
    predict = mode_context(cfg, "predict", Hook())()
    assert "min_gain_us" not in predict and "probe_calls" not in predict and predict["cache"].name == "zoo-predict"
    row = {"hook_config": {"min_gain_us": 5.0, "verify_k": 3, "probe_calls": 0}}
    assert config_label(row) == ", least gain 5 us, verify k 3, probe calls 0"


def test_the_configuration_reaches_each_job_s_process_through_the_environment_as_the_options_gave_it():
    """``main`` makes one ``ZooConfig`` of the environment and the options; the driver hands it to each job's process
    in the environment (the names shell scripts set), which the child reads back whole, its process number
    included."""
    import zoo
    from zoolib.config import ZooConfig

    env = {"ALGOSEL_ZOO_VERIFY_K": "5", "ALGOSEL_ZOO_AA": "1", "ALGOSEL_ZOO_SMOKE": "1"}
    args = zoo.parser().parse_args(["--model", "m/x", "--no-look-first", "--min-gain-us", "2.5", "--probe-calls",
                                    "0", "--force"])  # fmt: skip
    cfg = ZooConfig.from_env(env).with_args(args)
    assert cfg == ZooConfig(smoke=True, model="m/x", aa=True, look_first=False, min_gain_us=2.5, verify_k=5,
                            probe_calls=0, force=True)  # fmt: skip
    assert ZooConfig.from_env(cfg.child_env(process=2)) == dataclasses.replace(cfg, process=2)
    assert ZooConfig.from_env(ZooConfig().child_env(process=0)) == ZooConfig.from_env({}) == ZooConfig()
    assert cfg.hook_config() == {"min_gain_us": 2.5, "verify_k": 5, "probe_calls": 0}
    assert ZooConfig().hook_config() is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.verify_k = 3  # made once: a run's parts all see the same
    with pytest.raises(TypeError):
        cfg.nets["mine"] = (1, 32, "cls")


def test_every_mode_takes_every_place_of_the_rotation_and_follows_every_other():
    from zoolib.timing import round_order

    modes = ["default", "predict", "verify", "native", "again"]
    orders = [round_order(modes, r) for r in range(200)]
    assert orders[0] == modes and orders[1] == modes[::-1]  # a pair of rounds: ABBA
    assert all(orders[r + 1] == orders[r][::-1] for r in range(0, 200, 2))
    assert all(sorted(o) == sorted(modes) for o in orders)
    assert orders == [round_order(modes, r) for r in range(200)]  # seeded: every run rotates alike
    for m in modes:
        assert {o.index(m) for o in orders} == set(range(len(modes)))
        assert {o[o.index(m) - 1] for o in orders if o.index(m) > 0} == set(modes) - {m}


def test_thread_cpu_places_cpu_time_on_the_thread_that_spent_it():
    import threading
    import time

    from zoolib.timing import thread_cpu_ns, thread_deltas_ms

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

    before = thread_cpu_ns()
    assert "main" in before
    spin(0.05)
    worker = threading.Thread(target=work)
    worker.start()
    assert spun.wait(10)
    mid = thread_cpu_ns()  # after the worker spun, while it lives: listed under its name, apart from main
    release.set()
    worker.join()
    assert mid["main"] - before["main"] >= 40e6
    # the worker's 50 ms of spinning, under a name of its own (per name: a pool thread ending meanwhile cannot hide it)
    assert max(v - before.get(k, 0) for k, v in mid.items() if k != "main") >= 40e6
    slots = {
        "default": [{"main": 1.0, "w": 0.5}, {"main": 2.0, "w": 0.5}, {"main": 1.0}],
        "predict": [{"main": 1.2, "w": 0.5}, {"main": 2.1, "w": 0.6}, {"main": 1.3, "w": 0.1}],
    }
    assert thread_deltas_ms(slots, "predict") == {"main": pytest.approx(0.2), "w": pytest.approx(0.1)}
    assert thread_deltas_ms({"predict": slots["predict"]}, "predict") == {}  # no default slots to pair with


def test_the_warm_job_counts_only_its_own_dtype_s_measurements_and_the_table_flags_a_cold_cache(tmp_path):
    """The verify executor is the process's (shared by the dtypes of one job): each row counts what its own pass
    timed, and a warm pass that timed problems is shown as not warm."""
    import types

    from zoolib.config import ZooConfig
    from zoolib.jobs import job_warm
    from zoolib.tables import summarize

    ex = types.SimpleNamespace(measured_problems=5)  # what an earlier dtype's pass left in the shared executor

    def step(i):
        if zoo_mode[0] == "verify":
            ex.measured_problems += 3

    zoo_mode = ["default"]

    def fake_mode(cfg, mode, hook):
        def enter():
            zoo_mode[0] = mode
            return contextlib.nullcontext(ex if mode == "verify" else None)

        return enter

    def build(cfg, name, dtype, device):
        return step, 1

    rows = [job_warm(ZooConfig(), "mynet", dtype, device="cpu", build=build, contexts=fake_mode)
            for dtype in ("float32", "amp")]  # fmt: skip
    assert [r["verify_warm_measured_problems"] for r in rows] == [3, 3]
    results = tmp_path / "warm.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    table = summarize(results)
    assert table.count("(not warm: 3 timed)") == 2


def test_jobs_run_network_by_network_and_alternate_their_order_between_processes():
    """Paired and benchmark processes alternate (A B, B A) so that a comparison across processes shares the
    machine's drift; a warm job keeps its place after the paired job whose cache it reads."""
    from zoolib.drive import run_order

    assert run_order(["a", "b"], ["paired", "benchmark"], 2) == [
        ("paired", "a", 0), ("benchmark", "a", 0), ("benchmark", "a", 1), ("paired", "a", 1),
        ("paired", "b", 0), ("benchmark", "b", 0), ("benchmark", "b", 1), ("paired", "b", 1)]  # fmt: skip
    assert run_order(["a"], ["paired", "warm"], 2) == [
        ("paired", "a", 0), ("warm", "a", 0), ("paired", "a", 1), ("warm", "a", 1)]  # fmt: skip


def test_verify_mode_meets_benchmark_mode_across_processes_with_an_interval_over_both_sides():
    from zoolib.pooling import cross_process_ratio, own_process_lines

    ratio, lo, hi = cross_process_ratio([9.0, 10.0, 11.0], [10.0, 10.0])
    assert ratio == pytest.approx(1.0) and lo == pytest.approx(0.9) and hi == pytest.approx(1.1)
    assert cross_process_ratio([9.0], [10.0]) == pytest.approx((0.9, 0.9, 0.9))
    assert cross_process_ratio([], [10.0]) is None
    rows = [
        {"net": "n", "dtype": "float32", "job": "paired", "verify_step_ms": 9.0, "verify_kernel_ms": 4.0,
         "verify_cold_first_pass_s": 1.0},
        {"net": "n", "dtype": "float32", "job": "benchmark", "benchmark_step_ms": 10.0, "benchmark_kernel_ms": 5.0,
         "benchmark_first_pass_s": 8.0},
        {"net": "n", "dtype": "float32", "job": "benchmark", "error": "timed out"},  # failed jobs are left out
        {"net": "m", "dtype": "float32", "job": "paired", "verify_step_ms": 9.0},  # no benchmark job: no line
    ]  # fmt: skip
    assert own_process_lines(rows) == [
        "verify mode (warm) / benchmark mode in processes of their own (n, float32; 1 + 1 processes): "
        "steps 0.900 (0.900-0.900), kernels 0.800 (0.800-0.800), cold / tuning 0.125 (0.125-0.125)"]  # fmt: skip


def test_benchmark_mode_s_own_process_joins_the_row_of_verify_mode_looking_first(tmp_path):
    """A benchmark job runs no verify mode: its row is not one "timing at first call", but the paired row's own, so
    that the table sets verify mode's warm steps against its steady steps and cold pass against its tuning."""
    from zoolib.tables import summarize

    paired = {"net": "squeezenet1_1", "dtype": "float32", "job": "paired", "verify_look_first": True,
              "default_step_ms": 8.0, "verify_step_ms": 8.0, "verify_cold_first_pass_s": 0.4}  # fmt: skip
    bench = {"net": "squeezenet1_1", "dtype": "float32", "job": "benchmark", "benchmark_step_ms": 7.0,
             "benchmark_first_pass_s": 8.0}  # fmt: skip
    path = tmp_path / "zoo.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (paired, bench)) + "\n")
    table = summarize(path)
    rows = [line for line in table.splitlines() if line.startswith("| squeezenet1_1")]
    assert len(rows) == 1 and "timing at first call" not in rows[0]
    assert "| 1.143 |" in rows[0] and "| 0.050 |" in rows[0]  # 8.0 / 7.0 and 0.4 / 8.0
