"""The vocabulary shared by every layer: PyTorch's default's candidate id, and where a decision comes from.

A candidate id is ``"<space>:<name>"`` (``cudnn:eng65_k2=5..``, ``gemm:fc``, ``legacy:..``); each space builds and
parses its own. PyTorch's own path is the one id every layer names directly (the baseline every choice is judged
against, the pass-through of the hook), so it is defined once, here, below every package. Its value is the string
written in records, catalogues and the runtime's persistent cache; it must never change. So are the values of
:class:`DecisionSource`, the ``source`` of the runtime's decisions (:class:`algosel.runtime.cache.Decision`).
"""

from __future__ import annotations

import enum

#: PyTorch's default path (``cudnn.benchmark = False``): the baseline of every comparison and the hook's pass-through.
DEFAULT_ID = "pytorch:default"


class DecisionSource(str, enum.Enum):
    """Where a runtime decision's candidate comes from. Members are strings equal to their values, the ones the
    persistent cache holds (a decision read back has the plain string, equal to the member)."""

    RECORDS = "records"  # the records of this very problem (a sweep on this GPU)
    MEASURED = "measured"  # timed here: verify mode, ``algosel.predict(verify=k)``
    PREDICTED = "predicted"  # the model's predicted times
    MODEL = "model"  # the model's list alone, no time to judge by: PyTorch's own path is kept

    def __str__(self) -> str:
        return self.value
