"""algosel: convolution algorithm selection for NVIDIA GPUs.

Measure every way to compute a convolution (cuDNN engine configs, GEMM lowering, PyTorch's default), learn
which is fastest, and use that choice instead of the vendor heuristic.
"""

from algosel.problem import DIRECTIONS, DTYPES, LAYOUTS, ConvProblem
from algosel.version import __version__

__all__ = ["DIRECTIONS", "DTYPES", "LAYOUTS", "ConvProblem", "__version__", "predict"]


def __getattr__(name: str):
    # `predict` (see algosel.runtime.api.predict) is imported on first use, so that `import algosel` stays light
    # (no LightGBM or pandas) for the sweeper; afterwards it is a plain module attribute (no per-call cost).
    if name == "predict":
        from algosel.runtime.api import predict

        globals()["predict"] = predict
        return predict
    raise AttributeError(f"module 'algosel' has no attribute {name!r}")
