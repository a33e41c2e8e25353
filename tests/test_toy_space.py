"""Adding a candidate space touches one module and one registration: here, a toy space defined in this file alone
goes through the whole pipeline on CPU (enumerate, measure, records, features, training, offline ranking)."""

from __future__ import annotations

import math

import pytest
import torch

import algosel
from algosel import spaces
from algosel.candidates import DEFAULT_ID
from algosel.learn.features import candidate_vector
from algosel.learn.ranker import RankerParams
from algosel.learn.selector import Selector
from algosel.learn.train import train
from algosel.measure.sweep import SweepCase, Sweeper, run_sweep
from algosel.measure.timing import FakeTimer
from algosel.operands import Operands
from algosel.problem import ConvProblem
from algosel.spaces.base import Candidate, CandidateSpace, PreparedCandidate
from algosel.spaces.pytorch import pytorch_conv

ENV = {"env_id": "cpu-toy", "gpu_name": "none", "cudnn": 0}
#: The toy's "fast" candidate is always the fastest, its "slow" one the slowest.
TIMES = {"toy:fast": 0.5, DEFAULT_ID: 1.0, "toy:slow": 2.0}


class _ToyRunner(PreparedCandidate):
    def __init__(self, problem: ConvProblem, candidate: Candidate):
        self.problem, self.candidate = problem, candidate

    def run(self, ops: Operands) -> torch.Tensor:
        return pytorch_conv(self.problem, ops)


class ToySpace(CandidateSpace):
    """Two candidates for every problem, known without a GPU."""

    name = "toy"
    label = "a toy space"
    from_lists = False

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        return [self.candidate(n, problem.direction) for n in ("fast", "slow")]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        return _ToyRunner(problem, candidate)

    def offline_candidates(self, problem: ConvProblem) -> list[Candidate]:
        return self.enumerate(problem)


@pytest.fixture
def toy():
    spaces.register(ToySpace)
    try:
        yield spaces.get_space("toy")
    finally:
        spaces.unregister("toy")


def _cases(count: int) -> list[SweepCase]:
    out = []
    for i in range(count):
        c, k, hw = 2 + i % 5, 3 + i % 4, 4 + i % 6
        out.append(SweepCase(ConvProblem(n=1 + i % 3, c=c, k=k, h=hw, w=hw, r=3, s=3, pad_h=1, pad_w=1), "grid"))
    return out


def test_the_registry_lists_the_toy_space_after_the_built_in_ones(toy):
    assert spaces.space_names() == ("cudnn", "gemm", "pytorch", "legacy", "toy")
    assert spaces.space_code("toy") == 4
    with pytest.raises(ValueError, match="already registered"):
        spaces.register(ToySpace)


def test_the_toy_space_gets_features_of_its_own(toy):
    p = ConvProblem(n=1, c=2, k=3, h=4, w=4, r=3, s=3)
    rows = [
        {"candidate_id": c.candidate_id, "space": c.space, "engine_id": c.engine_id, "knobs": c.knobs,
         "rank_a": c.rank_a, "rank_b": c.rank_b, "rank_fallback": c.rank_fallback, "notes": ""}
        for c in toy.enumerate(p)
    ]  # fmt: skip
    fast, slow = (candidate_vector(r) for r in rows)
    assert fast[0] == slow[0] == 4  # space_code
    assert fast[1] != slow[1] and 3000 <= fast[1] < 4000  # one engine category per candidate
    assert math.isnan(fast[2])  # no heuristic rank


def test_a_toy_space_is_measured_learnt_and_chosen_offline(toy, tmp_path):
    sweeper = Sweeper([spaces.get_space("pytorch"), toy], FakeTimer(lambda label: TIMES[label]), ENV, device="cpu")
    report = run_sweep(_cases(40), sweeper, tmp_path / "sweep", progress=False)
    assert report.measured == 40
    model_dir, summary = train(
        [tmp_path / "sweep"],
        models_root=tmp_path / "models",
        grid={"objective": ["lambdarank"]},
        base=RankerParams(n_estimators=20, min_child_samples=5, num_threads=1),
        folds=2,
        progress=False,
    )
    assert summary["spaces"] == ["pytorch", "toy"]
    assert summary["test_scores"]["model"]["geomean"] == pytest.approx(1.0)
    sel = Selector.load(model_dir)
    unseen = ConvProblem(n=2, c=7, k=9, h=11, w=11, r=3, s=3, pad_h=1, pad_w=1, direction="bwd_filter")
    assert not sel.is_recorded(unseen)
    choices = sel.choose(unseen, top_k=3)
    assert [c.candidate_id for c in choices][0] == "toy:fast"
    assert {c.candidate_id for c in choices} == set(TIMES)
    assert algosel.predict(unseen, model=sel, live=False)[0].candidate_id == "toy:fast"
