"""cuDNN graph API engine configs, through ``nvidia-cudnn-frontend`` (the ``cudnn`` Python module).

For a problem, the candidates are the union of the engine-config lists that cuDNN's heuristic modes A, B and
FALLBACK return, deduplicated by name (engine id plus knob values, e.g. ``eng67_k2=5_k13=0``). Each candidate
records its rank in every list; rank 0 of mode A is what cuDNN's heuristic would run.

One operation graph is built per heuristic mode (planning is one-shot per graph in the frontend), and each
candidate is built and executed from the graph of the first mode that lists it, so enumerating costs three
heuristic queries and preparing builds exactly one plan. Behaviour notes (``runtime_compilation``...) are
recorded per candidate. Numerical notes (``nondeterministic``, ``tensor_core``...) are not: frontend 1.32 offers
them only as filters, and the barred state of a filtered backend plan is not visible from Python
(``check_support_at_index`` is not bound; seen on the H200, 2026-11-30).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from algosel.operands import Operands, empty_like_layout
from algosel.problem import DTYPE_TABLE, ConvProblem
from algosel.spaces.base import Candidate, CandidateError, CandidateSpace, PreparedCandidate

log = logging.getLogger(__name__)

_MODES = ("a", "b", "fallback")
#: Notes a ``float32_strict`` problem deselects: they mean TF32 (or lower) math, as PyTorch filters them.
_STRICT_FP32_EXCLUDED = ("tensor_core", "down_convert_inputs")
_NAME_RE = re.compile(r"^eng(\d+)(?:_(.*))?$")

#: ``cudnnBackendKnobType_t`` names in value order (cuDNN 9): engine-config names carry knobs by these values.
KNOB_TYPES: dict[str, int] = {name: i for i, name in enumerate((
    "SPLIT_K", "SWIZZLE", "TILE_SIZE", "USE_TEX", "EDGE", "KBLOCK", "LDGA", "LDGB", "CHUNK_K", "SPLIT_H",
    "WINO_TILE", "MULTIPLY", "SPLIT_K_BUF", "TILEK", "STAGES", "REDUCTION_MODE", "CTA_SPLIT_K_MODE", "SPLIT_K_SLC",
    "IDX_MODE", "SLICED", "SPLIT_RS", "SINGLEBUFFER", "LDGC", "SPECFILT", "KERNEL_CFG", "WORKSPACE", "TILE_CGA",
    "TILE_CGA_M", "TILE_CGA_N", "BLOCK_SIZE", "OCCUPANCY", "ARRAY_SIZE_PER_THREAD", "NUM_C_PER_BLOCK",
    "SPLIT_COLS", "TILE_ROWS", "TILE_COLS", "LOAD_SIZE",
))}  # fmt: skip
_KNOB_NAMES: dict[int, str] = {value: name for name, value in KNOB_TYPES.items()}


# ------------------------------------------------------------------------------------- engine-config names
# The one codec of engine-config names (``eng67_k2=5_k13=0``: engine id, then knob id = value, as the frontend
# names a plan); the records, the features and the cuDNN log reader all go through it.
@functools.lru_cache(maxsize=16384)
def parse_knobs(knobs: str) -> dict[int, int]:
    """``"k2=5_k13=0"`` -> ``{2: 5, 13: 0}`` (anything that is not ``k<id>=<int>`` is ignored)."""
    out = {}
    for part in knobs.split("_") if knobs else ():
        key, _, value = part.partition("=")
        if key.startswith("k") and key[1:].isdigit() and value.lstrip("-").isdigit():
            out[int(key[1:])] = int(value)
    return out


def engine_config_name(engine_id: int, knobs: Mapping[int | str, Any]) -> str:
    """``eng67_k2=7_k13=0`` from an engine id and knob values keyed by knob id or by name (``TILE_SIZE`` or
    ``CUDNN_KNOB_TYPE_TILE_SIZE``); knobs sorted by id, unknown names left out."""
    parts = []
    for key, value in knobs.items():
        knob = KNOB_TYPES.get(key.removeprefix("CUDNN_KNOB_TYPE_")) if isinstance(key, str) else int(key)
        if knob is not None:
            parts.append((knob, int(value)))
    return f"eng{engine_id}" + "".join(f"_k{i}={v}" for i, v in sorted(parts))


def same_engine_config(a: str, b: str) -> bool:
    """Whether two engine-config names are one config (same engine and knob values, in any order)."""
    (ea, ka), (eb, kb) = parse_engine_name(a), parse_engine_name(b)
    if ea < 0 or eb < 0:
        return a == b
    return ea == eb and parse_knobs(ka) == parse_knobs(kb)


def _cudnn():
    import cudnn  # noqa: PLC0415 - optional dependency, imported on first use

    return cudnn


def parse_engine_name(name: str) -> tuple[int, str]:
    """Split ``eng67_k2=5_k13=0`` into ``(67, "k2=5_k13=0")``; ``(-1, name)`` for anything else."""
    match = _NAME_RE.match(name)
    if match is None:
        return -1, name
    return int(match.group(1)), match.group(2) or ""


@dataclass
class _ModeGraph:
    graph: Any
    tensors: dict[str, Any]
    names: list[str]


@dataclass
class _ProblemState:
    graphs: dict[str, _ModeGraph] = field(default_factory=dict)
    where: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (mode, plan index)


class _PreparedEngine(PreparedCandidate):
    def __init__(self, space: CudnnGraphSpace, problem: ConvProblem, candidate: Candidate, mg: _ModeGraph, index: int):
        self.problem = problem
        self.candidate = candidate
        self._space = space
        self._mg = mg
        self._index = index
        #: The frontend's serialized blob of the built plan (filled by :meth:`CudnnGraphSpace.runner`), which the
        #: compiled runtime path and the persistent cache load without planning again.
        self.blob: bytes | None = None
        t = mg.tensors
        #: The graph's uids of the x, w and y tensors, in that order (the variant pack's ordered form).
        self.uids: tuple[int, int, int] = (int(t["x"].get_uid()), int(t["w"].get_uid()), int(t["y"].get_uid()))
        try:
            mg.graph.build_plan_at_index(index)
            self.workspace_bytes = int(mg.graph.get_workspace_size_plan_at_index(index))
        except Exception as exc:  # noqa: BLE001 - the frontend raises several types for one meaning
            raise CandidateError("build_failed", f"{type(exc).__name__}: {exc}") from exc

    @property
    def graph(self) -> Any:
        """The frontend's graph (``cudnn.pygraph``) that holds the built plan."""
        return self._mg.graph

    @property
    def tensors(self) -> dict[str, Any]:
        """The graph's ``x``, ``w`` and ``y`` tensors (the variant pack's mapping form is keyed by them)."""
        return self._mg.tensors

    @property
    def plan_index(self) -> int:
        """The built plan's index in :attr:`graph`."""
        return self._index

    def run(self, ops: Operands) -> torch.Tensor:
        # Workspace from PyTorch's caching allocator on every call: freed blocks return to the pool of the current
        # stream, so many cached plans do not each hold their workspace.
        workspace = torch.empty(max(self.workspace_bytes, 1), dtype=torch.uint8, device=ops.x.device)
        handle = self._space.handle_for_current_stream()
        # The ordered form (buffers with their uids) goes straight to a native variant pack; the mapping form
        # normalises a dict on every call (~100 us of host time per call on frontend 1.32).
        self._mg.graph.execute_plan_at_index(
            (ops.x, ops.w, ops.y), workspace, self._index, handle=handle, tensor_uids=self.uids
        )
        return ops.output(self.problem.direction)


