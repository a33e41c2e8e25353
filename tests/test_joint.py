"""Joint models over several GPUs (algosel.learn.joint) and what a GPU without a model of its own gets.

The second GPU is made from the committed H200 slice: the same problems under an H100's environment, its times
changed by a factor per engine, so that the best candidate differs between the GPUs on some problems. It tests the
mechanics (grouping per GPU, coverage, loading, refusals), never the model's quality.
"""

from __future__ import annotations

import contextlib
import json
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from support import H100, h100_env

from algosel.learn.artifact import SelectorError
from algosel.learn.joint import joint_environments, train_joint
from algosel.learn.ranker import RankerParams, with_ratios
from algosel.learn.selector import JointModelWarning, Selector
from algosel.records import load_records
from algosel.records.environment import coverage, model_environments, same_family
from algosel.records.store import RecordsError, write_part
from algosel.testing import fake_gpu

SLICE = Path(__file__).resolve().parents[1] / "data" / "samples" / "h200-slice"
SMALL = RankerParams(n_estimators=8, num_leaves=7, num_threads=1)


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory) -> Path:
    """The slice, and the slice as an H100 measured it (a part of its own)."""
    root = tmp_path_factory.mktemp("two-gpus")
    frame, _ = load_records(SLICE)
    env = h100_env()
    # A factor per engine in [0.7, 1.4): some picks change, as between two real GPUs.
    factor = frame["candidate_id"].map(lambda c: 0.7 + 0.7 * (zlib.crc32(c.encode()) % 100) / 100)
    h100 = frame.assign(env_id=env["env_id"], time_ms_median=frame["time_ms_median"] * factor)
    rows = [
        {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
        for r in h100.to_dict("records")
    ]
    write_part(root / "h100" / "part-h100.parquet", rows, [env])
    return root


@pytest.fixture(scope="module")
def joint(two_gpus, tmp_path_factory) -> tuple[Path, dict]:
    """A joint model of the slice and its made-up H100 twin, trained once for the module."""
    return train_joint([SLICE, two_gpus / "h100"], SMALL, models_root=tmp_path_factory.mktemp("models"), name="joint")


def test_records_of_several_gpus_are_ranked_per_gpu():
    frame, _ = load_records(SLICE)
    key = frame["problem_key"].iloc[0]
    one = frame[frame["problem_key"] == key]
    other = one.assign(env_id="other", time_ms_median=one["time_ms_median"] * 3)
    out = with_ratios(__import__("pandas").concat([one, other]))
    # Each GPU's best is 1.0 of its own: the slower GPU's records are not ratios to the faster one's best.
    assert out.groupby("env_id")["ratio"].min().tolist() == [1.0, 1.0]


def test_joint_environments_keep_every_gpu_of_the_main_cudnn(two_gpus):
    frame, envs = load_records(SLICE, two_gpus / "h100")
    kept, environments = joint_environments(frame, envs)
    assert [e["gpu_name"] for e in environments] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"] or [
        e["gpu_name"] for e in environments
    ] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert len(kept) == len(frame)


def test_train_joint_saves_a_model_of_both_gpus(two_gpus, joint):
    out, summary = joint
    manifest = json.loads((out / "manifest.json").read_text())
    names = {e["gpu_name"] for e in model_environments(manifest)}
    assert names == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert set(summary["test_scores_per_gpu"]) == {"h200-cudnn91900", "h100-80gb-hbm3-cudnn91900"}
    for scores in summary["test_scores_per_gpu"].values():
        assert scores["model"]["geomean"] >= 1.0
    assert "NVIDIA H100 80GB HBM3" in (out / "README.md").read_text()
    with pytest.raises(SelectorError, match="exists; pass --force"):
        train_joint([SLICE, two_gpus / "h100"], SMALL, models_root=out.parent, name="joint")


def test_train_joint_refuses_records_of_one_gpu(tmp_path):
    with pytest.raises(RecordsError, match="records of one GPU .*without --joint"):
        train_joint([SLICE], SMALL, models_root=tmp_path)


def test_coverage_exact_family_none():
    h200 = {"gpu_name": "NVIDIA H200", "cudnn": 91900, "compute_capability": 9.0}
    h100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "cudnn": 91900, "compute_capability": 9.0}
    h800 = {"gpu_name": "NVIDIA H800", "cudnn": 91900, "compute_capability": 9.0}
    a100 = {"gpu_name": "NVIDIA A100-SXM4-80GB", "cudnn": 91900, "compute_capability": 8.0}
    assert coverage([h200, h100], h100) == ("exact", h100)
    assert coverage([h200, h100], h800) == ("family", h200)
    assert coverage([h200], h800) == ("none", None)  # a one-GPU model knows nothing of other GPUs
    assert coverage([h200, h100], a100) == ("none", None)
    assert coverage([h200, h100], {**h800, "cudnn": 90100}) == ("none", None)
    assert same_family(h200, h100) and not same_family(h200, a100)
    assert not same_family(h200, {"gpu_name": "x", "cudnn": 91900})  # a device that cannot say its capability


