"""The executor's arguments, checked before any long work: a mistake is one line naming the argument and its value."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from algosel.runtime.policy import DEFAULT_POLICY, SwitchPolicy


def checked_arguments(
    record: Any, record_measured: Any, policy: Any, probe_calls: Any, min_gain_us: Any, verify: Any,
    tuning_budget_s: Any, max_workspace_bytes: Any,
) -> tuple[SwitchPolicy, int, int | None]:  # fmt: skip
    """The executor's policy (with the ``probe_calls`` and ``min_gain_us`` shorthands applied), ``verify`` and
    ``max_workspace_bytes`` as integers; a ValueError naming the first bad argument."""
    if record is not None and not isinstance(record, (str, os.PathLike)):
        raise ValueError(f"record must be the path of a layers file, got {record!r}")
    if record_measured is not None and not isinstance(record_measured, (str, os.PathLike)):
        if not hasattr(record_measured, "add"):
            raise ValueError(f"record_measured must be the path of a dataset folder, got {record_measured!r}")
    if policy is not None and not isinstance(policy, SwitchPolicy):
        raise ValueError(f"policy must be a SwitchPolicy, got {policy!r}")
    policy = policy or DEFAULT_POLICY
    if probe_calls is not None:
        policy = dataclasses.replace(policy, probe_calls=count("probe_calls", probe_calls, "calls"))
    if min_gain_us is not None:
        if not (number(min_gain_us) and min_gain_us >= 0):
            raise ValueError(f"min_gain_us must be a number of microseconds >= 0, got {min_gain_us!r}")
        policy = dataclasses.replace(policy, min_gain_us=min_gain_us)
    if tuning_budget_s is not None and not (number(tuning_budget_s) and tuning_budget_s >= 0):
        raise ValueError(f"tuning_budget_s must be a number of seconds >= 0, got {tuning_budget_s!r}")
    if max_workspace_bytes is not None:
        max_workspace_bytes = count("max_workspace_bytes", max_workspace_bytes, "bytes")
    return policy, count("verify", verify, "candidates to time"), max_workspace_bytes


def number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def count(name: str, value: Any, unit: str) -> int:
    """``value`` where it is a non-negative integer (not a bool); else a ValueError naming ``name`` and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer ({unit}), got {value!r}")
    return value
