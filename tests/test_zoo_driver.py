"""The zoo benchmark's driver on the CPU (benchmarks/zoo.py with ALGOSEL_ZOO_SMOKE=1): a process per job, one
result row per (network, dtype) with every measurement the docs' table reads, and the table itself (its parts, one
by one: test_zoo_parts.py)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch):
    """benchmarks/ on the path (zoo.py and its parts, zoolib), for the test only."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))


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
    (as results from before looking first was the default). With ``--model`` the model is loaded once a process,
    before the steps (the shipped model, loaded beside them, is the cold job's)."""
    out = tmp_path / "zoo.jsonl"
    env = {**os.environ, "ALGOSEL_ZOO_SMOKE": "1", "OMP_NUM_THREADS": "1", "ALGOSEL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--nets", "mynet", "--jobs", "paired", "--device",
           "cpu", "--rounds", "2", "--slot-steps", "1", "--processes", "2", "--cpus", "0", "--dtypes", "float32",
           "--aa", "--no-look-first", "--model", str(REPO / "models" / "joint-h100-h200-cudnn91900"),
           "--out", str(out)]  # fmt: skip
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


def test_looking_first_counts_verify_mode_s_cold_cost_until_every_signature_is_decided(cold_job):
    """Verify mode's executor looks before timing (the default); the cold job counts its passes until nothing
    is left undecided (on the CPU nothing is timed, so one pass), and the row says so. ``--no-look-first`` (the
    first pass alone, in a row of its own) is test_repeated_processes_are_pooled_in_the_table's."""
    looking, stdout = cold_job
    assert "| mynet | float32 |" in stdout
    row = looking["float32"]
    assert row["verify_look_first"] is True and row["verify_cold_passes"] == 1
    assert row["verify_cold_first_pass_s"] == row["verify_cold_raw_s"] > 0 and row["default_steady_pass_s"] > 0
    from zoolib.jobs import settle_verify

    passes = iter([2, 1, 0])  # undecided signatures after each pass: the third pass decides the last
    ctx = {"verify": object(), "default": object()}
    cold = {"verify_cold_first_pass_s": 3.0}
    settle_verify(None, ctx, 1, None, cold, undecided=lambda ctx: next(passes),
                  timer=lambda step, c, n, sync: 2.0 if c is ctx["verify"] else 0.5)  # fmt: skip
    # three passes (3 s, then 2 s twice), less the default's steady pass (0.5 s) for the two after the first
    assert cold == {"verify_cold_first_pass_s": 6.0, "verify_cold_passes": 3, "verify_cold_raw_s": 7.0,
                    "default_steady_pass_s": 0.5}  # fmt: skip


def test_an_unknown_dtype_is_one_line_naming_it(tmp_path):
    zoo = str(REPO / "benchmarks" / "zoo.py")
    cmd = [sys.executable, zoo, "--dtypes", "float32,bf16", "--out", str(tmp_path / "z")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and "--dtypes: unknown bf16 (choose from float32,amp)" in res.stderr
    assert not (tmp_path / "z").exists()


def test_a_gpu_run_without_the_compiled_path_stops_with_one_line():
    """On a CUDA device the zoo measures the hook as users run it, with its compiled path: where that is not built
    the driver says so in one line (``--python-path`` measures without it); a CPU run needs none."""
    import zoo
    from zoolib.drive import drive, missing_compiled_path

    def status(text):
        return lambda: text

    not_built = status("not built (run `algosel build-ext`; ...)")
    assert missing_compiled_path("cpu", not_built) is None
    assert missing_compiled_path("cuda", not_built) == "the compiled path: not built (run `algosel build-ext`; ...)"
    assert missing_compiled_path("cuda:0", status("built: /x/algosel_conv_ext.so")) is None
    assert missing_compiled_path("cuda", status("built: /x.so (but it does not load: see the log)")) is not None
    argv = ["--device", "cuda", "--nets", "mynet", "--out", os.devnull]
    with pytest.raises(SystemExit, match="^zoo.py: the compiled path: not built; build it"):
        zoo.main(argv, driver=functools.partial(drive, status=status("not built")))


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
