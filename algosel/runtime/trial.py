"""The step trial: whether an executor's switches make the training step faster, measured on the step itself.

Probation's looks at the device (:mod:`algosel.runtime.probation`) guess, call by call, whether a switch's device time
can shorten the step; the step's own time says it. Once an executor's routes are decided and its blocks meet no new
call signature, its next ``2 * pairs`` blocks (``enabled()`` blocks, or optimizer steps under ``enable()``) run by
turns with its switches and with PyTorch's own ``F.conv2d`` (the executor steps aside), in pairs of ABBA order, and
each block's span is measured on the device's timeline: from a CUDA event recorded on the current stream as the
block begins to one recorded as it ends. That span is what a block costs a training loop either way: in a
host-bound step the device waits for the host and the span is the host's time to enqueue the block (the hook's own
host cost included); in a device-bound one it is the device's time to run it (an event recorded while the device is
still busy with earlier work runs once that work is done, so the block before is not counted).

The verdict compares the pairs' ratios (switched / PyTorch's): the switches stay where the median ratio is at most
``1 - margin`` and at least ``min_wins`` of the pairs found them faster (a sign test: 7 of 8 happens by chance in
3.5% of trials of two equal arms); the trial is inconclusive where the ratios scatter by more than ``max_scatter``
(blocks that differ from each other, as a detection model's input sizes do); else PyTorch's own convolutions are
at least as fast, and the switches go.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from algosel.runtime.policy import DEFAULT_POLICY, SwitchPolicy

#: The verdicts: the switches stay, they go, or the blocks scattered too much to tell.
KEEP, DROP, UNCLEAR = "switches faster", "pytorch's as fast", "inconclusive"


@dataclass
class StepTrial:
    """One trial of an executor's switches (see the module docstring); driven by its blocks' begin and end."""

    clock: Any
    pairs: int = DEFAULT_POLICY.trial.pairs
    margin: float = DEFAULT_POLICY.trial.margin
    min_wins: int = DEFAULT_POLICY.trial.min_wins
    max_scatter: float = DEFAULT_POLICY.trial.max_scatter
    blocks: int = 0  # blocks begun
    spans_ms: dict[str, list[float]] = field(default_factory=lambda: {"on": [], "off": []})
    _open: tuple[str, Any] | None = None  # the block under way: its arm and start mark
    _pending: list[tuple[str, Any, Any]] = field(default_factory=list)  # ended blocks whose spans the device owes

    @classmethod
    def from_policy(cls, clock: Any, policy: SwitchPolicy) -> StepTrial:
        """A trial with ``policy``'s pairs, margin, least wins and most scatter."""
        t = policy.trial
        return cls(clock, t.pairs, t.margin, t.min_wins, t.max_scatter)

    def arm(self, block: int) -> str:
        """The arm of block ``block`` (from 0): pairs in ABBA order, ``on`` first."""
        first, second = ("on", "off") if (block // 2) % 2 == 0 else ("off", "on")
        return first if block % 2 == 0 else second

    def begin(self) -> bool | None:
        """A block begins: True where it runs PyTorch's own convolutions, False with the switches, None where the
        trial has measured all its blocks (the verdict is ready once the device has run them)."""
        self._collect()
        if self.blocks >= 2 * self.pairs:
            return None
        arm = self.arm(self.blocks)
        self.blocks += 1
        self._open = (arm, self.clock.mark())
        return arm == "off"

    def end(self) -> None:
        """The block begun last ended."""
        if self._open is not None:
            arm, start = self._open
            self._pending.append((arm, start, self.clock.mark()))
            self._open = None

    def _collect(self) -> None:
        while self._pending:
            arm, start, end = self._pending[0]
            span = self.clock.span_ms(start, end)
            if span is None:
                return
            self.spans_ms[arm].append(span)
            self._pending.pop(0)

    def verdict(self) -> str | None:
        """:data:`KEEP`, :data:`DROP` or :data:`UNCLEAR` once every block's span is in; None before."""
        self._collect()
        on, off = self.spans_ms["on"], self.spans_ms["off"]
        if len(on) < self.pairs or len(off) < self.pairs:
            return None
        logs = [math.log(a / b) for a, b in zip(on, off) if a > 0 and b > 0]
        if len(logs) < self.pairs:
            return UNCLEAR
        middle = statistics.median(logs)
        if statistics.median(abs(v - middle) for v in logs) > self.max_scatter:
            return UNCLEAR
        wins = sum(v < 0 for v in logs)
        return KEEP if middle <= math.log(1 - self.margin) and wins >= self.min_wins else DROP

    def ratio(self) -> float:
        """The median of the pairs' ratios (switched / PyTorch's) measured so far (nan before a pair)."""
        pairs = [a / b for a, b in zip(self.spans_ms["on"], self.spans_ms["off"]) if b > 0]
        return statistics.median(pairs) if pairs else math.nan
