"""How far the time model's predictions are from measured times on problems it never saw: the runtime's error model.

The runtime decides an unrecorded problem by what a switch is *expected* to save (:mod:`algosel.runtime.rule`).
That expectation needs the distribution of the truth around a prediction, not a point: this module measures it on
the model's held-out problems (:func:`algosel.learn.evaluate.is_test_shape`) and keeps it with the model
(``calibration.json``, recorded in the manifest's ``files``).

Per held-out problem, for PyTorch's default and each of the model's top :data:`TOP_K` candidates (its ranker's
order on its shortlist), two errors in log2:

- ``default``: ``log2(measured / predicted)`` of PyTorch's default's time (how long the call really is);
- ``speedup``: ``log2(measured speed-up / predicted speed-up)`` of the candidate over the default (whether it
  really is faster, and by how much).

They are kept as paired samples per group: the problem's family (:func:`algosel.measure.grid.family_of`) and its
distance band from the training records (``near``: at most :data:`NEAR_DISTANCE`, the sum of |log2 ratio| of the
shape fields to the nearest training problem; ``far`` beyond). A group with fewer than :data:`MIN_SAMPLES` samples
falls back to its family, then to all. Coverage is checked on two halves of the held-out problems: the 5-95%
interval of ``speedup`` fitted on one half, counted on the other (a 90% interval should hold ~90%).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.learn.evaluate import Prepared, test_shape_rows
from algosel.learn.rules import on_shortlist
from algosel.measure.grid import family_of
from algosel.problem import ConvProblem
from algosel.records.catalogue import Catalogue

CALIBRATION_FILE = "calibration.json"
FORMAT = "algosel-calibration"
#: Candidates per problem whose errors are kept: the runtime's shortlist is its top 3.
TOP_K = 3
#: Records distance (sum of |log2 ratio| over the shape fields) up to which a problem counts as near the records.
NEAR_DISTANCE = 2.0
#: Fewest samples a group needs to stand on its own (else its family's, else all).
MIN_SAMPLES = 40
#: The interval whose coverage is reported: 5% to 95%.
INTERVAL = (0.05, 0.95)


def band_of(distance: float) -> str:
    """``"near"`` or ``"far"`` from the records, by :meth:`Catalogue.distance`."""
    return "near" if distance <= NEAR_DISTANCE else "far"


@dataclass(frozen=True)
class ErrorSamples:
    """Log2 errors of one group, one row per held-out problem: ``default[i]`` of PyTorch's default, and
    ``speedup[i, r]`` of the model's candidate of rank ``r`` (NaN where the problem had fewer candidates). Rows keep
    the errors of one problem together: its candidates' errors are correlated, which decides what timing several is
    worth."""

    default: np.ndarray
    speedup: np.ndarray

    def __len__(self) -> int:
        return len(self.default)


@dataclass(frozen=True)
class Calibration:
    """The time model's held-out errors by group (see the module docstring); :meth:`samples` picks a group's."""

    groups: Mapping[str, ErrorSamples]
    coverage: Mapping[str, Any] = field(default_factory=dict)

    def samples(self, family: str, band: str) -> ErrorSamples:
        """The errors of ``family`` at ``band`` ("near"/"far"), or of the family, or of all problems, whichever is
        the first with :data:`MIN_SAMPLES`."""
        for name in (f"{family}/{band}", family, "all"):
            group = self.groups.get(name)
            if group is not None and len(group) >= MIN_SAMPLES:
                return group
        return self.groups["all"]

    def for_problem(self, problem: ConvProblem, distance: float) -> ErrorSamples:
        return self.samples(family_of(problem), band_of(distance))

    def to_json(self) -> str:
        groups = {
            name: {
                "default": np.round(g.default, 4).tolist(),
                "speedup": [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in g.speedup],
            }
            for name, g in sorted(self.groups.items())
        }
        return json.dumps({"format": FORMAT, "version": 1, "coverage": self.coverage, "groups": groups}) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "calibration") -> Calibration:
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"not an {FORMAT} file")
            groups = {
                name: ErrorSamples(
                    np.asarray(g["default"], dtype=float),
                    np.array([[np.nan if v is None else v for v in row] for row in g["speedup"]], dtype=float).reshape(
                        len(g["default"]), -1
                    ),
                )
                for name, g in data["groups"].items()
            }
            if "all" not in groups or len(groups["all"]) == 0:
                raise ValueError("no 'all' group")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{source}: not a calibration ({exc})") from exc
        return cls(groups, data.get("coverage", {}))


def problem_errors(selector: Any, frame: pd.DataFrame, envs: Mapping[str, Any], top_k: int = TOP_K) -> pd.DataFrame:
    """:func:`errors_on` the test shapes of ``frame`` (the records ``selector`` was trained on), the distance
    measured to its training shapes alone."""
    test = test_shape_rows(frame)
    train = Catalogue.from_records(frame[~test & (frame["status"] == "ok")])
    return errors_on(selector, frame[test].reset_index(drop=True), envs, train, top_k)


def errors_on(selector: Any, frame: pd.DataFrame, envs: Mapping[str, Any], train: Catalogue,
              top_k: int = TOP_K) -> pd.DataFrame:  # fmt: skip
    """One row per problem of ``frame`` (records ``selector`` never trained on): ``problem_key``, ``family``,
    ``distance`` (to the training records ``train``), the ``default`` error and the ``speedup0..`` errors of its
    top candidates (log2; NaN past its list), from ``selector``'s ranker and time model."""
    prep = Prepared.build(frame, envs)
    data = prep.data.assign(score=selector.ranker.score(prep.X), predicted=selector.time_model.predict_log2_ms(prep.X))
    shortlist_rank = selector.manifest.get("shortlist_rank")
    keep = (data["status"] == "ok") & np.isfinite(data["time_ms_median"]) & (data["time_ms_median"] > 0)
    keep &= np.array([on_shortlist(s, a, b, shortlist_rank) for s, a, b in
                      zip(data["space"].tolist(), data["rank_a"].tolist(), data["rank_b"].tolist())])  # fmt: skip
    data = data[keep].assign(measured=np.log2(data.loc[keep, "time_ms_median"].to_numpy(dtype=float)))
    # Per problem: PyTorch's default against its top_k other candidates by score (ties in record order), in one
    # pass over the rows rather than a filter per problem.
    is_default = (data["candidate_id"] == DEFAULT_ID).to_numpy()
    default = data[is_default].drop_duplicates("problem_key").set_index("problem_key")[["measured", "predicted"]]
    others = data[~is_default & data["problem_key"].isin(default.index).to_numpy()]
    others = others.sort_values("score", ascending=False, kind="stable")
    others = others.assign(rank=others.groupby("problem_key", sort=False).cumcount()).query("rank < @top_k")
    mine = default.loc[others["problem_key"]]
    speedup = (mine["measured"].to_numpy() - others["measured"].to_numpy()) - (
        mine["predicted"].to_numpy() - others["predicted"].to_numpy()
    )
    table = pd.DataFrame({"problem_key": others["problem_key"].to_numpy(), "rank": others["rank"].to_numpy(),
                          "speedup": speedup}).pivot(index="problem_key", columns="rank", values="speedup")  # fmt: skip
    out = []
    for key in data["problem_key"].unique():  # the problems in record order
        if key not in table.index:
            continue
        problem = ConvProblem.from_key(key)
        row = table.loc[key]
        out.append(
            {
                "problem_key": key,
                "family": family_of(problem),
                "distance": train.distance(problem),
                "default": float(default.at[key, "measured"] - default.at[key, "predicted"]),
                **{f"speedup{r}": float(row.get(r, np.nan)) for r in range(top_k)},
            }
        )
    return pd.DataFrame(out)


