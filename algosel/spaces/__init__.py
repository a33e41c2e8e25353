"""Candidate spaces and their registry: the one list of the ways to compute a convolution that algosel knows.

Everything outside this package (features, selector, sweeper, hook, report, command line) asks the registry for
a space by name and uses its interface (:class:`~algosel.spaces.base.CandidateSpace`), never a space's module.
Adding a space is one module plus one :func:`register` call.

The registration order is part of the selector's feature schema: a space's ``space_code`` feature is its
position in the registry, so the built-in spaces keep their order and new ones are appended.
"""

from __future__ import annotations

import importlib
import threading

from algosel.spaces.base import (
    STATUSES,
    Candidate,
    CandidateError,
    CandidateSpace,
    PreparedCandidate,
    split_candidate_id,
)

#: The built-in spaces: name -> (module, class), imported on first use (the cuDNN spaces load their libraries then).
_BUILTIN: dict[str, tuple[str, str]] = {
    "cudnn": ("algosel.spaces.cudnn_graph", "CudnnGraphSpace"),
    "gemm": ("algosel.spaces.gemm", "GemmSpace"),
    "pytorch": ("algosel.spaces.pytorch", "PyTorchDefaultSpace"),
    "legacy": ("algosel.spaces.cudnn_legacy", "CudnnLegacySpace"),
}
_registry: dict[str, type[CandidateSpace] | tuple[str, str]] = dict(_BUILTIN)
_shared: dict[str, CandidateSpace] = {}
_lock = threading.Lock()


def register(cls: type[CandidateSpace]) -> type[CandidateSpace]:
    """Add a space class to the registry (usable as a class decorator); its ``name`` must be new."""
    if not cls.name or ":" in cls.name:
        raise ValueError(f"a candidate space needs a name without ':'; got {cls.name!r}")
    with _lock:
        if cls.name in _registry:
            raise ValueError(f"candidate space {cls.name!r} is already registered")
        _registry[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a space added by :func:`register` (the built-in spaces stay)."""
    if name in _BUILTIN:
        raise ValueError(f"{name!r} is a built-in candidate space")
    with _lock:
        _registry.pop(name, None)
        _shared.pop(name, None)


def space_names() -> tuple[str, ...]:
    """The registered spaces, in registration order."""
    return tuple(_registry)


def space_class(name: str) -> type[CandidateSpace]:
    entry = _registry.get(name)
    if entry is None:
        raise ValueError(f"candidate space must be one of {', '.join(_registry)}; got {name!r}")
    if isinstance(entry, tuple):
        module, attr = entry
        entry = getattr(importlib.import_module(module), attr)
        _registry[name] = entry
    return entry


def make_space(name: str) -> CandidateSpace:
    """A new instance of a space (the sweeper's: enumeration keeps per-problem state)."""
    return space_class(name)()


def get_space(name: str) -> CandidateSpace:
    """The process's shared instance of a space (for its codec, features, offline rows and runtime runners)."""
    space = _shared.get(name)
    if space is None:
        with _lock:
            space = _shared.get(name)
            if space is None:
                space = _shared[name] = make_space(name)
    return space


def space_code(name: str) -> int:
    """The space's category code in the selector's features: its registry position (``len`` for an unknown one)."""
    names = space_names()
    return names.index(name) if name in names else len(names)


__all__ = [
    "STATUSES",
    "Candidate",
    "CandidateError",
    "CandidateSpace",
    "PreparedCandidate",
    "get_space",
    "make_space",
    "register",
    "space_class",
    "space_code",
    "space_names",
    "split_candidate_id",
    "unregister",
]
