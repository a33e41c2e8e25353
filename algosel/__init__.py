"""algosel: convolution algorithm selection for NVIDIA GPUs.

Measure every way to compute a convolution (cuDNN engine configs, GEMM lowering, PyTorch's default), learn
which is fastest, and use that choice instead of the vendor heuristic.
"""

from algosel.problem import DIRECTIONS, DTYPES, LAYOUTS, ConvProblem

__version__ = "0.1.0"
__all__ = ["DIRECTIONS", "DTYPES", "LAYOUTS", "ConvProblem", "__version__"]
