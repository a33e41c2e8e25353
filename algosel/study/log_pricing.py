"""``algosel analyze-log``'s inputs: the selectors that price a cuDNN log's calls (one per API), the records they
are priced on, and measurements of the problems those records lack (:mod:`algosel.study.logs` does the pricing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from algosel.learn.artifact import SelectorError, read_manifest
from algosel.learn.models import check_records_environment, check_space, default_model_dir
from algosel.learn.selector import Selector
from algosel.records import load_records
from algosel.records.store import one_environment

#: Each API of a log, the candidate space of its selector and the option that names that selector.
APIS = (("graph", "cudnn", "--model"), ("legacy", "legacy", "--legacy-model"))


@dataclass
class Pricing:
    """The selectors of a log's APIs (``graph``, ``legacy``; one that does not load is absent), their
    directories, the records they price on, and the warnings met on the way (one line each)."""

    selectors: dict[str, Any] = field(default_factory=dict)
    dirs: dict[str, Any] = field(default_factory=dict)
    records: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)


def load_pricing(models: dict[str, str | None], data: Sequence[str] | None, force: bool = False) -> Pricing:
    """The selectors of ``models`` (API -> model directory, ``None``: the shipped one of its space) and the records
    ``data`` (``None``: the selectors' own catalogues).

    A model asked for that does not load or was made for another GPU than ``data``'s raises
    :class:`~algosel.learn.artifact.SelectorError`; a default one is left out, with a warning (its column stays
    empty)."""
    pricing = Pricing()
    # The models named, their manifests alone, and the records, before any model loads (a second each): a model
    # that is missing or of the other API, or records of several GPUs, are refused at once.
    for api, space, option in APIS:
        if models.get(api):
            check_space(read_manifest(models[api]), models[api], space, f"{option}'s calls ({api} API)")
    records, envs = load_records(*data) if data is not None else (None, {})
    records_env = one_environment(records, envs, "a log's pricing")[1] if records is not None and len(records) else None
    for api, space, option in APIS:
        try:
            pricing.dirs[api] = models.get(api) or default_model_dir(space=space)
            pricing.selectors[api] = Selector.load(pricing.dirs[api], force=force)
            check_space(pricing.selectors[api].manifest, pricing.dirs[api], space, f"{option}'s calls ({api} API)")
        except SelectorError as exc:
            if models.get(api):  # the model asked for: a wrong one is an error, not an empty column
                raise
            pricing.selectors.pop(api, None)
            pricing.warnings.append(f"no {space} selector ({exc}); its column stays empty")
    if data is None:  # the records the selectors were trained on, which every model carries in its catalogue
        frames = [sel.catalogue.frame for sel in pricing.selectors.values()]
        pricing.records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return pricing
    pricing.records = records
    if records_env is not None:  # picks priced on another GPU's records mean nothing: refused as `evaluate` does
        _check_environment(pricing, models, records_env, force)
    return pricing


def _check_environment(pricing: Pricing, models: dict[str, str | None], records_env: Any, force: bool) -> None:
    for api, space, _ in APIS:
        if api not in pricing.selectors:
            continue
        try:
            other = check_records_environment(pricing.selectors[api].manifest, pricing.dirs[api], records_env, force)
            if other:
                pricing.warnings.append(f"warning: {pricing.dirs[api]} priced on records of another environment "
                                        f"(--force): {', '.join(other)}")  # fmt: skip
        except SelectorError as exc:
            if models.get(api):  # the model asked for
                raise
            del pricing.selectors[api]  # the default one: left out, as a model that does not load
            pricing.warnings.append(f"no {space} selector ({exc}); its column stays empty")


def measure_unrecorded(calls: Sequence[Any], records: pd.DataFrame) -> pd.DataFrame:
    """Sweep, on this GPU, the problems of ``calls`` the records lack (legacy calls: the legacy space).

    Raises
    ------
    ValueError
        No CUDA GPU is visible.
    """
    import torch  # noqa: PLC0415

    from algosel.measure.sweeper import Sweeper  # noqa: PLC0415
    from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415
    from algosel.records.environment import collect_environment  # noqa: PLC0415
    from algosel.spaces import make_space  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise ValueError("--measure needs a CUDA GPU (none is visible)")
    known = set(records["problem_key"].unique()) if len(records) else set()
    env = collect_environment()
    rows = []
    for api, names in (("legacy", ["legacy"]), ("graph", ["gemm", "pytorch", "cudnn"])):
        problems = {c.problem for c in calls if c.api == api and c.problem and c.problem.key not in known}
        if problems:
            sweeper = Sweeper([make_space(n) for n in names], CudaEventTimer(), env)
            for p in sorted(problems, key=lambda q: q.key):
                rows += sweeper.measure_problem(p, source="log")
    return pd.DataFrame(rows)
