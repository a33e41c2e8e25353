"""Blocks: an executor's ``enabled()`` blocks (or optimizer steps under ``enable()``), stepping aside, and the step
trial that judges its switches on the step itself.

- Stepping aside: an executor whose every route is PyTorch's own and that met no new call signature in
  ``policy.trial.step_aside_after_blocks`` blocks in a row leaves ``F.conv2d`` as PyTorch's own in its next blocks
  (so they cost what the hook switched off costs), routing one block in ``look_again_every_blocks`` to meet new
  signatures.
- The step trial (:mod:`algosel.runtime.trial`): once every route is decided, a switch remains, and a block met
  nothing new, the next blocks run by turns with and without the switches; the switches stay only where the blocks
  with them were faster (:data:`~algosel.runtime.trial.KEEP`), go where they were not
  (:data:`~algosel.runtime.policy.TRIAL_SAME`), and where it cannot tell, stay where probation's full shares would
  have kept them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from algosel.runtime.decision import Reason
from algosel.runtime.device import DeviceProbe
from algosel.runtime.policy import SwitchPolicy
from algosel.runtime.probation import Probation
from algosel.runtime.routes import RouteBook
from algosel.runtime.trial import DROP, KEEP, StepTrial

log = logging.getLogger(__name__)


class Blocks:
    """One executor's blocks (see the module docstring)."""

    def __init__(self, policy: SwitchPolicy, routes: RouteBook, probation: Probation, device: DeviceProbe,
                 first_device: Callable[[], Any], recording: bool, step_aside: bool,
                 on_dropped: Callable[[], None]):  # fmt: skip
        self.policy, self.routes, self.probation, self.device = policy, routes, probation, device
        self._first_device = first_device  # the device of the executor's first planned call (None before)
        self._recording = recording  # a recorder counts every call in Python: never aside, no trial
        self.step_aside = bool(step_aside)
        self._on_dropped = on_dropped  # routes were made PyTorch's after they were held in a dispatch table
        #: Blocks in a row that met no new call signature, and blocks stepped aside so far.
        self.quiet_blocks = 0
        self.blocks_aside = 0
        self.blocks_ended = 0
        #: The step trial under way, and its verdict once made (``trial_ratio``: median switched / PyTorch's span).
        self.trial: StepTrial | None = None
        self.trial_verdict: str | None = None
        self.trial_ratio = math.nan
        self._open = False

    def begin(self) -> bool:
        """A block begins: True where it leaves ``F.conv2d`` as PyTorch's own (it steps aside, or it is a step
        trial's block without the switches)."""
        self._open = True
        if self.trial is None and self.trial_verdict is None and self._trial_ready():
            self.trial = StepTrial.from_policy(self._clock(), self.policy)
        if self.trial is not None:
            aside = self.trial.begin()
            if aside is not None:
                return aside
            verdict = self.trial.verdict()
            if verdict is None:  # the device has not run the last blocks yet: routed meanwhile
                return False
            self._judged(verdict)
        return self.stands_aside()

    def done(self, routes_before: int, unsettled: bool = False) -> None:
        """A block ended; ``routes_before``: the executor's routes when it began; ``unsettled``: some of its calls
        passed through unrouted (the model loading, their problems being decided), as new signatures do."""
        changed = len(self.routes) != routes_before or unsettled
        self.quiet_blocks = 0 if changed else self.quiet_blocks + 1
        if not self._open:  # a block inside the process's switch (enable()): not one of its own
            return
        self._open = False
        self.blocks_ended += 1
        if self.trial is not None:
            self.trial.end()
            if changed:  # a new call signature: the blocks measured are not alike; a new trial once quiet again
                self.trial = None

    def stands_aside(self) -> bool:
        """Whether the next block leaves ``F.conv2d`` as PyTorch's own; counts the block where it does."""
        if not self.step_aside or self._recording or self.quiet_blocks < self.policy.trial.step_aside_after_blocks:
            return False
        if not self.routes.all_native():
            return False
        self.blocks_aside += 1
        # one block in look_again_every_blocks is routed, to meet new call signatures
        return self.blocks_aside % self.policy.trial.look_again_every_blocks != 0

    def busy_fractions(self) -> tuple[float, float]:
        """Probation's least busy shares (per route, pooled): ``trial_busy_fraction`` while a step trial is still to
        judge the switches, else ``min_busy_fraction`` and ``min_network_busy_fraction``."""
        if self.trial_verdict is None and self._trial_possible():
            return self.policy.trial.busy_fraction, self.policy.trial.busy_fraction
        return self.policy.looks.min_busy_fraction, self.policy.looks.min_busy_fraction

    def deciding(self) -> int:
        """Signatures still looking at the device or on probation, plus one while a step trial is under way or due."""
        due = self.trial is not None or (
            self.trial_verdict is None and self._trial_possible() and self.routes.switches())
        return self.routes.undecided() + due

    def _clock(self) -> Any:
        device = self._first_device()
        return None if device is None else self.device.block_clock(device)

    def _trial_possible(self) -> bool:
        """Whether a step trial can judge the switches: it can step aside, its blocks recur, and its device has a
        timeline to read."""
        return self.step_aside and not self._recording and self.blocks_ended > 0 and self._clock() is not None

    def _trial_ready(self) -> bool:
        """Whether a step trial starts at this block: possible, every route decided, the block before met nothing
        new, and a switch to judge."""
        return (self._trial_possible() and self.quiet_blocks >= 1 and not self.routes.undecided()
                and self.routes.switches())  # fmt: skip

    def _judged(self, verdict: str) -> None:
        """The trial's verdict: the switches stay (KEEP), go (DROP), or, where it could not tell, stay where
        probation's full shares would have kept them."""
        self.trial_verdict, self.trial_ratio, self.trial = verdict, self.trial.ratio(), None
        log.info("algosel: step trial of %d switched signatures: %s (median block ratio %.4f)",
                 sum(r.kind != "native" for r in self.routes.by_key.values()), verdict, self.trial_ratio)  # fmt: skip
        if verdict == KEEP:
            return
        dropped = 0
        for route in self.routes.by_key.values():
            if route.kind == "native":
                continue
            if verdict == DROP:
                reason = Reason.TRIAL_SAME
            elif route.looked is None:  # exempt from probation, or nothing to look at: its decision stands
                continue
            elif route.looked.idle(self.policy.looks.min_busy_fraction):
                reason = Reason.DEVICE_IDLE
            elif self.probation.looks.idle(self.policy.looks.min_busy_fraction):
                reason = Reason.NETWORK_IDLE
            else:
                continue
            self.probation.pass_through(route, reason)
            dropped += 1
        if dropped:
            self._on_dropped()
