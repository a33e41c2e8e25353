"""The runtime hook: PyTorch's ``conv2d`` runs what the selector decides, forward and backward.

Turn it on for a block (``with algosel.hook.enabled(): ...``), for the process (:func:`enable` / :func:`disable`),
or for one model's ``Conv2d`` modules (:func:`patch_model`). User code does not change:
``torch.nn.functional.conv2d`` (which every ``nn.Conv2d`` calls) is routed through :func:`conv2d`.

The executor (:mod:`algosel.runtime.executor`) decides per problem and is shared by every switch of the same
configuration in the process: a ``with enabled():`` around each training step plans each convolution once, and
the persistent cache (:mod:`algosel.runtime.cache`) carries the decisions to later processes. A convolution passes
through to PyTorch unless its gain over PyTorch's default is known (records, a measurement with ``verify=k``, or
the model's predicted times) to exceed what leaving PyTorch's path costs; every pass-through and fallback is
counted with its reason (:func:`stats`). Under ``torch.compile`` the hooked convolution is a custom op
(:mod:`algosel.runtime.ops`), so the graph has no break at the convolutions.

Inputs PyTorch would reject (mismatched devices, dtypes, shapes) go to PyTorch unchanged, so users get PyTorch's
own error; so do all convolutions while deterministic algorithms are asked of PyTorch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from algosel.runtime.call import run_conv
from algosel.runtime.executor import Executor
from algosel.runtime.ops import compiled_conv2d
from algosel.runtime.shared import shared_executor
from algosel.runtime.state import (
    STATE,
    current_executor,
    install_dispatch,
    original_conv2d,
    process_stats,
    reset_process_stats,
    set_global_executor,
    set_local_executor,
)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002 - F.conv2d's names
    """Drop-in for ``torch.nn.functional.conv2d`` that runs the executor's decisions (see the module docstring)."""
    if torch.compiler.is_compiling():  # first: dynamo traces the custom op, never the routing below
        return compiled_conv2d(input, weight, bias, stride, padding, dilation, groups)
    ex = getattr(STATE.local, "executor", None)  # inline: this is the Python path's per-call cost
    if ex is None:
        ex = STATE.global_executor
    fast = ex.dispatch.fast_run if ex else None
    if fast is not None:  # a planned signature runs in C++ (None: not held, or not a plain tensor call)
        out = fast(input, weight, bias, stride, padding, dilation, groups)
        if out is not None:
            return out
    return _run(ex, input, weight, bias, stride, padding, dilation, groups)


def _unheld_conv2d(input, weight, bias, stride, padding, dilation, groups):  # noqa: A002
    """The compiled dispatch's fallback: a call its current table does not hold (it has looked already)."""
    return _run(STATE.routing_executor(), input, weight, bias, stride, padding, dilation, groups)


def _run(ex, input, weight, bias, stride, padding, dilation, groups):  # noqa: A002
    """The call through ``ex``'s Python path (``ex`` falsy while planning or off: PyTorch's own)."""
    if not ex or not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return original_conv2d(input, weight, bias, stride, padding, dilation, groups)
    return run_conv(ex, input, weight, bias, stride, padding, dilation, groups)


def _executor_for(executor: Executor | None, config: dict[str, Any]) -> Executor:
    if executor is not None:
        if config:
            raise ValueError(f"give an executor or its configuration, not both (got {', '.join(sorted(config))})")
        return executor
    return shared_executor(**mode_config(config))


def mode_config(config: dict[str, Any]) -> dict[str, Any]:
    """The hook's one default mode: without ``verify``, the rule decides (:mod:`algosel.runtime.rule`: pass through,
    switch untimed, or time the model's top candidates, whichever is expected to save the most); ``verify=False``
    (or 0): the rule without timing; ``verify=k``: time the model's top ``k`` on every new problem the records lack.
    Under the rule, new problems are decided beside the step (``decide_aside``, :mod:`algosel.runtime.aside`)."""
    if "background_load" not in config:  # the model loads beside the first steps (runtime.loading)
        config = {**config, "background_load": True}
    verify = config.get("verify")
    aside = {"decide_aside": config.get("decide_aside", True)}  # new problems decided beside the step (runtime.aside)
    if verify is None:
        return {**config, **aside}
    if verify is False or (isinstance(verify, int) and not isinstance(verify, bool) and verify == 0):
        return {**config, "verify": 0, "rule_times": False, **aside}
    return config


def enable(executor: Executor | None = None, **config: Any) -> Executor:
    """Route every ``F.conv2d`` of the process (``**config`` configures the shared :class:`Executor`).

    Each optimizer step (``torch.optim``'s global step hook) ends a block, as the end of an ``enabled()`` block
    does: an executor with nothing to switch steps aside between steps in the same way (see :func:`enabled`).
    """
    ex = _executor_for(executor, config)
    set_global_executor(ex)
    _steps.routes = len(ex.routes)
    dispatch = install_dispatch(conv2d, _unheld_conv2d)
    F.conv2d = original_conv2d if ex.begin_block() else dispatch
    if _steps.hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: PLC0415

        _steps.hook = register_optimizer_step_post_hook(_after_optimizer_step)
    return ex


