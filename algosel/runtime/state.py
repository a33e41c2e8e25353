"""Which executor routes ``F.conv2d`` now: the process's switches, in one object.

A thread's own executor (``enabled()``, ``patch_model``) wins over the process's (``enable()``); ``False`` as a
thread's executor suspends the hook while that thread plans (a measurement's convolutions are PyTorch's own). Where
the compiled path routes ``F.conv2d`` (:func:`install_dispatch`), its thread and process tables mirror these
switches. The state also keeps the executors by number (torch.compile's custom ops name theirs by an integer), the
live executors (for :func:`algosel.runtime.hook.stats`), and when any executor last planned (a plan may measure,
which synchronizes the device: probation's looks just after it do not count).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

#: PyTorch's own conv2d, whatever the switches say.
original_conv2d: Callable[..., torch.Tensor] = F.conv2d


class RuntimeState:
    """The process's switches (see the module docstring); one instance, :data:`STATE`."""

    def __init__(self) -> None:
        self.local = threading.local()  # .executor: this thread's (None: the process's applies; False: planning)
        self.global_executor: Any = None
        self.dispatch_module: Any = None  # the compiled path's module once its conv2d routes F.conv2d
        self.planned_at_s = -math.inf  # when any executor last planned (its clock's seconds)
        self.executors: weakref.WeakSet[Any] = weakref.WeakSet()  # every live executor, for the process's stats
        self.shared: dict[tuple, Any] = {}  # the process's executor of each configuration (``shared_executor``)
        self._by_id: list[Any] = []
        self._lock = threading.Lock()

    def thread_executor(self) -> Any:
        return getattr(self.local, "executor", None)

    def routing_executor(self) -> Any:
        """This thread's executor over the process's; False while this thread plans."""
        ex = getattr(self.local, "executor", None)
        return self.global_executor if ex is None else ex

    def executor_id(self, ex: Any) -> int:
        """``ex``'s number for :meth:`executor_by_id` (assigned on first use)."""
        for i, known in enumerate(self._by_id):
            if known is ex:
                return i
        with self._lock:
            self._by_id.append(ex)
            return len(self._by_id) - 1

    def executor_by_id(self, number: int) -> Any:
        """The executor numbered ``number`` (``-1``: :func:`current_executor`)."""
        return current_executor() if number < 0 else self._by_id[number]


STATE = RuntimeState()


def process_stats() -> dict[str, int]:
    """Calls per path of every live executor: ``gemm``, ``cudnn``, ``pytorch:<reason>`` (pass-through),
    ``fallback:<error>``. A convolution whose every needed direction passes through runs natively in PyTorch; its
    directions are counted at the forward call: one, or three where gradients are needed."""
    total: Counter[str] = Counter()
    for ex in list(STATE.executors):
        total.update(ex.call_stats.snapshot())
    return dict(+total)


def reset_process_stats() -> None:
    for ex in list(STATE.executors):
        ex.call_stats.reset()


def _table_of(ex: Any) -> Any:
    return ex.dispatch_table() if ex else None


def set_local_executor(ex: Any) -> None:
    """This thread's executor (None: the process's applies; False: suspended while it plans)."""
    STATE.local.executor = ex
    module = STATE.dispatch_module
    if module is not None:
        module.set_thread_table(_table_of(ex), ex is not None)


def set_global_executor(ex: Any) -> None:
    """The process's executor (:func:`algosel.runtime.hook.enable`)."""
    STATE.global_executor = ex
    module = STATE.dispatch_module
    if module is not None:
        module.set_global_table(_table_of(ex))


def tables_changed(ex: Any) -> None:
    """``ex`` made a new dispatch table: the switches that name it take the new one."""
    if STATE.global_executor is ex:
        set_global_executor(ex)
    if STATE.thread_executor() is ex:
        set_local_executor(ex)


def current_executor() -> Any:
    """The executor routing this thread's convolutions now, or ``None`` (PyTorch's own path)."""
    return STATE.routing_executor() or None  # False: suspended while this thread plans


@contextlib.contextmanager
def planning() -> Iterator[None]:
    """Suspend the hook in this thread while it plans: the convolutions of a measurement are PyTorch's own."""
    previous = STATE.thread_executor()
    set_local_executor(False)
    try:
        yield
    finally:
        set_local_executor(previous)


def install_dispatch(python_conv2d: Callable[..., torch.Tensor], unheld_conv2d: Callable[..., torch.Tensor]
                     ) -> Callable[..., torch.Tensor]:  # fmt: skip
    """What ``F.conv2d`` becomes while the hook is on: the compiled path's ``conv2d`` where it loads (a call whose
    signature the current executor's table holds costs no Python; every other goes to ``unheld_conv2d``), else
    ``python_conv2d`` itself. Under ``torch.compile``, dynamo traces ``python_conv2d`` in its place."""
    module = STATE.dispatch_module
    if module is None:
        from algosel.runtime import native  # noqa: PLC0415

        ext = native.load()
        if ext is None or not hasattr(ext, "conv2d"):
            return python_conv2d
        ext.set_fallback(unheld_conv2d)
        try:
            torch._dynamo.substitute_in_graph(ext.conv2d, skip_signature_check=True)(python_conv2d)
        except (AttributeError, TypeError, ValueError) as exc:  # no polyfills in this torch: compile would break
            log.warning("algosel: torch.compile cannot trace the compiled path's conv2d (%s); using Python's", exc)
            return python_conv2d
        STATE.dispatch_module = module = ext
        set_global_executor(STATE.global_executor)  # switches made before: the process's and this thread's
        set_local_executor(STATE.thread_executor())
    return module.conv2d
