"""The GPU-bound zoo's driver (benchmarks/zoo_gpu.py) on the CPU: its networks, the multi-scale run's arms, the
busy-fraction and run tables, ``--force``, and the driver's ``--resume`` and ``--budget-s`` (with a stand-in child
script: what a job measures is zoo.py's, tested in test_zoo_driver.py)."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch
from conftest import REPO


@pytest.fixture
def gpu_zoo(monkeypatch, tmp_path):
    """zoo.py, zoo_gpu.py, and the GPU zoo's configuration (its networks, builders and jobs) in the smoke run's sizes;
    the hook's cache in a folder of the test's own."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import zoo
    import zoo_gpu
    from zoolib.config import ZooConfig

    monkeypatch.setenv("ALGOSEL_CACHE_DIR", str(tmp_path / "cache"))
    return zoo, zoo_gpu, zoo_gpu.gpu_config(ZooConfig(smoke=True))


def test_the_networks_are_the_issue_s_and_the_detector_meets_30_sizes_no_records_hold(gpu_zoo):
    zoo, zoo_gpu, cfg = gpu_zoo
    from zoolib.nets import FPN_SIZES

    from algosel.measure.suites import fpn_input_sizes

    assert set(cfg.nets) == {"efficientnet_b0", "mobilenet_v3_large", "convnext_tiny", "resnet50", "densenet121",
                             "regnet_y_1_6gf", "deeplabv3_resnet50", "unet", "srnet", "detector_ms30",
                             "regnet_x_3_2gf_ms9", "mobilenet_v2", "regnet_x_800mf", "wide_resnet50_2"}  # fmt: skip
    assert cfg.nets["regnet_x_3_2gf_ms9"][2] == "multiscale_cls" and len(set(zoo_gpu.CLS_SIZES)) == 9
    assert cfg.nets["deeplabv3_resnet50"][1] == 512
    assert len(set(zoo_gpu.MS_SIZES)) == 30
    assert not set(zoo_gpu.MS_SIZES) & (set(fpn_input_sizes()) | set(FPN_SIZES))
    model, inputs = zoo_gpu.multiscale_head("detector_ms30", 8, 0, torch.channels_last, "meta")  # full sizes, no memory
    assert len(inputs) == 30 and inputs[0][0].shape[0] == 8
    for name, out_shape in (("unet", (2, 21, 16, 16)), ("srnet", (2, 3, 32, 32))):  # written in files of their own
        model, ((x,),) = zoo_gpu.from_file(name, 16, 256, torch.contiguous_format, "cpu", smoke=True)
        assert tuple(model(x).shape) == out_shape
    assert "runs" not in cfg.jobs and {f"run_{a}" for a in zoo_gpu.RUN_ARMS} <= set(cfg.jobs)


def test_a_multiscale_arm_times_every_pass_of_its_run(gpu_zoo):
    zoo, zoo_gpu, cfg = gpu_zoo
    row = zoo_gpu.job_run(cfg, "detector_ms30", "float32", "cpu", arm="default", epochs=2)
    assert row["job"] == "run_default" and row["inputs"] == 3 and len(row["passes_s"]) == 2
    assert row["run_s"] >= sum(row["passes_s"]) - 1e-3 and row["steady_pass_s"] == pytest.approx(row["passes_s"][1],
                                                                                                  abs=1e-4)  # fmt: skip
    assert len(row["host_passes_s"]) == 2 and len(row["pass_stats"]) == 2
    verify = zoo_gpu.job_run(cfg, "srnet", "float32", "cpu", arm="verify", epochs=1)
    assert verify["measured_problems"] == 0 and verify["steady_pass_s"] is None  # a CPU times nothing
    rule = cfg.jobs["run_rule"](cfg, "srnet", "float32", "cpu", epochs=1)  # as the driver's child runs it
    assert rule["measured_problems"] == 0 and rule["model_load_s"] > 0 and rule["pass_stats"][0]


def test_the_tables_give_the_busy_fraction_the_ratios_and_the_card(gpu_zoo):
    zoo, zoo_gpu, _ = gpu_zoo
    paired = {"net": "unet", "dtype": "amp", "job": "paired", "batch": 16, "default_step_ms": 100.0,
              "default_busy_fraction": 0.97, "default_steps_ms": [100.0] * 4, "verify_steps_ms": [95.0] * 4,
              "predict_steps_ms": [100.0] * 4, "default_host_ms": 20.0, "verify_kernel_ms": 90.0,
              "verify_cold_first_pass_s": 1.5, "tuned_first_pass_s": 12.0, "gpu": "NVIDIA H100 80GB HBM3",
              "forced_model": True}  # fmt: skip
    (line,) = zoo_gpu.busy_lines([paired])[2:]
    assert line.startswith("| unet | amp | 16 | 100.00 | 0.97 | 1.000 (1.000-1.000) | 0.950 (0.950-0.950) |  |  |  |")
    assert "| 20.0// | //90.0 | 1.50 | 12.00 | 0.125 | NVIDIA H100 80GB HBM3 (H200 model forced) |" in line
    # benchmark mode paired 0.94x the default, verify mode 0.95x: 0.95 / 0.94 and 5 of its 6 points of gain
    (line,) = zoo_gpu.busy_lines([{**paired, "tuned_steps_ms": [94.0] * 4}])[2:]
    assert "| 0.940 (0.940-0.940) | 1.011 (1.011-1.011) | 0.83 |" in line
    runs = [{"net": "d", "dtype": "amp", "job": f"run_{arm}", "arm": arm, "run_s": s, "first_pass_s": s / 2,
             "steady_pass_s": 0.1} for arm, s in (("default", 10.0), ("benchmark", 40.0), ("verify", 8.0))]  # fmt: skip
    lines = zoo_gpu.run_lines(runs)
    assert any(ln.startswith("| d | amp | verify | 8.00 | 0.800 | 0.200 | 4.00 | 0.100 |") for ln in lines)
    assert zoo_gpu.run_lines([{**runs[0], "error": "x"}]) == []


