"""The runtime's rules as one policy object: its defaults, its checks, and executors that take variants of it, each
with statistics of its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from algosel.candidates import DEFAULT_ID
from algosel.runtime import hook
from algosel.runtime.policy import (
    DEFAULT_POLICY,
    LookPolicy,
    SharingPolicy,
    SwitchPolicy,
    TrialPolicy,
    VerifyTimer,
    judge,
)
from algosel.runtime.standins import CpuAsCuda, Preferring, WithoutTimeModel
from algosel.testing import exact_calibration


@pytest.mark.parametrize(("make", "message"), [
    (lambda: SwitchPolicy(min_gain_us=-1.0), "SwitchPolicy.min_gain_us must be a number >= 0, got -1.0"),
    (lambda: SwitchPolicy(plan_build_ms=float("nan")), "SwitchPolicy.plan_build_ms must be a number >= 0, got nan"),
    (lambda: SwitchPolicy(rule_max_timed=2.5), "SwitchPolicy.rule_max_timed must be an integer, got 2.5"),
    (lambda: LookPolicy(probe_calls=2.5), "LookPolicy.probe_calls must be an integer, got 2.5"),
    (lambda: LookPolicy(min_busy_fraction=1.5), "LookPolicy.min_busy_fraction is a share in [0, 1], got 1.5"),
    (lambda: TrialPolicy(min_wins=9), "TrialPolicy.min_wins (9) exceeds pairs (8)"),
    (lambda: TrialPolicy(look_again_every_blocks=0), "TrialPolicy.look_again_every_blocks must be >= 1, got 0"),
    (lambda: SharingPolicy(wait_s=-1), "SharingPolicy.wait_s must be a number >= 0, got -1"),
    (lambda: VerifyTimer(min_repeats=-3), "VerifyTimer.min_repeats must be a number >= 0, got -3"),
    (lambda: SwitchPolicy(looks={"probe_calls": 3}), "SwitchPolicy.looks must be a LookPolicy, got {'probe_calls': 3}"),
])  # fmt: skip
def test_a_bad_rule_is_one_line_naming_the_field_and_value(make, message):
    with pytest.raises(ValueError) as got:
        make()
    assert str(got.value) == message


def test_the_policy_is_twelve_fields_or_fewer_of_measured_costs_noise_bounds_and_procedures():
    """The policy the rule weighs: what a decision rests on, nothing a zoo tuned (docs/hook.md, "The policy")."""
    names = [f.name for f in dataclasses.fields(SwitchPolicy)]
    assert len(names) <= 12, names
    assert names == ["min_gain_us", "min_measured_ratio", "python_path_overhead_us", "plan_build_ms",
                     "timing_overhead_ms", "expected_run_steps", "rule_max_timed", "timer", "looks", "trial",
                     "sharing"]  # fmt: skip


def test_the_policy_is_frozen_and_variants_are_made_by_replace():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_POLICY.min_gain_us = 1.0  # type: ignore[misc]
    variant = dataclasses.replace(DEFAULT_POLICY, min_gain_us=5.0)
    assert variant.min_gain_us == 5.0 and DEFAULT_POLICY.min_gain_us == 20.0 and variant != DEFAULT_POLICY
    assert SwitchPolicy() == DEFAULT_POLICY and hash(SwitchPolicy()) == hash(DEFAULT_POLICY)


def test_the_rules_read_the_policy_they_are_given():
    times = {DEFAULT_ID: 0.100, "gemm:fc": 0.070}  # 30 us saved, 1.43x faster
    assert judge(DEFAULT_POLICY, "k", "gemm:fc", times, 0.100, "measured", 1.03, 0.0).candidate_id == "gemm:fc"
    strict = dataclasses.replace(DEFAULT_POLICY, min_gain_us=40.0)
    assert judge(strict, "k", "gemm:fc", times, 0.100, "measured", 1.03, 0.0).reason == "gain below the threshold"
    assert judge(DEFAULT_POLICY, "k", "gemm:fc", times, 0.100, "measured", 1.5, 0.0).passes_through  # 1.43 < 1.5
    assert judge(DEFAULT_POLICY, "k", "gemm:fc", times, 0.100, "measured", 1.03, 15.0).passes_through  # + host cost
    # a GPU-bound step: no least gain, the noise bound and the host costs still
    small = {DEFAULT_ID: 0.100, "gemm:fc": 0.090}  # 10 us saved, 1.11x faster
    assert judge(DEFAULT_POLICY, "k", "gemm:fc", small, 0.100, "measured", 1.03, 0.0).passes_through
    bound = judge(DEFAULT_POLICY, "k", "gemm:fc", small, 0.100, "measured", 1.03, 0.0, device_bound=True)
    assert (bound.candidate_id, bound.reason) == ("gemm:fc", "kept for a GPU-bound step")
    assert judge(DEFAULT_POLICY, "k", "gemm:fc", small, 0.100, "measured", 1.03, 11.0, device_bound=True).passes_through


def test_an_executor_takes_a_policy_and_its_shorthands(shipped):
    policy = dataclasses.replace(DEFAULT_POLICY, looks=LookPolicy(probe_calls=3))
    ex = hook.Executor(selector=shipped, live=False, policy=policy, min_gain_us=7.0)
    assert (ex.policy.looks.probe_calls, ex.policy.min_gain_us, ex.probe_calls, ex.min_gain_us) == (3, 7.0, 3, 7.0)
    assert hook.Executor(selector=shipped, live=False, policy=policy, probe_calls=5).policy.looks == LookPolicy(5)
    with pytest.raises(ValueError, match=r"^policy must be a SwitchPolicy, got \{'min_gain_us': 5\}$"):
        hook.Executor(selector=shipped, policy={"min_gain_us": 5})


def test_each_executor_counts_its_own_calls_and_stats_sums_them(shipped):
    """Statistics are per executor (``Executor.stats``); ``hook.stats()`` is their sum over the live executors."""
    hook.reset_stats()
    cpu = CpuAsCuda()  # the CPU's calls routed as a GPU's
    gemm = hook.Executor(selector=Preferring(shipped, "gemm", recorded=False), live=False, cache=False,
                         device_probe=cpu, calibration=exact_calibration())  # fmt: skip
    aside = hook.Executor(selector=WithoutTimeModel(shipped), live=False, cache=False, device_probe=cpu)
    x, w = torch.randn(4, 64, 6, 6), torch.randn(32, 64, 6, 6)  # fully connected mode: GEMM pays for the first
    with hook.enabled(gemm):
        F.conv2d(x, w)
        F.conv2d(x, w)
    with hook.enabled(aside):
        F.conv2d(x, w)
    assert gemm.stats() == {"gemm": 2}
    assert aside.stats() == {"pytorch:no calibrated time model": 1}
    assert hook.stats() == {"gemm": 2, "pytorch:no calibrated time model": 1}
    hook.reset_stats()
    assert gemm.stats() == aside.stats() == hook.stats() == {}


@pytest.mark.parametrize("scope", ["layer", "problem"])
def test_a_layers_live_list_serves_its_other_input_sizes(shipped, scope):
    """Multi-scale training meets every layer at many input sizes: with ``scope="layer"`` (the runtime's) cuDNN's
    list is queried once per layer (and heuristic modes), and each size ranks that list for itself; "problem" queries
    each."""
    from algosel.problem import ConvProblem
    from algosel.runtime.candidates import ModelCandidates
    from algosel.spaces.base import Candidate

    asked = []

    def lister(problem, modes):  # a list of its own per problem: the records' engine configs of the nearest problem
        asked.append((problem, modes))
        chosen = [c for c in shipped.choose(problem, top_k=40) if c.space == "cudnn"]
        return [Candidate("cudnn", c.candidate_id.split(":", 1)[1], c.engine_id, c.knobs, rank_a=i)
                for i, c in enumerate(chosen[: 4 + problem.h % 7])]  # fmt: skip

    source = ModelCandidates(shipped, live=True, scope=scope, lister=lister)
    layer = dict(c=64, k=64, r=3, s=3, pad_h=1, pad_w=1, dtype="float16", layout="nhwc")
    problems = [ConvProblem(n=n, h=h, w=w, **layer) for n, h, w in [(8, 64, 96), (8, 72, 104), (4, 80, 112)]]
    other = ConvProblem(n=8, h=64, w=96, **{**layer, "k": 128})  # another layer
    got = [source.ranked(p, True, 3, ("a", "fallback")) for p in [*problems, other]]
    assert all(modes == ("a", "fallback") for _, modes in asked)

    def live_ids(ranked):
        return [r["candidate_id"] for r in ranked.rows if r["candidate_id"].startswith("cudnn:")]

    if scope == "layer":
        assert [p for p, _ in asked] == [problems[0], other] and (source.live_queries, source.live_reused) == (2, 2)
        assert live_ids(got[1]) == live_ids(got[2]) == live_ids(got[0])
    else:
        assert [p for p, _ in asked] == [*problems, other] and (source.live_queries, source.live_reused) == (4, 0)
        assert len(live_ids(got[0])) != len(live_ids(got[1]))  # each size's own list
    for p, ranked in zip([*problems, other], got):  # the model ranks each size's list for that size
        ids = [c.candidate_id for c in ranked.choices]
        assert len(ids) == 3 and set(ids) <= set(live_ids(ranked)) | {r["candidate_id"] for r in ranked.rows}
        assert ranked.choices == shipped.rank_rows(p, ranked.rows)[:3]
    assert source.ranked(problems[0], True, 3, ("a",)) and len(asked) == (3 if scope == "layer" else 5)  # modes apart


def test_a_bad_list_scope_is_one_line():
    from algosel.runtime.candidates import ModelCandidates

    with pytest.raises(ValueError, match="ModelCandidates scope must be one of .*'net'"):
        ModelCandidates(None, scope="net")
