"""`algosel doctor` on a CPU machine, and its verdict on the hook for the machines it cannot see here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from algosel.runtime import doctor
from algosel.runtime.doctor import collect, format_report, hook_verdict

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report without a GPU")


@needs_no_gpu
def test_doctor_exits_0_on_a_cpu_machine_and_says_what_it_has(tmp_path: Path) -> None:
    got = subprocess.run(
        [sys.executable, "-m", "algosel", "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines[:11])
    assert fields["torch"].startswith(torch.__version__)
    assert fields["GPU"] == "none visible" and fields["cuDNN"] == "not available"
    assert fields["compiled extension"] == "not applicable (CPU build of torch)"
    assert fields["lightgbm"][0].isdigit()
    assert fields["ALGOSEL_RECORD_UNSEEN"] == "unset"
    assert any(line.strip().startswith("joint-h100-h200-cudnn91900 ") and "NVIDIA H200" in line for line in lines)
    assert "default cudnn model: joint-h100-h200-cudnn91900" in lines
    verdict = lines[lines.index("when the hook is enabled:") + 1]
    assert verdict.startswith("  no CUDA GPU:") and "passes through to PyTorch" in verdict


@needs_no_gpu
def test_doctor_json_lists_local_models_and_the_record_variable(slice_model, tmp_path: Path, monkeypatch, capsys):
    from algosel.cli import main

    monkeypatch.setenv("ALGOSEL_RECORD_UNSEEN", str(tmp_path / "u.csv"))
    assert main(["doctor", "--json", "--models", str(slice_model[0].parent)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["gpus"] == [] and facts["cudnn"] is None and facts["record_unseen"] == str(tmp_path / "u.csv")
    names = [m["name"] for m in facts["models"]]
    assert "slice" in names and "joint-h100-h200-cudnn91900" in names
    assert facts["default_models"]["cudnn"]["error"] is None


def test_the_extension_line_is_the_compiled_paths_own_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from algosel.runtime import native

    assert doctor.extension_status() == native.status()
    monkeypatch.setenv("ALGOSEL_NATIVE", "0")
    assert doctor.extension_status() == "disabled (ALGOSEL_NATIVE=0)"

    def broken() -> str:
        raise OSError("cache folder unreadable")

    assert doctor.extension_status(broken) == "unknown (OSError: cache folder unreadable)"


def _facts(gpus: bool, error: str | None, space: str | None, local: list[str] | None = None) -> dict:
    facts = collect([])
    facts["gpus"] = [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "memory_bytes": 2**37,
                      "sm_count": 132}] if gpus else []  # fmt: skip
    facts["cudnn_space"] = space
    facts["default_models"]["cudnn"] = {
        "space": "cudnn",
        "model": None if error else "/models/joint-h100-h200-cudnn91900",
        "error": error,
        "local_matches": local or [],
    }
    return facts


A100 = {"gpu_name": "NVIDIA A100-SXM4-80GB", "cudnn": 91900, "compute_capability": 8.0}


def test_verdict_for_a_gpu_with_no_matching_model() -> None:
    error = "joint-h100-h200-cudnn91900 was trained for another environment: this process has GPU 'NVIDIA A100'"
    facts = _facts(True, error, None)
    facts["here"] = A100
    facts["models"] = [
        {"name": "joint-h100-h200-cudnn91900", "space": "cudnn", "gpu_name": "NVIDIA H200", "cudnn": 91900,
         "match": "another environment: GPU", "nearness": [2.0, 1.0, 0.3]},
        {"name": "v100-cudnn91900", "space": "cudnn", "gpu_name": "Tesla V100", "cudnn": 91900,
         "match": "another environment: GPU", "nearness": [2.0, 1.0, 0.7]},
    ]  # fmt: skip
    lines = hook_verdict(facts)
    assert lines[0] == f"loading the default model here raises: {error}"
    assert lines[1] == "no model covers this GPU: the hook runs PyTorch's own convolutions (warned once)"
    assert lines[2].startswith("nearest model: joint-h100-h200-cudnn91900 (NVIDIA H200, cuDNN 91900)")
    assert lines[3].startswith(
        "make one: `algosel sweep --quick 20 --out data/sweeps/a100-sxm4-80gb-cudnn91900` then `algosel train "
        "data/sweeps/a100-sxm4-80gb-cudnn91900`"
    )
    lines = hook_verdict(_facts(True, error, None, local=["models/a100-cudnn91900"]))
    assert "enabled(selector=Selector.load('models/a100-cudnn91900'))" in lines[1]


def test_verdict_for_a_gpu_of_a_joint_models_family() -> None:
    facts = _facts(True, None, None)
    facts["here"] = {"gpu_name": "NVIDIA H800", "cudnn": 91900, "compute_capability": 9.0}
    facts["default_models"]["cudnn"]["coverage"] = "family"
    lines = hook_verdict(facts)
    assert lines[0].startswith(
        "joint-h100-h200-cudnn91900 is a joint model of this GPU's family, not trained on this GPU"
    )
    assert "`algosel sweep --quick 20 --out data/sweeps/h800-cudnn91900`" in lines[0]
    assert lines[1].startswith("the hook runs joint-h100-h200-cudnn91900's choice where its gain")


def test_verdict_for_a_gpu_with_its_model_with_and_without_the_frontend() -> None:
    with_frontend = hook_verdict(_facts(True, None, None))
    assert with_frontend[0].startswith("the hook runs joint-h100-h200-cudnn91900's choice where its gain")
    assert "verify=k" in with_frontend[0] and "passes through" in with_frontend[0]
    assert "built on first use" in with_frontend[1]
    assert with_frontend[2].startswith("host path: Python (")
    built = _facts(True, None, None)
    built["extension"] = "built: /cache/ext/algosel_conv_ext.so"
    assert hook_verdict(built)[2] == "host path: compiled"
    without = hook_verdict(_facts(True, None, "nvidia-cudnn-frontend is not installed"))
    assert "cannot be built (nvidia-cudnn-frontend is not installed)" in without[1]
    assert "passes through to PyTorch" in without[1]
    report = format_report(_facts(True, None, None))
    assert "0: NVIDIA H200 (cc 9.0, 132 SMs, 128 GiB)" in report
