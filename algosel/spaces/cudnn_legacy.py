"""cuDNN's legacy convolution API: the ``CUDNN_CONVOLUTION_*_ALGO`` enums, through ctypes on torch's ``libcudnn``.

Frameworks that never moved to the graph API (TensorFlow's legacy path, ONNX Runtime, MXNet) choose one of
these algorithms, with a math type, per direction. A candidate is one (algorithm, math type) pair:

- enumeration asks ``cudnnGet*Algorithm_v7`` (the legacy heuristic) for its ranked list, with the descriptor's
  math type set as a framework would (tensor ops allowed for half types, TF32 allowed for ``float32``, FMA only
  for ``float32_strict``); its order is recorded as ``rank_a``, so "the first ranked candidate that runs" is the
  legacy heuristic's choice, as for the graph API. Pairs it does not list are candidates too (``rank_a = -1``):
  the sweep records whether they build;
- preparing asks for the workspace size (``CUDNN_STATUS_NOT_SUPPORTED`` there is a ``build_failed`` record);
- running calls ``cudnnConvolutionForward`` / ``BackwardData`` / ``BackwardFilter`` on the current stream with a
  workspace from PyTorch's caching allocator.

The v7 heuristic also states each algorithm's determinism; a non-deterministic one carries the note
``nondeterministic``.

No C extension is built: the library is the one torch already loaded (found in ``/proc/self/maps``), so the
algorithms are exactly those a PyTorch process of this environment can run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from algosel.operands import Operands, memory_format
from algosel.problem import DTYPE_TABLE, ConvProblem
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate

#: ``cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t`` values, in enum order (the index is the C value).
ALGOS: dict[str, tuple[str, ...]] = {
    "fwd": ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
            "WINOGRAD_NONFUSED"),
    "bwd_data": ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    "bwd_filter": ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
}  # fmt: skip
_ENUM_PREFIX = {"fwd": "FWD", "bwd_data": "BWD_DATA", "bwd_filter": "BWD_FILTER"}
#: ``cudnnMathType_t`` values.
MATH_TYPES: tuple[str, ...] = ("DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH")
#: Math types measured per dtype (first: what the descriptor is set to for the v7 query). ALLOW_CONVERSION is
#: never used: it computes float32 problems in half precision, which is another problem.
DTYPE_MATH: dict[str, tuple[str, ...]] = {
    "float32": ("DEFAULT_MATH", "FMA_MATH"),  # DEFAULT permits TF32 on Ampere and later
    "float32_strict": ("FMA_MATH",),
    "float16": ("TENSOR_OP_MATH", "DEFAULT_MATH"),
    "bfloat16": ("TENSOR_OP_MATH", "DEFAULT_MATH"),
}
#: ``cudnnDataType_t`` values of the storage types of the dtype table.
_CUDNN_DATA_TYPE = {"FLOAT": 0, "HALF": 2, "BFLOAT16": 9}
_DATA_TYPE = {name: _CUDNN_DATA_TYPE[d.cudnn_data_type] for name, d in DTYPE_TABLE.items()}
_COMPUTE_FLOAT = 0  # float accumulation for every dtype, as PyTorch configures half types
_CROSS_CORRELATION = 1
_FORMAT = {"nchw": 0, "nhwc": 1}  # cudnnTensorFormat_t of the filter
_STATUS_SUCCESS = 0
_NON_DETERMINISTIC = 0


def algo_enum_name(direction: str, algo: int) -> str:
    """``("fwd", 1)`` -> ``"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM"``."""
    names = ALGOS[direction]
    if not 0 <= algo < len(names):
        raise ValueError(f"algo {algo} is not a {direction} algorithm (0..{len(names) - 1})")
    return f"CUDNN_CONVOLUTION_{_ENUM_PREFIX[direction]}_ALGO_{names[algo].removeprefix('ALGO_')}"


def candidate_name(direction: str, algo: int, math: str) -> str:
    """The candidate name of an (algorithm, math type) pair, e.g. ``IMPLICIT_PRECOMP_GEMM.TENSOR_OP_MATH``."""
    return f"{ALGOS[direction][algo]}.{math}"


def parse_candidate_name(direction: str, name: str) -> tuple[int, str]:
    """Inverse of :func:`candidate_name`: ``(algo, math type)``."""
    algo_name, _, math = name.partition(".")
    if algo_name not in ALGOS[direction] or math not in MATH_TYPES:
        raise ValueError(f"{name!r} is not a legacy {direction} candidate (ALGO.MATH_TYPE)")
    return ALGOS[direction].index(algo_name), math


class _Perf(ctypes.Structure):
    # cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout.
    _fields_ = [
        ("algo", ctypes.c_int),
        ("status", ctypes.c_int),
        ("time", ctypes.c_float),
        ("memory", ctypes.c_size_t),
        ("determinism", ctypes.c_int),
        ("mathType", ctypes.c_int),
        ("reserved", ctypes.c_int * 3),
    ]


def _loaded_cudnn_path() -> str | None:
    """The ``libcudnn.so`` torch loaded into this process (so that versions match)."""
    torch.backends.cudnn.version()  # makes torch load it if it has not yet
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if Path(path).name.startswith("libcudnn.so"):
                return path
    except OSError:
        pass
    return ctypes.util.find_library("cudnn")


class LegacyApi:
    """The legacy cuDNN functions algosel calls, bound with argument types (one per process)."""

    _instance: LegacyApi | None = None
    _lock = threading.Lock()

    def __init__(self, path: str):
        self.path = path
        lib = ctypes.CDLL(path)
        self.lib = lib
        p, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        ip, pp = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)
        signatures = {
            "cudnnGetErrorString": ([i], ctypes.c_char_p),
            "cudnnGetVersion": ([], sz),
            "cudnnCreate": ([pp], i),
            "cudnnSetStream": ([p, p], i),
            "cudnnCreateTensorDescriptor": ([pp], i),
            "cudnnSetTensorNdDescriptor": ([p, i, i, ip, ip], i),
            "cudnnDestroyTensorDescriptor": ([p], i),
            "cudnnCreateFilterDescriptor": ([pp], i),
            "cudnnSetFilter4dDescriptor": ([p, i, i, i, i, i, i], i),
            "cudnnDestroyFilterDescriptor": ([p], i),
            "cudnnCreateConvolutionDescriptor": ([pp], i),
            "cudnnSetConvolution2dDescriptor": ([p, i, i, i, i, i, i, i, i], i),
            "cudnnSetConvolutionGroupCount": ([p, i], i),
            "cudnnSetConvolutionMathType": ([p, i], i),
            "cudnnDestroyConvolutionDescriptor": ([p], i),
            "cudnnGetConvolutionForwardAlgorithmMaxCount": ([p, ip], i),
            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount": ([p, ip], i),
            "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount": ([p, ip], i),
            # (handle, 3 descriptors in the direction's order, conv, requested, returned, perf)
            "cudnnGetConvolutionForwardAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
            "cudnnGetConvolutionForwardWorkspaceSize": ([p, p, p, p, p, i, ctypes.POINTER(sz)], i),
            "cudnnGetConvolutionBackwardDataWorkspaceSize": ([p, p, p, p, p, i, ctypes.POINTER(sz)], i),
            "cudnnGetConvolutionBackwardFilterWorkspaceSize": ([p, p, p, p, p, i, ctypes.POINTER(sz)], i),
            # (handle, alpha, descA, A, descB, B, conv, algo, ws, ws_bytes, beta, descOut, out)
            "cudnnConvolutionForward": ([p, p, p, p, p, p, p, i, p, sz, p, p, p], i),
            "cudnnConvolutionBackwardData": ([p, p, p, p, p, p, p, i, p, sz, p, p, p], i),
            "cudnnConvolutionBackwardFilter": ([p, p, p, p, p, p, p, i, p, sz, p, p, p], i),
        }
        for name, (argtypes, restype) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, restype
        self._handles: dict[int, ctypes.c_void_p] = {}

    @classmethod
    def get(cls) -> LegacyApi:
        """The process's binding (created on first use)."""
        with cls._lock:
            if cls._instance is None:
                path = _loaded_cudnn_path()
                if path is None:
                    raise OSError("libcudnn is not loaded by torch and not found on the library path")
                cls._instance = cls(path)
            return cls._instance

    def check(self, status: int, what: str) -> None:
        """Raise ``CandidateError("run_failed")`` for a non-success cuDNN status."""
        if status != _STATUS_SUCCESS:
            raise CandidateError("run_failed", f"{what}: {self.status_name(status)}")

    def status_name(self, status: int) -> str:
        return self.lib.cudnnGetErrorString(status).decode()

    def handle(self) -> ctypes.c_void_p:
        """This device's cuDNN handle, bound to the current stream."""
        device = torch.cuda.current_device()
        h = self._handles.get(device)
        if h is None:
            torch.cuda.init()  # the handle must live in the runtime's primary context, which torch uses too
            h = ctypes.c_void_p()
            self.check(self.lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
            self._handles[device] = h
        self.check(self.lib.cudnnSetStream(h, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "stream")
        return h


class _Descriptors:
    """The x, w, y tensor/filter descriptors and a convolution descriptor of one problem and math type."""

    def __init__(self, api: LegacyApi, problem: ConvProblem, math: str):
        self.api = api
        lib = api.lib
        self.x, self.y, self.w, self.conv = (ctypes.c_void_p() for _ in range(4))
        dtype = _DATA_TYPE[problem.dtype]
        try:
            for desc, shape in ((self.x, problem.x_shape), (self.y, problem.y_shape)):
                api.check(lib.cudnnCreateTensorDescriptor(ctypes.byref(desc)), "create tensor descriptor")
                like = torch.empty(shape, device="meta").contiguous(memory_format=memory_format(problem))
                dims, strides = (ctypes.c_int * 4)(*like.shape), (ctypes.c_int * 4)(*like.stride())
                api.check(lib.cudnnSetTensorNdDescriptor(desc, dtype, 4, dims, strides), f"tensor {shape}")
            api.check(lib.cudnnCreateFilterDescriptor(ctypes.byref(self.w)), "create filter descriptor")
            k, c_per_group, r, s = problem.w_shape
            api.check(
                lib.cudnnSetFilter4dDescriptor(self.w, dtype, _FORMAT[problem.layout], k, c_per_group, r, s), "filter"
            )
            api.check(lib.cudnnCreateConvolutionDescriptor(ctypes.byref(self.conv)), "create conv descriptor")
            api.check(
                lib.cudnnSetConvolution2dDescriptor(
                    self.conv, problem.pad_h, problem.pad_w, problem.stride_h, problem.stride_w,
                    problem.dilation_h, problem.dilation_w, _CROSS_CORRELATION, _COMPUTE_FLOAT,
                ),
                "convolution descriptor",
            )  # fmt: skip
            api.check(lib.cudnnSetConvolutionGroupCount(self.conv, problem.groups), "group count")
            api.check(lib.cudnnSetConvolutionMathType(self.conv, MATH_TYPES.index(math)), "math type")
        except CandidateError as exc:
            self.close()
            raise CandidateError("build_failed", exc.reason) from exc

    def close(self) -> None:
        lib = self.api.lib
        for desc, destroy in ((self.x, lib.cudnnDestroyTensorDescriptor), (self.y, lib.cudnnDestroyTensorDescriptor),
                              (self.w, lib.cudnnDestroyFilterDescriptor),
                              (self.conv, lib.cudnnDestroyConvolutionDescriptor)):  # fmt: skip
            if desc.value:
                destroy(desc)
                desc.value = None

    def ordered(self, direction: str) -> tuple[ctypes.c_void_p, ...]:
        """The (in, in, conv, out) descriptors in the argument order of ``direction``'s functions."""
        a, b, out = _ROLES[direction]
        return getattr(self, a), getattr(self, b), self.conv, getattr(self, out)


#: The (in, in, out) operand roles of each direction's functions, in their argument order: one table for the
#: descriptors and the data pointers.
_ROLES: dict[str, tuple[str, str, str]] = {"fwd": ("x", "w", "y"), "bwd_data": ("w", "y", "x"),
                                           "bwd_filter": ("x", "y", "w")}  # fmt: skip


_FUNCS = {
    "fwd": ("Forward", "cudnnConvolutionForward"),
    "bwd_data": ("BackwardData", "cudnnConvolutionBackwardData"),
    "bwd_filter": ("BackwardFilter", "cudnnConvolutionBackwardFilter"),
}


@dataclass(frozen=True)
class HeuristicEntry:
    """One entry of the v7 heuristic's list."""

    algo: int
    math: str
    status: str
    deterministic: bool
    workspace_bytes: int


def v7_heuristic(problem: ConvProblem, math: str | None = None) -> list[HeuristicEntry]:
    """The ``cudnnGet*Algorithm_v7`` list for ``problem`` (best first), with the descriptor math type set to
    ``math`` (default: the dtype's first in :data:`DTYPE_MATH`). Entries whose status is not success are kept."""
    api = LegacyApi.get()
    math = math or DTYPE_MATH[problem.dtype][0]
    lib, (kind, _) = api.lib, _FUNCS[problem.direction]
    descs = _Descriptors(api, problem, math)
    try:
        count = ctypes.c_int()
        api.check(getattr(lib, f"cudnnGetConvolution{kind}AlgorithmMaxCount")(api.handle(), ctypes.byref(count)), "")
        perf = (_Perf * max(count.value, 1))()
        returned = ctypes.c_int()
        status = getattr(lib, f"cudnnGetConvolution{kind}Algorithm_v7")(
            api.handle(), *descs.ordered(problem.direction), count.value, ctypes.byref(returned), perf
        )
        if status != _STATUS_SUCCESS:
            raise CandidateError("build_failed", f"v7 heuristic: {api.status_name(status)}")
        return [
            HeuristicEntry(
                algo=int(e.algo),
                math=MATH_TYPES[e.mathType] if 0 <= e.mathType < len(MATH_TYPES) else str(e.mathType),
                status=api.status_name(e.status),
                deterministic=e.determinism != _NON_DETERMINISTIC,
                workspace_bytes=int(e.memory),
            )
            for e in perf[: returned.value]
        ]
    finally:
        descs.close()


class _PreparedLegacy(PreparedCandidate):
    def __init__(self, problem: ConvProblem, candidate: Candidate):
        self.problem = problem
        self.candidate = candidate
        self.api = LegacyApi.get()
        self.algo, self.math = parse_candidate_name(problem.direction, candidate.name)
        self.descs = _Descriptors(self.api, problem, self.math)
        kind, self._run_name = _FUNCS[problem.direction]
        size = ctypes.c_size_t()
        status = getattr(self.api.lib, f"cudnnGetConvolution{kind}WorkspaceSize")(
            self.api.handle(), *self.descs.ordered(problem.direction), self.algo, ctypes.byref(size)
        )
        if status != _STATUS_SUCCESS:
            self.descs.close()
            raise CandidateError("build_failed", f"workspace query: {self.api.status_name(status)}")
        self.workspace_bytes = int(size.value)
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def run(self, ops: Operands) -> torch.Tensor:
        d = self.problem.direction
        a, b, out = (getattr(ops, role) for role in _ROLES[d])
        da, db, conv, dout = self.descs.ordered(d)
        workspace = torch.empty(max(self.workspace_bytes, 1), dtype=torch.uint8, device=out.device)
        status = getattr(self.api.lib, self._run_name)(
            self.api.handle(), ctypes.byref(self._alpha), da, ctypes.c_void_p(a.data_ptr()), db,
            ctypes.c_void_p(b.data_ptr()), conv, self.algo, ctypes.c_void_p(workspace.data_ptr()),
            self.workspace_bytes, ctypes.byref(self._beta), dout, ctypes.c_void_p(out.data_ptr()),
        )  # fmt: skip
        self.api.check(status, self._run_name)
        return out

    def close(self) -> None:
        self.descs.close()


class CudnnLegacySpace(CandidateSpace):
    """Every (legacy algorithm, math type) pair of a problem's direction (see the module docstring)."""

    name = "legacy"
    label = "cuDNN legacy algorithms (CUDNN_CONVOLUTION_*_ALGO)"

    def available(self) -> str | None:
        if not torch.cuda.is_available():
            return "no CUDA device"
        try:
            LegacyApi.get()
        except (OSError, AttributeError) as exc:
            return f"cannot bind cuDNN's legacy API: {exc}"
        return None

    def enumerate(self, problem: ConvProblem) -> list[Candidate]:
        ranked = [e for e in v7_heuristic(problem) if e.status == "CUDNN_STATUS_SUCCESS"]
        first = {}
        for rank, e in enumerate(ranked):
            first.setdefault((e.algo, e.math), (rank, e))
        # The heuristic may list a math type other than the descriptor's (e.g. FMA for a half problem): measured too.
        maths = list(DTYPE_MATH[problem.dtype])
        maths += sorted({m for _, m in first if m not in maths and m in MATH_TYPES and "CONVERSION" not in m})
        candidates = []
        for math in maths:
            for algo in range(len(ALGOS[problem.direction])):
                rank, entry = first.get((algo, math), (-1, None))
                notes = () if entry is None else (() if entry.deterministic else ("nondeterministic",))
                name = candidate_name(problem.direction, algo, math)
                candidates.append(self.candidate(name, problem.direction, rank_a=rank, notes=notes))
        return sorted(candidates, key=lambda c: (c.rank_a < 0, c.rank_a))

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        return _PreparedLegacy(problem, candidate)

    def decode(self, name: str, direction: str) -> tuple[int, str]:
        """``(algorithm enum value, "math=<MATH_TYPE>")``."""
        algo, math = parse_candidate_name(direction, name)
        return algo, f"math={math}"

    def engine_code(self, engine_id: int, knobs: str, name: str) -> int:
        # One category per (algorithm, math type): 2000 + 10 * algorithm + cudnnMathType_t (9: unknown). The
        # direction, which gives the algorithm number its meaning, is a problem feature already.
        math = knobs.removeprefix("math=")
        return 2000 + 10 * int(engine_id) + (MATH_TYPES.index(math) if math in MATH_TYPES else 9)
