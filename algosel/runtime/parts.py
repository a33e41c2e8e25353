"""An executor's parts that need its model (the candidate source, the verifier, the decider), made once the model
is loaded (:mod:`algosel.runtime.loading`): an executor whose model loads beside the first steps has none before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from algosel.runtime.candidates import CandidateSource, ModelCandidates
from algosel.runtime.decisions import Decider
from algosel.runtime.loading import ModelLoading
from algosel.runtime.verify import Verifier


@dataclass
class ModelParts:
    """An executor's parts that need its model: the candidate source, the verifier, the decider."""

    selector: Any
    unavailable: str
    candidates: CandidateSource
    verifier: Verifier
    decider: Decider

    @classmethod
    def make(cls, ex: Any, model: ModelLoading) -> ModelParts:
        given, policy, selector = ex._given, ex.policy, model.selector
        candidates = given["candidates"] or ModelCandidates(selector, ex.max_workspace_bytes, given["live"])
        verifier = Verifier(policy, selector, candidates, ex.verify, given["measurer"], ex.clock)
        records = given["record_measured"]
        if records is not None:
            from algosel.runtime.measured import MeasuredRecords  # noqa: PLC0415

            verifier.records = records if hasattr(records, "add") else MeasuredRecords(records)
        decider = Decider(policy, selector, candidates, verifier, ex.device_probe, ex.runtime_cache, ex.native_module,
                          ex.max_workspace_bytes, ex.device_bound, given["calibration"] or model.calibration,
                          given["rule_times"], given["tuning_budget_s"])  # fmt: skip
        return cls(selector, model.unavailable, candidates, verifier, decider)
