"""The candidate-id vocabulary shared by every layer: the one id spelled out here, the rest built by the spaces.

A candidate id is ``"<space>:<name>"`` (``cudnn:eng65_k2=5..``, ``gemm:fc``, ``legacy:..``); each space builds and
parses its own. PyTorch's own path is the one id every layer names directly (the baseline every choice is judged
against, the pass-through of the hook), so it is defined once, here, below every package. Its value is the string
written in records, catalogues and the runtime's persistent cache; it must never change.
"""

from __future__ import annotations

#: PyTorch's default path (``cudnn.benchmark = False``): the baseline of every comparison and the hook's pass-through.
DEFAULT_ID = "pytorch:default"
