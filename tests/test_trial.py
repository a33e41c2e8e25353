"""The step trial's arms and verdicts (algosel.runtime.trial), with a clock that stands in for the device's."""

from __future__ import annotations

import math

import pytest

from algosel.runtime.device import CudaDevice
from algosel.runtime.policy import DEFAULT_POLICY, TrialPolicy
from algosel.runtime.trial import DROP, KEEP, UNCLEAR, StepTrial


class ScriptedClock:
    """Marks are numbers; a block's span is ``span(arm, block)`` ms, where the device has run it (``ready``)."""

    def __init__(self, span, ready=lambda block: True):
        self.marks, self.span, self.ready = 0, span, ready

    def mark(self):
        self.marks += 1
        return self.marks - 1

    def span_ms(self, start, end):
        block = start // 2
        return self.span(StepTrial.arm(None, block), block) if self.ready(block) else None


def run(trial: StepTrial, blocks: int) -> list[bool | None]:
    out = []
    for _ in range(blocks):
        out.append(trial.begin())
        trial.end()
    return out


def test_the_arms_alternate_in_pairs_of_abba_order_and_then_the_trial_ends():
    trial = StepTrial(ScriptedClock(lambda arm, b: 1.0), pairs=4)
    # True: PyTorch's own convolutions (the executor steps aside); None: every block measured
    assert run(trial, 9) == [False, True, True, False, False, True, True, False, None]
    assert trial.spans_ms == {"on": [1.0] * 4, "off": [1.0] * 4}


@pytest.mark.parametrize(("on_ms", "off_ms", "verdict"), [
    (lambda b: 0.98, lambda b: 1.0, KEEP),  # 2% faster in every pair
    (lambda b: 1.0, lambda b: 1.0, DROP),  # as fast: PyTorch's own costs nothing to keep
    (lambda b: 1.02, lambda b: 1.0, DROP),  # slower
    (lambda b: 0.997, lambda b: 1.0, DROP),  # faster, by less than the margin (0.5%)
    (lambda b: 0.98 if b != 0 else 1.05, lambda b: 1.0, KEEP),  # 7 of 8 pairs faster: enough
    (lambda b: 0.98 if b not in (0, 3) else 1.05, lambda b: 1.0, DROP),  # 6 of 8: not enough
    (lambda b: 1.0, lambda b: 0.5 if b % 4 == 1 else 2.0, UNCLEAR),  # blocks unlike each other
])  # fmt: skip
def test_the_verdict_keeps_the_switches_only_where_most_pairs_find_them_faster_by_the_margin(on_ms, off_ms, verdict):
    trial = StepTrial(ScriptedClock(lambda arm, b: on_ms(b) if arm == "on" else off_ms(b)))
    assert trial.verdict() is None
    run(trial, 16)
    assert trial.verdict() == verdict


def test_the_verdict_waits_for_the_device_to_run_the_blocks():
    done = {"up_to": 10}
    trial = StepTrial(ScriptedClock(lambda arm, b: 0.9 if arm == "on" else 1.0, ready=lambda b: b < done["up_to"]))
    assert run(trial, 17)[-1] is None
    assert trial.verdict() is None and len(trial.spans_ms["on"]) + len(trial.spans_ms["off"]) == 10
    done["up_to"] = 16
    assert trial.verdict() == KEEP and math.isclose(trial.ratio(), 0.9)


def test_a_device_without_a_timeline_has_no_clock():
    import torch

    assert CudaDevice().block_clock(torch.device("cpu")) is None


def test_a_trial_from_a_policy_takes_its_numbers():
    import dataclasses

    policy = dataclasses.replace(DEFAULT_POLICY, trial=TrialPolicy(pairs=3, margin=0.1, min_wins=2, max_scatter=0.2))
    trial = StepTrial.from_policy(None, policy)
    assert (trial.pairs, trial.margin, trial.min_wins, trial.max_scatter) == (3, 0.1, 2, 0.2)
    assert StepTrial(None).pairs == DEFAULT_POLICY.trial.pairs
