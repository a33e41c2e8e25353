"""Verify mode's measurements kept as records (``Executor(record_measured=folder)``, algosel.runtime.measured): the
sweeper's rows of every measured problem, in this GPU's environment, become a dataset ``algosel train`` reads. On
the CPU: a GEMM lowering (the top 1) and PyTorch's default measured by the sweeper with a fake timer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from algosel.candidates import DEFAULT_ID
from algosel.measure.sweep import Sweeper
from algosel.measure.timing import FakeTimer
from algosel.problem import ConvProblem
from algosel.records.store import load_records
from algosel.runtime.executor import Executor
from algosel.runtime.measured import MeasuredRecords
from algosel.runtime.standins import FakeDevice, Preferring

ENV = {"env_id": "e0", "gpu_name": "NVIDIA H200", "cudnn": 91900, "torch": "2.11.0"}
FC = ConvProblem(n=16, c=64, k=96, h=6, w=6, r=6, s=6, dtype="float32", layout="nchw")


def test_what_verify_mode_measures_becomes_a_dataset(shipped, tmp_path):
    # 0.1 ms: a short call (under SwitchPolicy.verify_whole_list_ms), so only the shortlist and the default are timed
    measurer = Sweeper([], FakeTimer(lambda label: 0.1), {"env_id": "runtime"}, device="cpu", operand_sets=1,
                       reference="first", math="caller")  # fmt: skip
    records = MeasuredRecords(tmp_path / "measured", environment=lambda: ENV)
    ex = Executor(selector=Preferring(shipped, "gemm", recorded=False), verify=1, measurer=measurer, cache=False,
                  device_probe=FakeDevice(can_time=True), native=False, record_measured=records)  # fmt: skip
    ex.decide(FC, torch.device("cpu"))
    assert records.problem_keys == {FC.key} and ex.measured_problems == 1
    part = records.close()
    assert part.name.startswith("part-verify-") and not records.journal.path.exists()
    frame, envs = load_records(tmp_path / "measured")
    assert set(frame["problem_key"]) == {FC.key} and set(frame["env_id"]) == {"e0"} and envs["e0"]["cudnn"] == 91900
    assert DEFAULT_ID in set(frame["candidate_id"]) and set(frame["source"]) == {"verify"}
    assert records.close() is None  # nothing more to move


def test_a_journal_left_by_a_killed_process_becomes_a_part_when_the_folder_is_next_opened(tmp_path):
    folder = tmp_path / "measured"
    code = ("import os, sys; from algosel.runtime.measured import MeasuredRecords\n"
            "r = MeasuredRecords(sys.argv[1], environment=lambda: {'env_id': 'e0'})\n"
            "r.journal.append('case', [], {'env_id': 'e0'})\n"
            "os._exit(9)\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(folder)], check=False, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    (journal,) = folder.glob("journal-*.jsonl")
    assert json.loads(journal.read_text())["case_key"] == "case"
    MeasuredRecords(folder, environment=lambda: ENV)
    assert not journal.exists()  # its rows (none here) moved: an empty journal leaves no part


def test_record_measured_of_the_wrong_kind_is_one_error_naming_it():
    with pytest.raises(ValueError, match="record_measured must be the path of a dataset folder, got 42"):
        Executor(record_measured=42)
