"""Probation: whether a switch's device time can shorten the step, judged by looking at the device.

A gain in device time is worth nothing where the device waits for the host: a host-bound training step (most steps
on an H200) runs as fast as the host enqueues it, and a switch costs it host time without shortening it. So a route
that switches a CUDA convolution away from PyTorch's path starts on probation: its first
``policy.looks.probe_calls`` calls
run PyTorch's own convolution while the executor looks whether the device is still busy with earlier work when the
call arrives (a stream query, about a microsecond), and again when the call's gradient comes back (just before
autograd enqueues its backward directions). Where the device was busy in at least ``min_busy_fraction`` of the
forward looks or of the backward looks, the switch is made; else the route passes through for good
(:data:`~algosel.runtime.policy.DEVICE_IDLE`). It passes through too where the looks of all the executor's routes on
probation, pooled, found the device busy in less than ``min_network_busy_fraction`` of them (the step is host-bound
as a whole: :data:`~algosel.runtime.policy.NETWORK_IDLE`). Where a step trial is still to judge the switches, both
shares are ``trial_busy_fraction``: the looks only drop what cannot pay. Verify mode can look before it times a
new signature's shortlist (``look_first``): such a route is PyTorch's own while it looks, timed at its next call
where the looks found the device busy, and left untimed where they did not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from algosel.runtime.decision import Passing, Reason
from algosel.runtime.device import DeviceProbe
from algosel.runtime.policy import SwitchPolicy
from algosel.runtime.routes import Route, RouteBook
from algosel.runtime.state import STATE
from algosel.runtime.stats import CallStats


@dataclass
class Looks:
    """Looks at the device: at forward calls, and when a call's gradient reached it (backward)."""

    calls: int = 0
    busy: int = 0
    back_calls: int = 0
    back_busy: int = 0

    def add(self, busy: bool, backward: bool) -> None:
        if backward:
            self.back_calls += 1
            self.back_busy += busy
        else:
            self.calls += 1
            self.busy += busy

    def idle(self, min_fraction: float) -> bool:
        """Whether the device was busy in less than ``min_fraction`` of the forward looks and of the backward looks
        alike: a switch saves device time where either kind finds the device busy (a step that starts with an idle
        device, after a sync, can be device-bound in its backward)."""
        forward = self.busy >= min_fraction * self.calls if self.calls else False
        backward = self.back_busy >= min_fraction * self.back_calls if self.back_calls else False
        return not (forward or backward) and (self.calls or self.back_calls) > 0


class Probation:
    """An executor's probation (see the module docstring): the pooled looks, and each call of a route on it."""

    def __init__(self, policy: SwitchPolicy, device: DeviceProbe, clock: Callable[[], float], stats: CallStats,
                 routes: RouteBook, fractions: Callable[[], tuple[float, float]]):  # fmt: skip
        self.policy, self.device, self.clock = policy, device, clock
        self.stats, self.routes = stats, routes
        self.fractions = fractions  # the least busy shares now: per route, pooled
        self.looks = Looks()  # every route's looks, pooled

    def call(self, route: Route, x: torch.Tensor) -> bool:
        """One call of a route on probation: True where the route runs as decided from this call on (its switch
        made, or dropped for PyTorch's path), False where this call takes PyTorch's own path."""
        probe = route.probe
        busy = self.device.busy(x)
        if busy is None and not x.is_cuda:  # nothing to look at (CPU): the decision stands
            route.probe = None
            return self._time_next(route) if route.key is not None else True
        self.count(probe, busy, backward=False)
        if probe.calls < self.policy.looks.probe_calls:
            self.stats.count(Passing.PROBING, len(route.reasons))
            return False
        route.probe, route.looked = None, probe
        self.routes.changed()
        per_route, pooled = self.fractions()
        idle = Reason.DEVICE_IDLE if probe.idle(per_route) else Reason.NETWORK_IDLE if self.looks.idle(pooled) else None
        if route.key is not None:  # it looked before timing: untimed where idle, timed at the next call where busy
            if idle is None:
                return self._time_next(route)
            route.key = None
            route.reasons = (f"pytorch:{idle}",) * len(route.reasons)
            self.stats.add_route(route)
            return True
        if idle is not None:
            self.pass_through(route, idle)
        return True

    def look_back(self, probe: Looks) -> Callable[[torch.Tensor], None]:
        """The gradient hook of a call on probation: a look when the call's output gradient is ready."""

        def look(grad: torch.Tensor) -> None:
            self.count(probe, self.device.busy(grad), backward=True)

        return look

    def count(self, probe: Looks, busy: bool | None, backward: bool) -> None:
        """Count a look (``busy`` None: it could not tell) into the route's and the pooled looks, unless it comes
        within ``policy.looks.settle_s`` of any executor's planning."""
        if busy is None or self.clock() - STATE.planned_at_s < self.policy.looks.settle_s:
            return
        probe.add(busy, backward)
        self.looks.add(busy, backward)

    def pass_through(self, route: Route, reason: str) -> None:
        """A switched route becomes PyTorch's own convolution, counted from now on by call."""
        if route.kind == "function":  # counted per direction by run_direction until now
            self.stats.add_route(route)
        route.pass_through(reason)
        self.routes.changed()

    def _time_next(self, route: Route) -> bool:
        """A signature that looked before timing found the device busy: forgotten, so that its next call plans it
        again, timing its shortlist (and switching without a second probation); this call takes PyTorch's path."""
        self.stats.count(Passing.PROBING, len(route.reasons))
        self.routes.looked.add(route.key)
        self.routes.looks_of[route.key] = route.looked
        self.routes.forget(route.key, route)
        route.key = None
        return False
