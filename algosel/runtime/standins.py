"""Stand-ins for the runtime's seams, shared by the tests and the benchmarks: selectors that make the executor take
a chosen path, a device probe, a measurer and a clock for CPU runs.

A selector stand-in wraps a real :class:`~algosel.learn.selector.Selector` (everything it does not override is the
model's) and implements :class:`~algosel.learn.protocol.RuntimeSelector`. What is tested with them is the runtime's
decision, not the model's predictions or ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from algosel.candidates import DEFAULT_ID
from algosel.runtime.candidates import ModelCandidates, Ranked


class Wrapping:
    """The wrapped selector, unchanged (the base of the stand-ins below)."""

    def __init__(self, sel: Any):
        self._sel = sel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sel, name)

    @property
    def model(self) -> Any:
        """The selector wrapped (the innermost real one)."""
        return getattr(self._sel, "model", self._sel)


class WithoutTimeModel(Wrapping):
    """The selector as a model trained without a time model sees it: no predicted times, no gain estimate."""

    time_model = None


class Preferring(Wrapping):
    """Ranks the candidates whose ids start with ``prefix`` (a space, ``"gemm"``, or an engine, ``"cudnn:eng45"``)
    first, and predicts them ``ratio`` times PyTorch's default's ``default_ms`` (everything else as slow as it).

    ``recorded=False`` decides every problem from the predicted times, never from the records (None: the model's
    records); ``host_costs=False`` reports no recorded host times (the route asked for, whatever they say).
    """

    def __init__(self, sel: Any, prefix: str = "gemm", ratio: float = 0.2, default_ms: float = 1.0,
                 recorded: bool | None = None, host_costs: bool = True):  # fmt: skip
        super().__init__(sel)
        self._prefix = prefix if ":" in prefix else prefix + ":"
        self._ratio, self._default_ms, self._recorded, self._host_costs = ratio, default_ms, recorded, host_costs

    def _first(self, choices: list) -> list:
        return sorted(choices, key=lambda c: not c.candidate_id.startswith(self._prefix))  # stable: the model's order

    def choose(self, problem, max_workspace_bytes=None, deterministic=False, top_k=1, live=False):
        return self._first(self._sel.choose(problem, max_workspace_bytes, deterministic, 10_000, live))[:top_k]

    def rank_rows(self, problem, rows, max_workspace_bytes=None):
        return self._first(self._sel.rank_rows(problem, rows, max_workspace_bytes))

    def is_recorded(self, problem) -> bool:
        return self._sel.is_recorded(problem) if self._recorded is None else self._recorded

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return {c: self.default_ms(problem) * (self._ratio if c.startswith(self._prefix) else 1.0)
                for c in candidate_ids}  # fmt: skip

    def default_ms(self, problem) -> float:
        """PyTorch's default's predicted time on ``problem``."""
        return self._default_ms

    def host_us(self, problem, candidate_ids):
        return self._sel.host_us(problem, candidate_ids) if self._host_costs else {}


class DefaultTakes(Preferring):
    """Every problem unrecorded, PyTorch's default predicted at ``default_us`` and every other candidate at
    ``others_us`` (default: as long), every problem at records distance ``distance``."""

    def __init__(self, sel: Any, default_us: float, others_us: float | None = None, distance: float = 0.0):
        super().__init__(sel, recorded=False)
        self._default_us, self._others_us = default_us, default_us if others_us is None else others_us
        self._distance = distance

    def records_distance(self, problem) -> float:
        return self._distance

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return {c: (self._default_us if c == DEFAULT_ID else self._others_us) / 1e3 for c in candidate_ids}


class FakeDevice:
    """The device seam on the CPU: looks answered by ``busy(tensor)`` (a bool, a callable, or an iterable of answers
    taken in turn), timing allowed where ``can_time``, step trials clocked by ``clock`` (None: no trials)."""

    def __init__(self, busy: bool | Callable[[torch.Tensor], bool] | Iterable[bool] = False, can_time: bool = False,
                 clock: Any = None):  # fmt: skip
        if isinstance(busy, bool):
            self._busy: Callable[[torch.Tensor], bool] = lambda t, answer=busy: answer
        elif callable(busy):
            self._busy = busy
        else:
            answers = iter(busy)
            self._busy = lambda t: next(answers)
        self._can_time, self.clock = can_time, clock
        self.looks = 0

    def busy(self, t: torch.Tensor) -> bool | None:
        self.looks += 1
        return self._busy(t)

    def routes(self, device: torch.device) -> bool:
        return device.type == "cpu"  # the CPU stands in for the GPU; meta tensors are PyTorch's, as on CUDA

    def capturing(self, device: torch.device) -> bool:
        return False

    def can_time(self, device: torch.device) -> bool:
        return self._can_time

    def block_clock(self, device: torch.device) -> Any:
        return self.clock


class ScriptedMeasurer:
    """Verify mode's measurer standing in for the GPU's: each candidate's (device ms, host us) from ``times`` by id
    (a dict, or a callable of the id), ``default`` where it has none; ``timed`` lists the problems asked for, and
    ``asked`` the candidate ids of each call."""

    def __init__(self, times: dict[str, tuple[float, float]] | Callable[[str], tuple[float, float]],
                 default: tuple[float, float] | None = None):  # fmt: skip
        self._times, self._default = times, default
        self.timed: list[str] = []
        self.asked: list[list[str]] = []
        self.deadlines: list[float | None] = []

    def _time(self, cid: str) -> tuple[float, float] | None:
        if callable(self._times):
            return self._times(cid)
        return self._times.get(cid, self._default)

    def measure_candidates(self, problem, pairs, source="", deadline_s=None):
        self.timed.append(problem.key)
        self.asked.append([c.candidate_id for _, c in pairs])
        self.deadlines.append(deadline_s)
        rows = []
        for _, c in pairs:
            t = self._time(c.candidate_id)
            if t is not None:
                rows.append({"candidate_id": c.candidate_id, "status": "ok", "time_ms_median": t[0],
                             "host_overhead_us": t[1]})  # fmt: skip
        return rows


class ManualClock:
    """A clock that moves only when told (``advance``), for the settling of looks after planning."""

    def __init__(self, start_s: float = 0.0):
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class LiveList(ModelCandidates):
    """A candidate source whose cuDNN live list is ``live(problem, k, modes)`` (the model's own list offline);
    ``asked`` lists each live query's (problem, k, modes)."""

    def __init__(self, selector: Any, live: Callable[..., list], max_workspace_bytes: int | None = None):
        super().__init__(selector, max_workspace_bytes, live=True)
        self._live_list = live
        self.asked: list[tuple] = []

    def ranked(self, problem, live, k, modes=None):
        if not live:
            return super().ranked(problem, False, k, modes)
        self.asked.append((problem, k, modes))
        return Ranked(self._live_list(problem, k, modes))


class CpuAsCuda:
    """CUDA's device seam, with the CPU's calls routed as a GPU's would be: the routing tested on a machine without
    one (the hook itself routes CUDA tensors alone; no look answered, nothing timed, no step trial, as CUDA's seam
    says of a CPU tensor)."""

    def __init__(self) -> None:
        from algosel.runtime.device import CudaDevice  # noqa: PLC0415

        self._cuda = CudaDevice()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cuda, name)

    def routes(self, device: torch.device) -> bool:
        return device.type in ("cpu", "cuda")

    def can_time(self, device: torch.device) -> bool:
        return False  # (asked of a CUDA device object on a machine without one, CUDA's seam would fail)