def test_force_loads_the_shipped_model_for_this_gpu_whatever_it_was_made_for(gpu_zoo):
    from zoolib.config import ZooConfig
    from zoolib.modes import selector_kwargs

    loaded = []

    def load(path, force=False):  # Selector.load's stand-in
        loaded.append((path, force))
        return "sel"

    cfg = ZooConfig(model=None, force=False, smoke=False)  # (the smoke run adds its CPU-as-GPU device seam)
    assert selector_kwargs(cfg, load) == {} and loaded == []  # the hook's own choice of model
    assert selector_kwargs(dataclasses.replace(cfg, force=True), load) == {"selector": "sel"}
    assert loaded[0][0].endswith("joint-h100-h200-cudnn91900") and loaded[0][1] is True


CHILD = """import json, sys
a = sys.argv
job, net, dtypes = a[a.index("--job") + 1], a[a.index("--net") + 1], a[a.index("--dtype") + 1]
for d in dtypes.split(","):
    print("RESULT " + json.dumps({"net": net, "dtype": d, "job": job, "default_step_ms": 1.0}))
"""


def test_the_driver_resumes_where_it_stopped_and_starts_nothing_past_its_budget(gpu_zoo, tmp_path, capsys):
    zoo, zoo_gpu, cfg = gpu_zoo
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    out = tmp_path / "z.jsonl"
    before = [{"net": "unet", "dtype": "float32", "job": "paired", "process": 0},
              {"net": "unet", "dtype": "amp", "job": "paired", "error": "timed out"}]  # fmt: skip
    out.write_text("".join(json.dumps(r) + "\n" for r in before))
    args = ["--device", "cpu", "--nets", "unet,srnet", "--jobs", "paired", "--out", str(out), "--timeout-s", "60"]
    zoo.main([*args, "--resume", "--budget-s", "100"], script=str(child), summary=lambda p: "the table", config=cfg)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # unet float32 was there; unet amp failed before and runs again; srnet runs both
    assert [(r["net"], r["dtype"]) for r in rows[2:]] == [("unet", "amp"), ("srnet", "float32"), ("srnet", "amp")]
    assert capsys.readouterr().out.rstrip().endswith("the table")
    zoo.main([*args, "--resume"], script=str(child), summary=lambda p: "", config=cfg)
    assert len(out.read_text().splitlines()) == 5  # all done: nothing run again
    zoo.main([*args, "--budget-s", "30"], script=str(child), summary=lambda p: "", config=cfg)  # a job may take 60 s
    assert "budget: 30 s would be passed; stopping before paired unet" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 5


def test_runs_names_the_multiscale_arms_and_an_unknown_network_is_one_line(gpu_zoo, tmp_path, capsys):
    zoo, zoo_gpu, _ = gpu_zoo
    seen = {}

    def driver(args, cfg, script, summary):
        seen.update(jobs=args.jobs, script=script, device=args.device, cfg=cfg)

    zoo_gpu.main(["--nets", "detector_ms30", "--jobs", "paired,runs", "--out", str(tmp_path / "z")], driver=driver)
    assert seen["jobs"] == "paired," + ",".join(f"run_{a}" for a in zoo_gpu.RUN_ARMS)
    assert seen["script"] == zoo_gpu.__file__
    assert set(seen["cfg"].nets) == set(zoo_gpu.GPU_NETS) and set(seen["cfg"].jobs) >= {"paired", "run_rule"}
    # --smoke: the CPU, and a configuration that says so (to this process's builders and, through it, the children)
    zoo_gpu.main(["--smoke", "--nets", "srnet", "--out", str(tmp_path / "z")], driver=driver)
    assert seen["device"] == "cpu" and seen["cfg"].smoke and seen["cfg"].child_env(0)["ALGOSEL_ZOO_SMOKE"] == "1"
    with pytest.raises(SystemExit) as stop:
        zoo_gpu.main(["--nets", "alexnet", "--out", str(tmp_path / "z")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("--nets: unknown alexnet (choose from " + ",".join(zoo_gpu.GPU_NETS) + ")")
    assert sys.path  # (the fixture's path is taken off again by monkeypatch)


def test_a_job_that_would_run_past_the_budget_is_stopped_there_and_run_again_with_resume(gpu_zoo, tmp_path):
    from zoolib.drive import done_rows

    zoo, _, cfg = gpu_zoo
    child = tmp_path / "slow.py"
    child.write_text("import time; time.sleep(30)\n")
    out = tmp_path / "z.jsonl"
    cfg = dataclasses.replace(cfg, budget_first_job_s=0.1)  # the first job is expected short: it is started
    zoo.main(["--device", "cpu", "--nets", "unet", "--jobs", "paired", "--dtypes", "float32", "--out", str(out),
              "--resume", "--budget-s", "1"], script=str(child), summary=lambda p: "", config=cfg)  # fmt: skip
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["error"] == "timed out after 1 s" and row["job_s"] < 10  # killed when the budget ran out
    assert done_rows(out) == set()  # so --resume runs it again
