"""Processes sharing a persistent cache time each new problem once: the ranks of a DistributedDataParallel job (two
CPU processes over gloo here, with a measurer that stands in for the GPU's) claim a problem before timing it, the
others wait for its decision, and every rank runs the same one. A dead claimant's claim is taken over."""

from __future__ import annotations

import json
import os
import socket
import time

import torch

from algosel.candidates import DEFAULT_ID
from algosel.runtime.claims import ProblemClaims, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _LoggedMeasurer:
    """GEMM lowering 0.1 ms, PyTorch's default 0.2 ms, anything else 2 ms; each timing takes ``delay_s`` (long
    enough for the ranks to meet the same problem while it runs) and is logged to ``log`` with the rank."""

    def __init__(self, log: str, rank: int, delay_s: float):
        self.log, self.rank, self.delay_s = log, rank, delay_s

    def measure_candidates(self, problem, pairs, source="", deadline_s=None):
        time.sleep(self.delay_s)
        with open(self.log, "a") as fh:
            fh.write(json.dumps({"problem": problem.key, "rank": self.rank}) + "\n")
        def t(cid):  # noqa: E306
            return 0.1 if cid.startswith("gemm:") else 0.2 if cid == DEFAULT_ID else 2.0
        return [{"candidate_id": c.candidate_id, "status": "ok", "time_ms_median": t(c.candidate_id),
                 "host_overhead_us": 5.0} for _, c in pairs]  # fmt: skip


def _rank(rank: int, world: int, port: int, folder: str, delay_s: float, model_dir: str) -> None:
    """One rank: a DDP training loop of a small network through the hook in verify mode, the cache shared;
    ``model_dir`` the selector's candidates (any model: the stand-in prefers GEMM lowering and predicts the times)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from algosel.learn.selector import Selector
    from algosel.runtime import hook
    from algosel.runtime.cache import RuntimeCache
    from algosel.runtime.standins import FakeDevice, Preferring

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 1),
                              torch.nn.ReLU(), torch.nn.Conv2d(16, 4, 6))  # fmt: skip
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache = RuntimeCache(folder, {"gpu_name": "a GPU of the job", "cudnn": 1})
    ex = hook.Executor(selector=Preferring(Selector.load(model_dir), "gemm", recorded=False), verify=3, live=False,
                       cache=cache, measurer=_LoggedMeasurer(os.path.join(folder, "timed.jsonl"), rank, delay_s),
                       device_probe=FakeDevice(can_time=True), look_first=False, probe_calls=0)  # fmt: skip
    torch.manual_seed(rank)
    for _ in range(3):
        with hook.enabled(ex):
            opt.zero_grad()
            model(torch.randn(2, 3, 6, 6)).square().mean().backward()
            opt.step()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as fh:
        json.dump({"reasons": ex.route_reasons(), "measured": ex.measured_problems}, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_the_ranks_of_a_job_time_each_problem_once_and_run_the_same_decisions(tmp_path, slice_model):
    """The ranks are processes of their own, as torchrun's are: forked from a server that imported torch and the
    hook once (a fresh interpreter each, as spawn makes them, imports them again: seconds of CPU each)."""
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "algosel.runtime.hook", __name__])
    mp.start_processes(_rank, args=(2, _free_port(), str(tmp_path), 0.3, str(slice_model[0])), nprocs=2, join=True,
                       start_method="forkserver")  # fmt: skip
    timed = [json.loads(line) for line in (tmp_path / "timed.jsonl").read_text().splitlines()]
    problems = [t["problem"] for t in timed]
    assert problems and len(problems) == len(set(problems)), timed  # once per job, not once per rank
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["reasons"] == ranks[1]["reasons"] and "gemm" in ranks[0]["reasons"]
    assert ranks[0]["measured"] + ranks[1]["measured"] == len(problems)
    assert not list((tmp_path / "runtime").glob("*/claims/*.claim"))  # every claim released


def test_a_claim_is_one_processes_until_released_or_abandoned(tmp_path):
    now = [1000.0]
    mine, theirs = (ProblemClaims(tmp_path, stale_s=60.0, clock=lambda: now[0]) for _ in range(2))
    assert mine.claim("p") and not theirs.claim("p")
    mine.release("p")
    assert theirs.claim("p") and not mine.claim("p")
    now[0] += 61.0  # the holder hangs past the stale age: taken over
    assert mine.claim("p")
    claim = next((tmp_path / "claims").glob("*.claim"))
    claim.write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "at_s": now[0]}))
    assert theirs.claim("p")  # its process is gone (no such pid on this host): taken over at once


def test_waiting_for_a_decision_ends_when_it_lands_or_at_the_timeout():
    answers = iter([None, None, "decided"])
    slept = []
    assert wait_for(lambda: next(answers), 5.0, poll_s=0.5, clock=lambda: 0.0, sleep=slept.append) == "decided"
    assert slept == [0.5, 0.5]
    ticks = iter([0.0, 0.4, 0.8, 1.2])
    assert wait_for(lambda: None, 1.0, poll_s=0.4, clock=lambda: next(ticks), sleep=lambda s: None) is None


def test_a_rank_that_waits_in_vain_times_the_problem_itself(tmp_path, slice_model):
    """Another process holds the claim and never decides: past ``policy.sharing.wait_s`` this process times it
    itself."""
    import dataclasses

    from algosel.learn.selector import Selector
    from algosel.problem import ConvProblem
    from algosel.runtime import hook
    from algosel.runtime.cache import RuntimeCache
    from algosel.runtime.policy import DEFAULT_POLICY, SharingPolicy
    from algosel.runtime.standins import FakeDevice, Preferring

    cache = RuntimeCache(tmp_path, {"gpu_name": "a GPU of the job", "cudnn": 1})
    problem = ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6)
    assert ProblemClaims(cache.folder, stale_s=60.0).claim(problem.key)  # held by "another process" (this one)
    measurer = _LoggedMeasurer(str(tmp_path / "timed.jsonl"), 0, 0.0)
    ex = hook.Executor(selector=Preferring(Selector.load(slice_model[0]), "gemm", recorded=False), verify=3,
                       live=False, cache=cache, measurer=measurer, device_probe=FakeDevice(can_time=True),
                       policy=dataclasses.replace(DEFAULT_POLICY, sharing=SharingPolicy(wait_s=0.0)))  # fmt: skip
    d = ex.decide(problem, torch.device("cpu"))
    assert d.source == "measured" and d.candidate_id.startswith("gemm:") and ex.measured_problems == 1
