"""What the runtime asks of the device, behind one seam (``Executor(device=...)``): whether the device is still busy
when a call arrives, whether candidates can be timed now, and a clock on the device's timeline for step trials.

:class:`CudaDevice` answers for CUDA; tests and CPU benchmarks pass a stand-in with the same methods.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class DeviceClock:
    """Marks on the device's timeline: CUDA events recorded on the current stream of ``device``."""

    def __init__(self, device: torch.device):
        self.device = device

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def span_ms(self, start: Any, end: Any) -> float | None:
        """Milliseconds from ``start`` to ``end`` once the device has passed ``end`` (None: not yet)."""
        return start.elapsed_time(end) if end.query() else None


class BlockClock(Protocol):
    """What a step trial reads block spans with (:class:`DeviceClock` on a GPU)."""

    def mark(self) -> Any: ...

    def span_ms(self, start: Any, end: Any) -> float | None: ...


class DeviceProbe(Protocol):
    """The device seam of an executor (see the module docstring)."""

    def routes(self, device: torch.device) -> bool:
        """Whether calls on ``device`` are the hook's to route at all (else each is PyTorch's own, untouched)."""

    def busy(self, t: torch.Tensor) -> bool | None:
        """Whether the device of ``t`` still runs earlier work of its current stream (None: cannot tell)."""

    def capturing(self, device: torch.device) -> bool:
        """Whether a CUDA graph is being captured on ``device``'s current stream (nothing is decided then)."""

    def can_time(self, device: torch.device) -> bool:
        """Whether candidates can be timed on ``device`` now."""

    def block_clock(self, device: torch.device) -> BlockClock | None:
        """The clock of step trials on ``device`` (None: no timeline to read, no trial)."""


class CudaDevice:
    """The device seam on CUDA (a stream query costs about a microsecond)."""

    def routes(self, device: torch.device) -> bool:
        # The hook exists for cuDNN: a CPU, meta or other device's convolution is PyTorch's own, bit for bit, and so
        # is a CUDA one where cuDNN is switched off (PyTorch's own kernels compute it). Read at a signature's first
        # call.
        return device.type == "cuda" and torch.backends.cudnn.enabled

    def busy(self, t: torch.Tensor) -> bool | None:
        if not t.is_cuda or torch.cuda.is_current_stream_capturing():  # a capture allows no stream query
            return None
        return not torch.cuda.current_stream(t.device).query()

    def capturing(self, device: torch.device) -> bool:
        return device.type == "cuda" and torch.cuda.is_current_stream_capturing()

    def can_time(self, device: torch.device) -> bool:
        return device.type == "cuda" and not torch.cuda.is_current_stream_capturing()

    def block_clock(self, device: torch.device) -> DeviceClock | None:
        return DeviceClock(device) if device.type == "cuda" else None
