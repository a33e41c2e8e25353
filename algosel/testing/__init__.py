"""Seams for tests of algosel, and of programs built on it, that need no GPU: the tests use these instead of
patching algosel's modules or reaching into their private names.

:func:`fake_gpu` makes the process look as if it had a CUDA device of a given name (which model loads, which GPU a
joint model ranks for, what is refused); :func:`algosel.records.environment.described_as` is the narrower seam it
uses for the hardware (and a GPU's identity alone, where torch's device queries must stay real).
:func:`exact_calibration` is a calibration that says the model's predicted times are the truth, so that the rule
(:mod:`algosel.runtime.rule`) acts on a stand-in selector's predictions as they are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

from algosel.records.environment import described_as

__all__ = ["exact_calibration", "fake_gpu"]


@contextlib.contextmanager
def fake_gpu(
    name: str, capability: tuple[int, int] = (9, 0), *, cudnn: int = 91900, hardware: Mapping[str, Any] | None = None
) -> Iterator[None]:
    """Within the block, this process has one CUDA device ``name`` of compute ``capability`` with cuDNN ``cudnn``,
    as far as algosel asks: torch's device queries (``torch.cuda.is_available``, ``get_device_name``,
    ``get_device_capability``, ``torch.backends.cudnn.version``) answer so, and its hardware
    (:func:`~algosel.records.environment.visible_hardware`) is ``hardware`` (none given: nothing known, as where the
    device cannot describe itself). Nothing runs on it. Blocks nest: the innermost one's GPU is seen."""
    import torch  # noqa: PLC0415 - torch's own device queries are what is faked

    with contextlib.ExitStack() as stack:
        for owner, attribute, answer in (
            (torch.cuda, "is_available", True),
            (torch.cuda, "get_device_name", name),
            (torch.cuda, "get_device_capability", tuple(capability)),
            (torch.backends.cudnn, "version", int(cudnn)),
        ):
            stack.enter_context(mock.patch.object(owner, attribute, lambda *args, _answer=answer, **kwargs: _answer))
        stack.enter_context(described_as(hardware=dict(hardware or {})))
        yield


def exact_calibration(ranks: int = 3) -> Any:
    """A calibration (``Executor(calibration=...)``) whose every error is zero: an untimed switch is made where the
    predicted saving over the expected calls pays its costs, and timing is worth only what it costs (never more than
    switching untimed)."""
    import numpy as np  # noqa: PLC0415

    from algosel.learn.calibration import Calibration, ErrorSamples  # noqa: PLC0415

    return Calibration({"all": ErrorSamples(np.zeros(1), np.zeros((1, ranks)))})
