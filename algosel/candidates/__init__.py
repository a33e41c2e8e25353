"""Candidate spaces: the ways to compute a convolution that algosel measures and chooses between."""

from __future__ import annotations

from algosel.candidates.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate

#: Space names accepted by :func:`make_space` (and ``algosel sweep --spaces``).
SPACE_NAMES: tuple[str, ...] = ("cudnn", "gemm", "pytorch", "legacy")


def make_space(name: str) -> CandidateSpace:
    """A new candidate space by name."""
    if name == "cudnn":
        from algosel.candidates.cudnn_engines import CudnnEngineSpace

        return CudnnEngineSpace()
    if name == "gemm":
        from algosel.candidates.gemm import GemmSpace

        return GemmSpace()
    if name == "pytorch":
        from algosel.candidates.pytorch_default import PyTorchDefaultSpace

        return PyTorchDefaultSpace()
    if name == "legacy":
        from algosel.candidates.cudnn_legacy import CudnnLegacySpace

        return CudnnLegacySpace()
    raise ValueError(f"candidate space must be one of {', '.join(SPACE_NAMES)}; got {name!r}")


__all__ = ["SPACE_NAMES", "Candidate", "CandidateError", "CandidateSpace", "PreparedCandidate", "make_space"]
