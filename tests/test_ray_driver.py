"""The parts of a sweep on Ray that need no cluster (algosel.measure.ray_cluster, algosel.measure.ray_sweep): task
options and slots, chunks, what happens to a task whose worker died on every attempt, the time budget, and the
command line's one-line errors (Ray missing, --gpus with --ray, an unreachable address). tests/test_ray_sweep.py
runs sweeps on a local cluster."""

from __future__ import annotations

import json
import socket
import sys
from collections import deque
from pathlib import Path

import pytest

from algosel.cli import main
from algosel.measure import ray_sweep
from algosel.measure.ray_cluster import RayUnavailableError, check_reachable, require_ray, task_options, task_slots
from algosel.measure.ray_sweep import RaySweepReport, chunked
from algosel.measure.sweep import SweepCase
from algosel.problem import ConvProblem

CASES = [SweepCase(ConvProblem(n=n, c=3, k=4, h=5, w=5, r=3, s=3), "grid") for n in range(1, 6)]


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("algosel sweep: error: ")
    return lines[0]


def test_a_gpu_task_runs_in_a_fresh_worker_and_custom_resources_go_by_name() -> None:
    assert task_options({"num_gpus": 1}) == {"num_gpus": 1, "max_calls": 1}
    assert task_options({"num_cpus": 1}) == {"num_cpus": 1}  # a CPU worker is reused between tasks
    assert task_options({"num_gpus": 1, "H200": 1}) == {"num_gpus": 1, "resources": {"H200": 1}, "max_calls": 1}
    with pytest.raises(ValueError, match="num_gpus=0"):
        task_options({"num_gpus": 0})
    with pytest.raises(ValueError, match="empty"):
        task_options({})


def test_task_slots_count_the_scarcest_resource_and_a_cpu_each() -> None:
    cluster = {"CPU": 16.0, "GPU": 8.0, "memory": 1e11, "node:10.0.0.1": 1.0}
    assert task_slots({"num_gpus": 1}, cluster) == 8
    assert task_slots({"num_gpus": 1}, {"CPU": 4.0, "GPU": 8.0}) == 4  # a task takes one CPU too
    assert task_slots({"num_gpus": 0.5}, cluster) == 16
    assert task_slots({"num_cpus": 1}, {"CPU": 2.0}) == 2
    assert task_slots({"num_gpus": 1}, {"CPU": 2.0}) == 0


class _FakeRay:
    def __init__(self, cluster):
        self.cluster = cluster

    def cluster_resources(self):
        return self.cluster


def test_in_flight_is_twice_the_slots_and_a_cluster_without_room_is_one_line() -> None:
    assert ray_sweep.TaskSlots(_FakeRay({"CPU": 8.0, "GPU": 4.0}), {"num_gpus": 1}, None).limit() == 8
    assert ray_sweep.TaskSlots(_FakeRay({"CPU": 8.0, "GPU": 4.0}), {"num_gpus": 1}, 3).limit() == 3
    with pytest.raises(ValueError, match=r"no room for a sweep task asking num_gpus=1: it has CPU 2, GPU 0$"):
        ray_sweep.TaskSlots(_FakeRay({"CPU": 2.0, "node:x": 1.0}), {"num_gpus": 1}, None).limit()


def test_chunks_keep_the_order_of_the_cases() -> None:
    assert chunked(CASES, 2) == [CASES[0:2], CASES[2:4], CASES[4:5]]
    assert chunked(CASES, 16) == [CASES]
    assert chunked([], 4) == []
    with pytest.raises(ValueError, match="got 0"):
        chunked(CASES, 0)


def test_a_chunk_whose_worker_always_died_goes_back_one_case_a_task(tmp_path: Path) -> None:
    waiting, crashed, report = deque([CASES[4:5]]), {}, RaySweepReport()
    ray_sweep.after_worker_death(
        CASES[:3], RuntimeError("worker died"), waiting, crashed, tmp_path / "in.json", 3, report
    )
    assert list(waiting) == [[CASES[0]], [CASES[1]], [CASES[2]], [CASES[4]]]  # first in the queue, in order
    assert report.split_chunks == 1 and not crashed and not (tmp_path / "in.json").exists()


def test_a_single_case_whose_worker_always_died_is_counted_for_later_runs(tmp_path: Path) -> None:
    path = tmp_path / "inflight-0of1.json"
    waiting, crashed, report = deque(), {CASES[1].key: 1}, RaySweepReport()
    ray_sweep.after_worker_death([CASES[0]], RuntimeError("worker died"), waiting, crashed, path, 1, report)
    assert not waiting and report.skipped_crashed == 1
    # Two deaths (the attempt and one retry): skipped by later runs, as a case that ended a local sweep twice.
    assert json.loads(path.read_text()) == {CASES[1].key: 1, CASES[0].key: 2}


def test_the_budget_admits_a_task_only_if_it_ends_in_time() -> None:
    # A budget of 100 s, tasks of 20 s, 4 slots (8 in flight).
    assert ray_sweep.task_fits_budget(100.0, 50.0, [], 7, 8)  # nothing known yet: submit
    assert ray_sweep.task_fits_budget(100.0, 70.0, [20.0], 3, 8)  # starts at once, ends at 90 s
    assert ray_sweep.task_fits_budget(100.0, 50.0, [20.0], 7, 8)  # after the 4 running ones: ends at ~90 s
    assert not ray_sweep.task_fits_budget(100.0, 70.0, [20.0], 7, 8)  # so at ~110 s
    assert not ray_sweep.task_fits_budget(100.0, 85.0, [20.0], 0, 8)
    assert ray_sweep.task_fits_budget(None, 85.0, [20.0], 7, 8)


def test_without_ray_sweep_ray_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(RayUnavailableError):
        require_ray()
    assert main(["sweep", "--out", str(tmp_path / "out"), "--suites", "none", "--grid", "2", "--ray"]) == 2
    assert "pip install 'algosel[ray]'" in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_gpus_and_ray_together_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sweep", "--out", str(tmp_path), "--suites", "none", "--grid", "2", "--gpus", "2", "--ray"]) == 2
    assert "--gpus 2 and --ray: choose one" in _one_line_error(capsys.readouterr().err)


def _closed_port() -> int:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_address_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(RayUnavailableError, match=f"--ray ray://{address}: cannot reach a Ray cluster there"):
        check_reachable(f"ray://{address}")
    with pytest.raises(RayUnavailableError, match="port 'head' is not a number"):
        check_reachable("10.0.0.1:head")
    check_reachable("auto")  # Ray's own words are left to Ray
    with pytest.raises(RayUnavailableError, match=f"RAY_ADDRESS {address}: cannot reach"):
        check_reachable(address, source="RAY_ADDRESS")
    pytest.importorskip("ray")
    assert main(["sweep", "--out", str(tmp_path), "--suites", "none", "--grid", "2", "--ray", address]) == 2
    assert f"--ray {address}: cannot reach a Ray cluster there" in _one_line_error(capsys.readouterr().err)
    monkeypatch.setenv("RAY_ADDRESS", address)  # where --ray alone connects
    assert main(["sweep", "--out", str(tmp_path), "--suites", "none", "--grid", "2", "--ray"]) == 2
    assert f"RAY_ADDRESS {address}: cannot reach a Ray cluster there" in _one_line_error(capsys.readouterr().err)
