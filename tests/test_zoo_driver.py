"""The zoo benchmark's driver on the CPU (benchmarks/zoo.py with ALGOSEL_ZOO_SMOKE=1): a process per job, one
result row per (network, dtype) with every measurement the docs' table reads, and the table itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO


def test_the_paired_job_writes_a_row_per_dtype_and_the_table(tmp_path):
    out = tmp_path / "zoo.jsonl"
    env = {**os.environ, "ALGOSEL_ZOO_SMOKE": "1", "ALGOSEL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--nets", "fpn,mynet", "--jobs", "paired", "--device",
           "cpu", "--rounds", "2", "--slot-steps", "1", "--timeout-s", "400", "--out", str(out),
           "--model", str(REPO / "models" / "h200-cudnn91900")]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["net"], r["dtype"]) for r in rows) == [
        ("fpn", "amp"), ("fpn", "float32"), ("mynet", "amp"), ("mynet", "float32")]  # fmt: skip
    for r in rows:
        assert "error" not in r, r["error"]
        assert r["job"] == "paired" and r["model"] == str(REPO / "models" / "h200-cudnn91900")
        assert r["inputs"] == (3 if r["net"] == "fpn" else 1)  # the smoke run's three FPN sizes
        assert r["slot_steps"] == r["inputs"] if r["net"] == "fpn" else r["slot_steps"] == 1
        for mode in ("default", "predict", "verify", "native"):
            assert len(r[f"{mode}_steps_ms"]) == 2 and r[f"{mode}_step_ms"] > 0 and r[f"{mode}_host_ms"] > 0
        assert r["predict_vs_default"] > 0 and r["verify_cold_first_pass_s"] > 0
        assert sum(r["predict_stats"].values()) > 0  # the hook routed the steps' convolutions
    assert "geomean step time / default over 4 (network, dtype)" in res.stdout
    assert "| fpn | float32 |" in res.stdout
