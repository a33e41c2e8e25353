"""The context each mode's steps run in: PyTorch's default, the hook's prediction and verify mode, the pass-through
control, benchmark mode paired with them (``tuned``) and, for ``--aa``, the default a second time (``again``).

A mode's context is a callable: ``ctx()`` is the context manager entered around each step (the hook's
``hook.enabled(...)`` for the hook's modes). The hook's executors are shared per configuration within a process;
:func:`executor` finds a mode's.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoolib.config import ZooConfig

MODES = ("default", "predict", "verify", "native")
#: The paired job's fifth mode in autocast steps: benchmark mode (:func:`tuned`).
TUNED = "tuned"
#: ``--aa``: the paired job's rotation gets the default a second time, in the slots farthest from the first's
#: (D P V N A, then reversed): what two identical modes read apart is the measurement's own floor and position bias.
AGAIN = "again"


def mode_context(cfg: ZooConfig, mode: str, hook):
    """The context each mode's steps run in. Prediction mode keeps its decisions in a cache of its own, so that it
    does not reuse what verify mode measured in the same run; the control passes every convolution through."""
    from algosel.runtime.native import cache_root

    sel = selector_kwargs(cfg)
    # the least gain and the probe calls apply where the hook decides (prediction and verify mode); the native mode
    # sets its own least gain and never switches
    deciding = {} if cfg.min_gain_us is None else {"min_gain_us": cfg.min_gain_us}
    if cfg.probe_calls is not None:
        deciding["probe_calls"] = cfg.probe_calls
    config = cache_suffix(cfg)
    if mode == "predict":
        predict_folder = cache_root() / f"zoo-predict{config}"  # made once, as verify mode's: a step pays nothing
        return lambda: hook.enabled(cache=predict_folder, **sel, **deciding)
    if mode == "verify":
        # a cache of its own per repeated process, so that each process's cold first pass is cold (the warm job
        # reads the first process's)
        folder = cache_root() / (f"zoo-verify{config}" + ("" if cfg.process == 0 else f"-p{cfg.process}"))
        return lambda: hook.enabled(verify=cfg.verify_k, cache=folder, look_first=cfg.look_first, **sel, **deciding)
    if mode == "native":  # routed in every block (never stepping aside): what the dispatch costs
        return lambda: hook.enabled(cache=False, min_gain_us=math.inf, step_aside=False, **sel)
    if mode == TUNED:
        return tuned
    return contextlib.nullcontext


def cache_suffix(cfg: ZooConfig) -> str:
    """A cache folder per hook configuration (``-g5.0-k3-probe0``; ``""`` for the hook's defaults): decisions skipped
    under one least gain are not read under another."""
    config = "" if cfg.min_gain_us is None and cfg.verify_k == 3 else f"-g{cfg.min_gain_us}-k{cfg.verify_k}"
    return config + ("" if cfg.probe_calls is None else f"-probe{cfg.probe_calls}")


@contextlib.contextmanager
def tuned():
    """Benchmark mode (``cudnn.benchmark``) beside the default in one process, for autocast steps: with cuDNN's TF32
    switch off, which leaves their float16 convolutions' math as it is, but is part of the key PyTorch keeps a
    convolution's plan under, so benchmark mode tunes and keeps plans of its own instead of reusing the default's."""
    import torch

    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved


_selectors: dict = {}


def _selector(cls, path: str, force: bool = False):
    """One Selector per model directory (the hook's executors are shared per configuration, the selector's
    identity included)."""
    if path not in _selectors:
        _selectors[path] = cls.load(path, force=force)
    return _selectors[path]


def selector_kwargs(cfg: ZooConfig, load=None) -> dict:
    """The hook's ``selector=`` for ``--model`` and ``--force`` (none: the shipped model for this GPU); in the smoke
    run, also the device seam that routes the CPU's calls as a GPU's (the hook routes CUDA tensors alone, so the
    smoke run on the CPU would otherwise exercise none of its paths). ``load(path, force=)`` loads the model
    directory (default: ``Selector.load``, once per directory in this process)."""
    seam = {"device_probe": _cpu_as_cuda()} if cfg.smoke else {}
    if not cfg.model and not cfg.force:
        return seam
    from algosel.learn.models import default_model_dir
    from algosel.learn.selector import Selector

    path = cfg.model or str(default_model_dir())
    selector = _selector(Selector, path, force=cfg.force) if load is None else load(path, force=cfg.force)
    return {**seam, "selector": selector}


@functools.cache
def _cpu_as_cuda():
    """One seam per process: executors of one configuration are shared only where their seams are the same."""
    from algosel.runtime.standins import CpuAsCuda

    return CpuAsCuda()


_executors: dict = {}


def executor(ctx: dict, mode: str):
    """The mode's executor (shared per configuration), found by entering one block of it the first time only: an
    empty block in the middle of a step trial would be one of its blocks."""
    key = (id(ctx), mode)
    if key not in _executors:
        with ctx[mode]() as ex:
            _executors[key] = ex
    return _executors[key]


def undecided_count(ctx: dict, mode: str = "verify") -> int:
    """Call signatures of the mode's executor still looking at the device or on probation, and its step trial
    while under way or due (``Executor.deciding``)."""
    return executor(ctx, mode).deciding()