def from_errors(errors: pd.DataFrame, check_coverage: bool = True) -> Calibration:
    """A calibration of :func:`errors_on`'s rows (with its coverage check where ``check_coverage``)."""
    return Calibration(_groups(errors), coverage_check(errors) if check_coverage else {})


def _groups(errors: pd.DataFrame) -> dict[str, ErrorSamples]:
    bands = errors["distance"].map(band_of)
    keys = {"all": np.ones(len(errors), dtype=bool)}
    for family in sorted(errors["family"].unique()):
        mine = (errors["family"] == family).to_numpy()
        keys[family] = mine
        for band in ("near", "far"):
            keys[f"{family}/{band}"] = mine & (bands == band).to_numpy()
    speedup = errors[[c for c in errors.columns if c.startswith("speedup")]].to_numpy(dtype=float)
    return {
        name: ErrorSamples(errors["default"].to_numpy(dtype=float)[m], speedup[m])
        for name, m in keys.items()
        if m.any()
    }


def coverage_check(errors: pd.DataFrame) -> dict[str, Any]:
    """The 5-95% interval of the speed-up error fitted per group on one half of the problems (by a hash of the
    key), counted on the other half, both ways; ``all``: the share of every held-out candidate inside its group's
    interval (the group as :meth:`Calibration.samples` picks it)."""
    half = np.array([zlib.crc32(k.encode()) % 2 for k in errors["problem_key"]])
    inside, per_group = [], {}
    for fit_half in (0, 1):
        fitted = Calibration(_groups(errors[half == fit_half]))
        held = errors[half != fit_half]
        speedup = held[[c for c in held.columns if c.startswith("speedup")]].to_numpy(dtype=float)
        for family, band, row in zip(held["family"], held["distance"].map(band_of), speedup):
            s = fitted.samples(family, band).speedup
            lo, hi = np.nanquantile(s, INTERVAL)
            for e in row[np.isfinite(row)]:
                inside.append(lo <= e <= hi)
                per_group.setdefault(family, []).append(lo <= e <= hi)
    return {
        "interval": list(INTERVAL),
        "all": {"share": float(np.mean(inside)), "n": len(inside)},
        "families": {f: {"share": float(np.mean(v)), "n": len(v)} for f, v in sorted(per_group.items())},
    }