class CudnnGraphSpace(CandidateSpace):
    """Every engine config cuDNN's graph API offers for a problem (see the module docstring)."""

    name = "cudnn"
    label = "cuDNN engine configs (graph API)"

    def __init__(self):
        self._handle = None
        self._stream: int | None = None
        self._state: dict[str, _ProblemState] = {}

    def available(self) -> str | None:
        if not torch.cuda.is_available():
            return "no CUDA device"
        try:
            _cudnn()
        except ImportError as exc:
            return f"nvidia-cudnn-frontend is not installed ({exc}); pip install 'algosel[gpu]'"
        return None

    def handle_for_current_stream(self):
        cudnn = _cudnn()
        if self._handle is None:
            self._handle = cudnn.create_handle()
        stream = torch.cuda.current_stream().cuda_stream
        if stream != self._stream:  # rebinding costs microseconds on every call of the hook; do it on change only
            cudnn.set_stream(self._handle, stream)
            self._stream = stream
        return self._handle

    # ----------------------------------------------------------------------------------------- graphs
    def _graph(self, problem: ConvProblem, modes: list[str]) -> _ModeGraph:
        cudnn = _cudnn()
        io = getattr(cudnn.data_type, DTYPE_TABLE[problem.dtype].cudnn_data_type)
        g = cudnn.pygraph(
            io_data_type=io,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=self.handle_for_current_stream(),
        )
        like = {
            role: empty_like_layout(shape, problem, "meta")
            for role, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape))
        }

        def tensor(role: str):
            return g.tensor(name=role, dim=list(like[role].shape), stride=list(like[role].stride()), data_type=io)

        geometry = {
            "padding": [problem.pad_h, problem.pad_w],
            "stride": [problem.stride_h, problem.stride_w],
            "dilation": [problem.dilation_h, problem.dilation_w],
            "compute_data_type": cudnn.data_type.FLOAT,
        }
        if problem.direction == "fwd":
            x, w = tensor("x"), tensor("w")
            y = g.conv_fprop(image=x, weight=w, **geometry)
            out_role = "y"
        elif problem.direction == "bwd_data":
            y, w = tensor("y"), tensor("w")
            x = g.conv_dgrad(loss=y, filter=w, **geometry)
            out_role = "x"
        else:
            x, y = tensor("x"), tensor("y")
            w = g.conv_wgrad(image=x, loss=y, **geometry)
            out_role = "w"
        out = {"x": x, "w": w, "y": y}[out_role]
        out.set_output(True).set_dim(list(like[out_role].shape)).set_stride(list(like[out_role].stride()))
        out.set_data_type(io)
        g.validate()
        g.build_operation_graph()
        if problem.dtype == "float32_strict":
            g.deselect_numeric_notes([getattr(cudnn.numerical_note, n.upper()) for n in _STRICT_FP32_EXCLUDED])
        if not modes:  # a graph for create_execution_plan(engine, knobs): no heuristic query
            return _ModeGraph(graph=g, tensors={"x": x, "w": w, "y": y}, names=[])
        g.create_execution_plans([getattr(cudnn.heur_mode, m.upper()) for m in modes])
        names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
        return _ModeGraph(graph=g, tensors={"x": x, "w": w, "y": y}, names=names)

    def plain_graph(self, problem: ConvProblem) -> Any:
        """The problem's operation graph (``cudnn.pygraph``, built and validated) without any heuristic query: a
        config is added to it by ``create_execution_plan(engine, knobs)``."""
        return self._graph(problem, []).graph

    def enumerate(self, problem: ConvProblem, modes: tuple[str, ...] | None = None) -> list[Candidate]:
        """The engine configs of the heuristic ``modes``' lists (of ``a``, ``b``, ``fallback``; None: all three),
        each once, with its rank in each list."""
        modes = _MODES if modes is None else modes
        unknown = [m for m in modes if m not in _MODES]
        if unknown:
            raise ValueError(f"unknown heuristic mode {unknown[0]!r} (known: {', '.join(_MODES)})")
        state = _ProblemState()
        ranks: dict[str, dict[str, int]] = {}
        errors = []
        for mode in modes:
            try:
                mg = self._graph(problem, [mode])
            except Exception as exc:  # noqa: BLE001 - a mode with no config for the graph
                errors.append(f"{mode}: {type(exc).__name__}: {exc}")
                continue
            state.graphs[mode] = mg
            for rank, name in enumerate(mg.names):
                ranks.setdefault(name, {})[mode] = rank
                state.where.setdefault(name, (mode, rank))
        if not state.where:
            raise CandidateError("build_failed", "no heuristic mode offered an engine config: " + "; ".join(errors))

        notes: dict[str, list[str]] = {name: [] for name in state.where}
        for name, (mode, index) in state.where.items():
            try:
                behaviour = state.graphs[mode].graph.get_behavior_notes_for_plan_at_index(index)
            except Exception:  # noqa: BLE001 - unknown behaviour: leave it out
                behaviour = []
            labels = (str(b).rsplit(".", 1)[-1].lower() for b in behaviour)
            notes[name] += [label for label in labels if label != "type_count"]

        self._state[problem.key] = state
        return [
            self.candidate(
                name,
                problem.direction,
                rank_a=ranks[name].get("a", -1),
                rank_b=ranks[name].get("b", -1),
                rank_fallback=ranks[name].get("fallback", -1),
                notes=tuple(sorted(set(notes[name]))),
            )
            for name in state.where
        ]

    def prepare(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        """The candidate's plan: from the graph of the heuristic list that offered it where the problem was
        enumerated, else built directly by name (:meth:`prepare_by_name`, no heuristic query)."""
        state = self._state.get(problem.key)
        if state is None or candidate.name not in state.where:
            return self.prepare_by_name(problem, candidate)
        mode, index = state.where[candidate.name]
        return _PreparedEngine(self, problem, candidate, state.graphs[mode], index)

    def prepare_by_name(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        """Build an engine config from its name alone: engine id and knob values set on a graph of its own
        (``create_execution_plan``), a few milliseconds where enumerating cuDNN's three lists takes up to ~180 ms
        (H200, 2026-12-01). Raises ``build_failed`` where the config does not apply to the problem, or where a knob
        of the name has no frontend knob type (deprecated knobs such as KBLOCK and LDGC on frontend 1.32)."""
        cudnn = _cudnn()
        engine, knobs = parse_engine_name(candidate.name)
        if engine < 0:
            raise CandidateError("build_failed", f"{candidate.name!r} is not an engine-config name")
        mapped = {}
        for knob, value in parse_knobs(knobs).items():
            name = _KNOB_NAMES.get(knob)
            kind = getattr(cudnn.knob_type, name, None) if name else None
            if kind is None:
                raise CandidateError("build_failed", f"knob k{knob} ({name or 'unknown'}) cannot be set by name")
            mapped[kind] = value
        try:
            mg = self._graph(problem, [])
            mg.graph.create_execution_plan(engine, mapped)
            index = mg.graph.get_execution_plan_count() - 1
            built = mg.graph.get_plan_name_at_index(index)
        except Exception as exc:  # noqa: BLE001 - the frontend raises several types for one meaning
            raise CandidateError("build_failed", f"{type(exc).__name__}: {exc}") from exc
        if built != candidate.name:
            raise CandidateError("build_failed", f"{candidate.name} was built as {built}")
        return _PreparedEngine(self, problem, candidate, mg, index)

    def release(self, problem: ConvProblem) -> None:
        self._state.pop(problem.key, None)

    # ------------------------------------------------------------------------------- codec, features, runtime
    def decode(self, name: str, direction: str) -> tuple[int, str]:
        return parse_engine_name(name)

    def engine_code(self, engine_id: int, knobs: str, name: str) -> int:
        return int(engine_id)  # cuDNN's engine ids are small non-negative integers

    def knob_values(self, knobs: str) -> Mapping[int, int]:
        return parse_knobs(knobs)

    def runner(self, problem: ConvProblem, candidate: Candidate) -> PreparedCandidate:
        """The chosen config's plan, built once (by name; where that cannot be done, cuDNN's lists are queried to
        find the graph that holds it), with its serialized blob (the frontend serializes the plan most recently
        built in its graph)."""
        try:
            try:
                prepared = self.prepare(problem, candidate)
            except CandidateError:
                if problem.key in self._state:
                    raise
                self.enumerate(problem)
                prepared = self.prepare(problem, candidate)
            assert isinstance(prepared, _PreparedEngine)
            try:
                prepared.blob = bytes(prepared._mg.graph.serialize(as_bytes=True))
            except Exception as exc:  # noqa: BLE001 - no blob: the plan still runs from Python, uncached
                log.info("algosel: cannot serialize %s for %s (%s)", candidate.candidate_id, problem.key, exc)
            return prepared
        finally:
            self.release(problem)