class _OptimizerSteps:
    """The process executor's routes at the last optimizer step, and the step hook of :func:`enable` (registered
    once, for the process)."""

    routes = 0
    hook: Any = None


_steps = _OptimizerSteps()


def _after_optimizer_step(optimizer, args, kwargs) -> None:
    """A training step of the process ended: the switched-on executor's block ends, and the next step runs with
    PyTorch's own ``F.conv2d`` where the executor steps aside (or with the hook's again where it does not)."""
    ex = STATE.global_executor
    if ex is None or STATE.thread_executor() is not None:
        return  # off, or inside an enabled() block of this thread, which restores F.conv2d itself
    dispatch = install_dispatch(conv2d, _unheld_conv2d)
    if F.conv2d is not dispatch and F.conv2d is not original_conv2d:
        return  # someone else's F.conv2d: left alone
    ex.block_done(_steps.routes)
    _steps.routes = len(ex.routes)
    F.conv2d = original_conv2d if ex.begin_block() else dispatch


def disable() -> None:
    """Restore PyTorch's own ``F.conv2d`` (where no ``enabled()`` block of this thread is open)."""
    set_global_executor(None)
    if STATE.thread_executor() is None:
        F.conv2d = original_conv2d


@contextlib.contextmanager
def enabled(executor: Executor | None = None, **config: Any) -> Iterator[Executor]:
    """Route ``F.conv2d`` inside the block (this thread), restoring the previous state after.

    ``**config`` configures the process's shared :class:`Executor` of that configuration (``verify=3`` to time
    the model's top 3 on each new problem, only where its calls find the device busy (``look_first``, the default);
    ``selector=``, ``min_gain_us=``...): entering the block again reuses its decisions and plans. Once every
    convolution the executor met passes through and a few blocks in a row met no new one, later blocks leave
    PyTorch's ``F.conv2d`` in place (the executor "steps aside", ``Executor.step_aside``), routing one block now
    and then to meet new call signatures. Where it switches some, its next blocks are a step trial
    (:mod:`algosel.runtime.trial`): by turns with and without the switches, which stay only where they made the
    blocks faster.
    """
    ex = _executor_for(executor, config)
    previous, patched = STATE.thread_executor(), F.conv2d
    outermost = previous is None and patched is original_conv2d and STATE.global_executor is None
    if outermost and ex.begin_block():
        # Every route passes through and nothing new came for a while, or a step trial's block without the
        # switches: PyTorch's own conv2d, at its own cost
        try:
            yield ex
        finally:
            ex.block_done(len(ex.routes))
        return
    routes_before = len(ex.routes)
    F.conv2d = install_dispatch(conv2d, _unheld_conv2d)
    set_local_executor(ex)
    try:
        yield ex
    finally:
        set_local_executor(previous)
        F.conv2d = patched
        ex.block_done(routes_before)


def patch_model(model: torch.nn.Module, executor: Executor | None = None, **config: Any) -> Executor:
    """Make every ``nn.Conv2d`` of ``model`` run the executor's decisions, whatever the global switch says."""
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"patch_model takes a torch.nn.Module, got {model!r}")
    ex = _executor_for(executor, config)
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.padding_mode == "zeros":
            module._conv_forward = _patched_forward(module, ex)  # type: ignore[method-assign]
    return ex


def _patched_forward(module: torch.nn.Conv2d, ex: Executor):
    number = STATE.executor_id(ex)

    def _conv_forward(input, weight, bias):  # noqa: A002
        if torch.compiler.is_compiling():
            return compiled_conv2d(input, weight, bias, module.stride, module.padding, module.dilation, module.groups,
                                   number)  # fmt: skip
        previous = STATE.thread_executor()
        if previous is False:  # this thread is planning: PyTorch's own convolution
            return original_conv2d(input, weight, bias, module.stride, module.padding, module.dilation, module.groups)
        fast = ex.dispatch.fast_run
        if fast is not None:
            out = fast(input, weight, bias, module.stride, module.padding, module.dilation, module.groups)
            if out is not None:
                return out
        set_local_executor(ex)
        try:
            return run_conv(ex, input, weight, bias, module.stride, module.padding, module.dilation, module.groups)
        finally:
            set_local_executor(previous)

    return _conv_forward


def stats() -> dict[str, int]:
    """Calls per path of the process's executors: ``gemm``, ``cudnn``, ``pytorch:<reason>`` (pass-through),
    ``fallback:<error>`` (:func:`algosel.runtime.state.process_stats`; one executor's: ``Executor.stats()``)."""
    return process_stats()


def reset_stats() -> None:
    """Start every executor's call counts again from zero."""
    reset_process_stats()


__all__ = [
    "Executor",
    "conv2d",
    "current_executor",
    "disable",
    "enable",
    "enabled",
    "original_conv2d",
    "patch_model",
    "reset_stats",
    "stats",
]
