"""The process's executors, one per configuration: what ``hook.enabled(**config)`` and ``hook.enable(**config)``
share, so that a context manager around each training step plans nothing twice."""

from __future__ import annotations

import threading
from typing import Any

from algosel.runtime.executor import Executor
from algosel.runtime.state import STATE

_shared_lock = threading.Lock()


def shared_executor(**config: Any) -> Executor:
    """The process's executor of this configuration (created once): its decisions, plans and routes outlive every
    ``enabled()`` block, so a context manager around each training step plans nothing twice."""
    key = tuple(sorted((k, v if _hashable(v) else id(v)) for k, v in config.items()))
    ex = STATE.shared.get(key)
    if ex is None:
        with _shared_lock:
            ex = STATE.shared.get(key)
            if ex is None:
                ex = STATE.shared[key] = Executor(**config)
    return ex


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True
