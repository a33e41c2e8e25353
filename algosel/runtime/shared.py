"""The process's executors, one per configuration: what ``hook.enabled(**config)`` and ``hook.enable(**config)``
share, so that a context manager around each training step plans nothing twice. The one place an executor is built
from a configuration (:class:`~algosel.runtime.config.HookConfig`) and its seams."""

from __future__ import annotations

import threading
from typing import Any

from algosel.runtime.config import HookConfig
from algosel.runtime.executor import Executor
from algosel.runtime.state import STATE

#: The executor's keyword arguments that stand in for the machine (not options of a configuration).
SEAMS = ("candidates", "measurer", "device_probe", "clock", "calibration")

_shared_lock = threading.Lock()


def shared_executor(**options: Any) -> Executor:
    """The process's executor of the configuration of ``options`` (created once, by :func:`build_executor`): its
    decisions, plans and routes outlive every ``enabled()`` block."""
    seams = {k: options.pop(k) for k in SEAMS if k in options}
    config = HookConfig.of(options)
    key = (config, tuple(sorted((k, id(v)) for k, v in seams.items())))
    ex = STATE.shared.get(key)
    if ex is None:
        with _shared_lock:
            ex = STATE.shared.get(key)
            if ex is None:
                ex = STATE.shared[key] = build_executor(config, **seams)
    return ex


def build_executor(config: HookConfig, **seams: Any) -> Executor:
    """An executor of ``config``, with the machine's stand-ins ``seams`` (:data:`SEAMS`) where given."""
    unknown = sorted(set(seams) - set(SEAMS))
    if unknown:
        raise ValueError(f"unknown executor seam {unknown[0]!r}; seams: {', '.join(SEAMS)}")
    return Executor(config, **seams)