def model_errors(selector: Any, frame: pd.DataFrame, envs: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`problem_errors` on the records of each GPU of ``frame`` (a joint model's are several: a problem key
    names one problem on each), joined."""
    parts = [problem_errors(selector, frame[frame["env_id"] == env_id], envs) for env_id in frame["env_id"].unique()]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fit_calibration(selector: Any, frame: pd.DataFrame, envs: Mapping[str, Any]) -> Calibration:
    """The calibration of ``selector`` on the held-out problems of ``frame`` (its training records)."""
    if getattr(selector, "time_model", None) is None:
        raise ValueError("the model has no time model: nothing to calibrate (retrain with `algosel train`)")
    errors = model_errors(selector, frame, envs)
    if errors.empty:
        raise ValueError("no held-out problem with PyTorch's default and a candidate timed: nothing to calibrate")
    return Calibration(_groups(errors), coverage_check(errors))


def calibration_files(selector: Any, frame: pd.DataFrame, envs: Mapping[str, Any]) -> dict[str, str]:
    """``{calibration.json: text}`` of a model being saved (``extra_files`` of its save), or nothing where its
    records hold no held-out problem to calibrate on (a legacy space's records have no PyTorch's default)."""
    errors = model_errors(selector, frame, envs)
    if errors.empty or getattr(selector, "time_model", None) is None:
        return {}
    return {CALIBRATION_FILE: Calibration(_groups(errors), coverage_check(errors)).to_json()}


def load_calibration(directory: str | Path, manifest: Mapping[str, Any]) -> Calibration | None:
    """The model's calibration, verified against its manifest; ``None`` for a model without one."""
    from algosel.learn.artifact import verified_bytes  # noqa: PLC0415 - artifact imports lightgbm

    if CALIBRATION_FILE not in (manifest.get("files") or {}):
        return None
    data = verified_bytes(directory, manifest, CALIBRATION_FILE)
    return Calibration.from_json(data.decode("utf-8", errors="replace"), str(Path(directory) / CALIBRATION_FILE))


def format_coverage(cal: Calibration) -> str:
    """The coverage check as text lines."""
    cov = cal.coverage
    if not cov:
        return "  (no coverage check)"
    lo, hi = cov["interval"]
    lines = [f"  {100 * (hi - lo):.0f}% interval of the speed-up error holds {100 * cov['all']['share']:.1f}% of "
             f"{cov['all']['n']} held-out candidates"]  # fmt: skip
    for family, s in cov["families"].items():
        lines.append(f"    {family:16s} {100 * s['share']:5.1f}%  ({s['n']})")
    return "\n".join(lines)
