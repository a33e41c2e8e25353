"""What the runtime does when its own set-up fails: it says so once and runs PyTorch's own convolution.

The hook must never be the reason a training step fails. Where there is no model for this GPU or the model is
damaged, the executor warns once (a :class:`HookUnavailableWarning` naming the cause and the fix) and every
convolution is PyTorch's own; where routing a call fails, that call signature is PyTorch's own. (A persistent cache
that cannot be read or written warns once and is left aside by :class:`~algosel.runtime.cache.RuntimeCache`
itself: decisions are then made again in each process.) Arguments of the wrong kind (``selector=42``,
``record=42``) are the caller's mistake, not the machine's: they raise a one-line ``ValueError`` at once.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import warnings
from typing import Any

log = logging.getLogger(__name__)

#: A pass-through's reason where the executor has no model.
NO_MODEL = "no model for this machine"
#: ... and where routing a call failed in the hook itself.
HOOK_ERROR = "the hook failed on this call"


class HookUnavailableWarning(RuntimeWarning):
    """Part of the hook could not be set up here; PyTorch's own convolutions run instead (the message says why)."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(message: str) -> None:
    """Warn with ``message`` the first time it is seen in this process."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(f"algosel: {message}", HookUnavailableWarning, stacklevel=3)


class NoModel:
    """The selector of an executor whose model could not be loaded: it records nothing and ranks nothing (the
    executor routes every call to PyTorch before asking it anything)."""

    manifest: dict[str, Any] = {}
    spaces: tuple[str, ...] = ()
    blocked: set = set()
    catalogue = None
    time_model = None

    def __init__(self, why: str):
        self.why = why

    def is_recorded(self, problem) -> bool:
        return False

    def records_distance(self, problem) -> float:
        return math.inf


def load_selector(selector: Any) -> tuple[Any, str]:
    """The executor's selector and, where it could not be loaded, why (then a :class:`NoModel`).

    ``selector``: None (the shipped model for this GPU), a model directory, or a selector object, which must have
    the runtime's methods (:class:`algosel.learn.protocol.RuntimeSelector`)."""
    if selector is not None and not isinstance(selector, (str, os.PathLike)):
        missing = [m for m in ("choose", "is_recorded", "predicted_time_ms") if not hasattr(selector, m)]
        if missing:
            raise ValueError(f"selector must be a Selector or a model directory, got {selector!r} (it has no "
                             f"{missing[0]}())")  # fmt: skip
        return selector, ""
    from algosel.learn.models import load_default  # noqa: PLC0415 - the model libraries load with the first model
    from algosel.learn.selector import Selector  # noqa: PLC0415

    try:
        return (load_default() if selector is None else Selector.load(selector)), ""
    except (ValueError, OSError) as exc:  # SelectorError is a ValueError: no model for this GPU, a damaged one
        where = "the shipped model" if selector is None else f"the model {os.fspath(selector)!r}"
        why = f"{where} cannot be used here ({exc}); the hook runs PyTorch's own convolutions"
        warn_once(why)
        return NoModel(why), why


def model_calibration(selector: Any) -> Any:
    """The calibration (:mod:`algosel.learn.calibration`) of the loaded ``selector``, read from the directory it was
    loaded from and checked against the manifest it was loaded with; None for a selector made in memory, or a model
    without one (warned once)."""
    from algosel.learn.calibration import load_calibration  # noqa: PLC0415

    directory = getattr(selector, "directory", None)
    if directory is None:
        return None
    try:
        calibration = load_calibration(directory, selector.manifest)
    except (ValueError, OSError) as exc:
        warn_once(f"the model's calibration cannot be read ({exc}); the rule passes unrecorded problems")
        return None
    if calibration is None:
        warn_once(f"{directory} has no calibration.json (`algosel calibrate`); the rule passes unrecorded "
                  "problems through")  # fmt: skip
    return calibration