class CudaWithoutTrials:
    """CUDA's device seam without step trials (no block clock): routes tested for themselves, not judged by a
    trial of the step."""

    def __init__(self) -> None:
        from algosel.runtime.device import CudaDevice  # noqa: PLC0415

        self._cuda = CudaDevice()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cuda, name)

    def block_clock(self, device: torch.device) -> Any:
        return None


class RecordedMeasurer(ScriptedMeasurer):
    """Verify mode's measurer replaying a sweep's records (a :class:`~algosel.records.catalogue.Catalogue`): each
    candidate's recorded median time and host time on the problem; a candidate the records did not time there
    gives no row (as one that failed to build). The runtime's measured decisions on real data, on a CPU."""

    def __init__(self, catalogue: Any):
        self.catalogue = catalogue
        self._problem_key = ""
        super().__init__(self._recorded)

    def _recorded(self, cid: str) -> tuple[float, float] | None:
        t = self.catalogue.time_ms(self._problem_key, cid)
        if t is None:
            return None
        return t, self.catalogue.host_us(self._problem_key, [cid]).get(cid, float("nan"))

    def measure_candidates(self, problem, pairs, source="", deadline_s=None):
        self._problem_key = problem.key
        return super().measure_candidates(problem, pairs, source, deadline_s)