@pytest.fixture
def as_gpu():
    """``as_gpu(name, capability, hardware=None)``: this process has that GPU (cuDNN 9.19) until the test ends
    (:func:`algosel.testing.fake_gpu`); a later call's GPU replaces an earlier one's."""
    with contextlib.ExitStack() as stack:
        yield lambda name, capability, hardware=None: stack.enter_context(fake_gpu(name, capability, hardware=hardware))


def test_a_joint_model_loads_on_its_gpus_and_warns_once_on_a_gpu_of_their_family(joint, as_gpu):
    out, _ = joint
    as_gpu("NVIDIA H100 80GB HBM3", (9, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = Selector.load(out)  # trained on this GPU: no warning, its own hardware
    assert sel.target["memory_bandwidth_gbps"] == H100["memory_bandwidth_gbps"]
    as_gpu("NVIDIA H800", (9, 0), {"memory_bandwidth_gbps": 3350.0, "sm_count": 132})
    with pytest.warns(
        JointModelWarning, match=r"H800 has no model of its own; .*joint model of .*algosel sweep --quick"
    ):
        sel = Selector.load(out)
    assert sel.target["gpu_name"] == "NVIDIA H800" and sel.target["memory_bandwidth_gbps"] == 3350.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Selector.load(out)  # once per process and model
    as_gpu("NVIDIA A100-SXM4-80GB", (8, 0))
    with pytest.raises(SelectorError, match=r"A100.*make a model for this GPU with `algosel sweep --quick 20"):
        Selector.load(out)


def test_a_joint_model_ranks_for_the_hardware_it_is_given(joint):
    """Offline, the main GPU's hardware; given another GPU's environment, that GPU's hardware columns (the slowest
    candidate's predicted time changes with memory bandwidth where the trees split on it, and never errs)."""
    from algosel.problem import ConvProblem

    out, _ = joint
    sel = Selector.load(out)  # no GPU here: its main environment
    assert sel.target == sel.environment
    frame, _ = load_records(SLICE)
    problem = ConvProblem.from_key(frame["problem_key"].iloc[0])
    as_main = sel.choose(problem)
    other = [e for e in model_environments(sel.manifest) if e["gpu_name"] != sel.environment["gpu_name"]][0]
    as_other = Selector(sel.ranker, sel.manifest, sel.catalogue.frame, sel.time_model, target=other)
    assert as_other.target["gpu_name"] == other["gpu_name"]
    ranked = as_other.choose(problem)
    assert {c.candidate_id for c in ranked} == {c.candidate_id for c in as_main}  # the same list, ranked for each


def test_the_default_model_of_an_h200_an_h100_and_an_h800_is_the_shipped_joint_model(as_gpu):
    """The one shipped model of the Hopper GPUs: the joint model of the H100 and H200 (models/joint-...)."""
    from algosel.learn.models import default_model_dir

    as_gpu("NVIDIA H200", (9, 0))
    assert default_model_dir().name == "joint-h100-h200-cudnn91900"  # trained on it
    as_gpu("NVIDIA H100 80GB HBM3", (9, 0))
    assert default_model_dir().name == "joint-h100-h200-cudnn91900"
    as_gpu("NVIDIA H800", (9, 0))
    assert default_model_dir().name == "joint-h100-h200-cudnn91900"  # its family's joint model


def test_the_hook_on_an_h800_uses_the_joint_model_with_one_warning_and_the_step_runs(as_gpu):
    from algosel.runtime import hook

    as_gpu("NVIDIA H800", (9, 0), {"memory_bandwidth_gbps": 3350.0, "sm_count": 132})
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 8))
    x = torch.randn(2, 3, 8, 8)
    ref = net(x).square().mean()
    from algosel.learn.models import default_model_dir

    # The model named (the default one here): an executor of its own, not the process's default configuration's,
    # loaded before the first call (the hook's default loads it beside the first steps, warning from there)
    with pytest.warns(JointModelWarning, match="H800 has no model of its own"):
        with hook.enabled(selector=str(default_model_dir()), step_aside=True, background_load=False) as ex:
            loss = net(x).square().mean()
            loss.backward()
    assert torch.equal(loss.detach(), ref.detach())
    assert ex.selector.environment["gpu_name"] in {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert not ex.unavailable


def test_train_joint_on_the_command_line(two_gpus, joint, tmp_path, capsys):
    from algosel.cli import main

    model, _ = joint  # trained with SMALL: the settings --params-from reads
    # --num-leaves: a setting of its own over --params-from's (SMALL's 7; the manifest's params say which ran)
    argv = ["train", str(SLICE), str(two_gpus / "h100"), "--joint", "--params-from", str(model), "--models",
            str(tmp_path), "--name", "two", "--threads", "1", "--num-leaves", "5", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "joint model of" in out and "h100-80gb-hbm3-cudnn91900 held-out model" in out
    assert json.loads((model / "manifest.json").read_text())["params"]["num_leaves"] == SMALL.num_leaves == 7
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["params"]["num_leaves"] == 5
    # the calibration of its predicted times, over both GPUs' held-out problems, recorded in its manifest
    from algosel.learn.calibration import load_calibration  # noqa: PLC0415

    calibration = load_calibration(tmp_path / "two", json.loads((tmp_path / "two" / "manifest.json").read_text()))
    assert calibration is not None and len(calibration.groups["all"]) > 20
    assert main([*argv[:-1], "--no-progress"]) == 2  # exists
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["train", str(SLICE), "--joint", "--models", str(tmp_path)]) == 2
    assert "--joint does not tune" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's one line
        main([*argv, "--num-leaves", "1"])
    assert "--num-leaves: expected an integer >= 2, got '1'" in capsys.readouterr().err


def test_a_joint_model_scores_records_of_any_of_its_gpus_without_force(joint, two_gpus):
    from algosel.learn.models import check_records_environment

    out, _ = joint
    sel = Selector.load(out)
    _, envs = load_records(two_gpus / "h100")
    assert check_records_environment(sel.manifest, out, next(iter(envs.values()))) == []
    with pytest.raises(SelectorError, match="pass --force"):
        check_records_environment(sel.manifest, out, {"gpu_name": "NVIDIA A100", "cudnn": 91900})


def test_a_joint_model_looks_up_the_records_of_the_gpu_it_ranks_for(joint, two_gpus, as_gpu):
    out, _ = joint
    frame, _ = load_records(two_gpus / "h100")
    row = frame[frame["status"] == "ok"].iloc[0]
    as_gpu("NVIDIA H100 80GB HBM3", (9, 0))
    sel = Selector.load(out)
    times = {r["candidate_id"]: r["time_ms_median"] for r in sel.catalogue.rows(row["problem_key"])}
    assert times[row["candidate_id"]] == pytest.approx(row["time_ms_median"])  # the H100's, not the H200's
    as_gpu("NVIDIA H200", (9, 0))
    h200, _ = load_records(SLICE)
    mine = h200[(h200["problem_key"] == row["problem_key"]) & (h200["candidate_id"] == row["candidate_id"])]
    times = {r["candidate_id"]: r["time_ms_median"] for r in Selector.load(out).catalogue.rows(row["problem_key"])}
    assert times[row["candidate_id"]] == pytest.approx(mine["time_ms_median"].iloc[0])


def test_algosel_evaluate_scores_a_joint_model_on_records_of_its_second_gpu_without_force(joint, two_gpus, tmp_path,
                                                                                           capsys):  # fmt: skip
    from algosel.cli import main

    out, _ = joint
    argv = ["evaluate", "--model", str(out), "--data", str(two_gpus / "h100"), "--no-lono", "--out",
            str(tmp_path / "ev"), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert "NVIDIA H100" not in capsys.readouterr().err  # no refusal, no --force warning
    assert (tmp_path / "ev" / "report.json").is_file()


def test_the_retired_h200_model_is_refused_naming_its_successor(tmp_path, capsys):
    """models/h200-cudnn91900 left the package for the joint model: a path to it says so, in one line."""
    from algosel.cli import main
    from algosel.learn.artifact import tuned_params

    retired = SLICE.parents[2] / "models" / "h200-cudnn91900"
    says = "h200-cudnn91900 was retired in favour of models/joint-h100-h200-cudnn91900"
    for load in (Selector.load, tuned_params):
        with pytest.raises(SelectorError, match=says):
            load(retired)
    key = "n32_c64_k64_h56_w56_r3_s3_p1x1_u1x1_d1x1_g1_float16_nchw_fwd"
    for argv in (["predict", "--model", str(retired), "--key", key],
                 ["train", str(SLICE), "--params-from", str(retired),
                  "--models", str(tmp_path)]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1
    (tmp_path / "h200-cudnn91900").mkdir()  # a folder of that name that is no model: the usual refusal
    with pytest.raises(SelectorError, match="not a model directory"):
        Selector.load(tmp_path / "h200-cudnn91900")
