"""One executor's configuration as one value: :class:`HookConfig` holds every option a user sets (the hook's
``enabled(**config)``, ``enable(**config)``, ``Executor(**config)``), checked when it is made, before any long work.

It is frozen and hashable: the process shares one executor per configuration (:mod:`algosel.runtime.shared`), and
a variant is ``dataclasses.replace(config, verify=3)``. What stands in for the machine in tests and benchmarks (the
candidate source, the measurer, the device probe, the clock, a calibration) are the executor's own keyword arguments,
never part of a configuration.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields
from typing import Any

from algosel.runtime.policy import DEFAULT_POLICY, SwitchPolicy


@dataclass(frozen=True)
class HookConfig:
    """What an executor does (docs/hook.md, "Using it"). New problems the records lack are decided by the rule
    (:mod:`algosel.runtime.rule`), which may time candidates unless ``rule_times`` is False; ``verify=k`` times the
    model's top ``k`` on every one instead. ``min_gain_us`` and ``probe_calls`` are shorthands for the policy's
    fields of those names, applied by :meth:`effective_policy`."""

    selector: Any = None
    verify: int = 0
    rule_times: bool = True
    tuning_budget_s: float | None = None
    background_load: bool = False
    decide_aside: bool = False
    live: bool | None = None
    min_gain_us: float | None = None
    max_workspace_bytes: int | None = None
    cache: Any = True
    native: bool | None = None
    record: str | os.PathLike | None = None
    record_measured: Any = None
    probe_calls: int | None = None
    step_aside: bool = True
    look_first: bool = True
    policy: SwitchPolicy | None = None

    def __post_init__(self) -> None:
        if self.record is not None and not isinstance(self.record, (str, os.PathLike)):
            raise ValueError(f"record must be the path of a layers file, got {self.record!r}")
        measured = self.record_measured
        if measured is not None and not isinstance(measured, (str, os.PathLike)) and not hasattr(measured, "add"):
            raise ValueError(f"record_measured must be the path of a dataset folder, got {measured!r}")
        if self.policy is not None and not isinstance(self.policy, SwitchPolicy):
            raise ValueError(f"policy must be a SwitchPolicy, got {self.policy!r}")
        if self.probe_calls is not None:
            count("probe_calls", self.probe_calls, "calls")
        if self.min_gain_us is not None and not (number(self.min_gain_us) and self.min_gain_us >= 0):
            raise ValueError(f"min_gain_us must be a number of microseconds >= 0, got {self.min_gain_us!r}")
        if self.tuning_budget_s is not None and not (number(self.tuning_budget_s) and self.tuning_budget_s >= 0):
            raise ValueError(f"tuning_budget_s must be a number of seconds >= 0, got {self.tuning_budget_s!r}")
        if self.max_workspace_bytes is not None:
            count("max_workspace_bytes", self.max_workspace_bytes, "bytes")
        count("verify", self.verify, "candidates to time")

    @classmethod
    def of(cls, options: dict[str, Any]) -> HookConfig:
        """The configuration of keyword ``options``; one line naming an option it does not know."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown hook option {unknown[0]!r}; options: {', '.join(sorted(known))}")
        return cls(**options)

    def effective_policy(self) -> SwitchPolicy:
        """The policy with the ``probe_calls`` (``policy.looks.probe_calls``) and ``min_gain_us`` shorthands applied."""
        policy = self.policy or DEFAULT_POLICY
        if self.probe_calls is not None:
            policy = dataclasses.replace(policy, looks=dataclasses.replace(policy.looks, probe_calls=self.probe_calls))
        if self.min_gain_us is not None:
            policy = dataclasses.replace(policy, min_gain_us=self.min_gain_us)
        return policy


def number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def count(name: str, value: Any, unit: str) -> int:
    """``value`` where it is a non-negative integer (not a bool); else a ValueError naming ``name`` and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer ({unit}), got {value!r}")
    return value
