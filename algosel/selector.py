"""A trained selector on disk and in memory: the ranker, its manifest and the catalogue of known candidates.

A model directory (``models/<gpu>-cudnn<version>/``, or ``...-legacy/`` for a selector of cuDNN's legacy algorithms)
holds

- ``model.txt``: LightGBM's own text format (portable; no pickle);
- ``manifest.json``: feature schema version, hyperparameters, data fingerprint, the environment the records came
  from, cross-validation and test scores, library versions, and the engine configs blocked for wrong results;
- ``catalogue.parquet``: for every recorded problem, its candidates (ids, heuristic ranks, notes, workspace, status).

:meth:`Selector.choose` ranks the candidates valid for a problem. They come from, in order of preference: the
live cuDNN enumeration (where a GPU and the frontend are present), the records of that exact problem, or the
records of the nearest recorded problem of the same kind (direction, dtype, layout, GEMM-ness, depthwise-ness)
with GEMM lowering and PyTorch's default added where they apply and the model was trained on them.

A model covers the candidate spaces of its records (manifest ``spaces``): ``cudnn``, ``gemm`` and ``pytorch`` for
the engine-config selector, ``legacy`` for the legacy-algorithm selector that frameworks on the legacy API use.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.candidates.base import Candidate
from algosel.candidates.gemm import gemm_kind
from algosel.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, candidate_matrix, hardware_vector, problem_vector
from algosel.problem import ConvProblem
from algosel.ranker import Ranker, RankerParams

MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE = "model.txt", "manifest.json", "catalogue.parquet"
_CATALOGUE_COLUMNS = [
    "time_ms_median",
    "problem_key",
    "candidate_id",
    "space",
    "engine_id",
    "knobs",
    "rank_a",
    "rank_b",
    "rank_fallback",
    "notes",
    "workspace_bytes",
    "status",
]
#: Log-scaled fields that define "nearest" between problems of one kind.
#: The spaces of a model whose manifest does not list them.
SPACES_DEFAULT = ("cudnn", "gemm", "pytorch")
_NEAREST_FIELDS = ("n", "c", "k", "h", "w", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")


class SelectorError(ValueError):
    """A model directory that is missing, corrupt, or made for another schema, GPU or cuDNN."""


@dataclass(frozen=True)
class Choice:
    """One ranked candidate for a problem."""

    candidate_id: str
    space: str
    engine_id: int
    knobs: str
    score: float
    workspace_bytes: int | None
    source: str  # "live", "records" or "nearest:<problem key>"
    #: For a legacy candidate: the ``cudnnConvolution*Algo_t`` name (e.g.
    #: ``CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM``), its C value (``engine_id``) and the math type
    #: (``cudnnMathType_t`` name) to set on the convolution descriptor; empty otherwise.
    cudnn_algo: str = ""
    cudnn_math_type: str = ""


def _kind(p: ConvProblem) -> tuple:
    return (p.direction, p.dtype, p.layout, gemm_kind(p), p.is_depthwise)


class Selector:
    """A loaded model: ``Selector.load(path)``; then :meth:`choose`. Not thread-safe (memoisation dict)."""

    def __init__(self, ranker: Ranker, manifest: dict[str, Any], catalogue: pd.DataFrame):
        self.ranker = ranker
        self.manifest = manifest
        self.environment: dict[str, Any] = manifest["environment"]
        self.blocked = {tuple(b) for b in manifest.get("blocked_engines", [])}
        #: Candidate spaces the model was trained on (models of schema 1 without the field: the first three).
        self.spaces: tuple[str, ...] = tuple(manifest.get("spaces", SPACES_DEFAULT))
        self.space = space_of(self.spaces)
        self._cache: dict[tuple, list[Choice]] = {}
        self._matrices: dict[tuple, np.ndarray] = {}  # candidate feature rows per candidate list
        self._hardware = hardware_vector(self.environment)
        # Rows of one problem are turned into dicts on first use: converting all of them costs seconds at load.
        cat = catalogue.sort_values("problem_key", kind="stable").reset_index(drop=True)
        cat["notes"] = cat["notes"].fillna("")
        cat["knobs"] = cat["knobs"].fillna("")
        self._catalogue = cat
        self._columns = list(cat.columns)
        self._arrays = [cat[c].to_numpy(dtype=object) for c in self._columns]
        keys, starts = np.unique(cat["problem_key"].to_numpy(), return_index=True)
        ends = np.append(starts[1:], len(cat))
        self._spans = {k: (int(a), int(b)) for k, a, b in zip(keys, starts, ends)}
        self._rows_cache: dict[str, list[dict[str, Any]]] = {}
        self._nearest: dict[tuple, tuple[np.ndarray, list[str]]] = {}
        buckets: dict[tuple, list[tuple[np.ndarray, str]]] = {}
        for key in self._spans:
            p = ConvProblem.from_key(key)
            buckets.setdefault(_kind(p), []).append((self._position(p), key))
        for kind, items in buckets.items():
            self._nearest[kind] = (np.vstack([v for v, _ in items]), [k for _, k in items])

    def _rows(self, key: str) -> list[dict[str, Any]] | None:
        rows = self._rows_cache.get(key)
        if rows is None:
            span = self._spans.get(key)
            if span is None:
                return None
            a, b = span
            rows = [dict(zip(self._columns, values)) for values in zip(*(arr[a:b] for arr in self._arrays))]
            self._rows_cache[key] = rows
        return rows

    @staticmethod
    def _position(p: ConvProblem) -> np.ndarray:
        return np.log2(np.array([getattr(p, f) for f in _NEAREST_FIELDS], dtype=np.float64))

    # ------------------------------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        assert self.ranker.booster_ is not None
        self.ranker.booster_.save_model(str(directory / MODEL_FILE))
        (directory / MANIFEST_FILE).write_text(json.dumps(self.manifest, indent=2, sort_keys=True, default=str) + "\n")
        cols = [c for c in _CATALOGUE_COLUMNS if c in self._catalogue]
        self._catalogue[cols].to_parquet(directory / CATALOGUE_FILE, index=False)
        return directory

    @classmethod
    def load(cls, directory: str | Path, force: bool = False) -> Selector:
        """Load a model directory.

        Where a GPU is visible and it (or its cuDNN) differs from the model's, this raises :class:`SelectorError`
        unless ``force`` (then it warns): engine configs and their speeds are specific to both.
        """
        directory = Path(directory)
        for name in (MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE):
            if not (directory / name).is_file():
                raise SelectorError(f"{directory}: not a model directory (missing {name})")
        try:
            manifest = json.loads((directory / MANIFEST_FILE).read_text())
        except json.JSONDecodeError as exc:
            raise SelectorError(f"{directory / MANIFEST_FILE}: corrupt manifest ({exc})") from exc
        for field in ("feature_schema_version", "feature_names", "params", "environment"):
            if field not in manifest:
                raise SelectorError(f"{directory / MANIFEST_FILE}: manifest lacks {field!r}")
        if manifest["feature_schema_version"] != FEATURE_SCHEMA_VERSION or manifest["feature_names"] != list(
            FEATURE_NAMES
        ):
            raise SelectorError(
                f"{directory}: trained on feature schema {manifest['feature_schema_version']}, this algosel builds "
                f"schema {FEATURE_SCHEMA_VERSION}; retrain with `algosel train`"
            )
        try:
            booster = lgb.Booster(model_file=str(directory / MODEL_FILE))
        except lgb.basic.LightGBMError as exc:
            raise SelectorError(f"{directory / MODEL_FILE}: corrupt LightGBM model ({exc})") from exc
        if booster.num_feature() != len(FEATURE_NAMES):
            raise SelectorError(
                f"{directory / MODEL_FILE}: {booster.num_feature()} features, expected {len(FEATURE_NAMES)}"
            )
        try:
            catalogue = pd.read_parquet(directory / CATALOGUE_FILE)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise SelectorError(f"{directory / CATALOGUE_FILE}: unreadable catalogue ({exc})") from exc
        _check_environment(manifest["environment"], directory, force)
        params = RankerParams(**{k: v for k, v in manifest["params"].items() if k in RankerParams.__dataclass_fields__})
        return cls(Ranker(params, booster), manifest, catalogue)

    # ------------------------------------------------------------------------------------------- choosing
    def candidates_for(self, problem: ConvProblem, live: bool = False) -> tuple[list[dict[str, Any]], str]:
        """Candidate rows valid for ``problem`` and where they came from (see the module docstring)."""
        if live:
            from algosel.candidates import make_space  # noqa: PLC0415

            rows = []
            for name in sorted(self.spaces, key=("gemm", "pytorch", "cudnn", "legacy").index):
                space = make_space(name)
                rows += [candidate_row(c) for c in space.enumerate(problem)]
                space.release(problem)
            return rows, "live"
        rows = self._rows(problem.key)
        if rows is not None:
            return rows, "records"
        bucket = self._nearest.get(_kind(problem))
        if bucket is None:
            # Nothing of this kind was recorded: PyTorch's default (and GEMM lowering, if the math allows).
            rows, src = [], "none"
        else:
            positions, keys = bucket
            nearest = keys[int(np.argmin(((positions - self._position(problem)) ** 2).sum(axis=1)))]
            rows, src = (
                [dict(r, workspace_bytes=-1) for r in self._rows(nearest) if r["space"] in ("cudnn", "legacy")],
                f"nearest:{nearest}",
            )
        rows += [r for r in fixed_rows(problem) if r["space"] in self.spaces]
        return rows, src

    def choose(
        self,
        problem: ConvProblem,
        max_workspace_bytes: int | None = None,
        deterministic: bool = False,
        top_k: int = 1,
        live: bool = False,
    ) -> list[Choice]:
        """The ``top_k`` best candidates for ``problem``, best first (memoised per arguments).

        ``deterministic`` keeps GEMM lowering, PyTorch's default (deterministic under
        ``torch.backends.cudnn.deterministic``) and engine configs whose numerical notes were recorded without
        ``nondeterministic``. ``max_workspace_bytes`` drops candidates known to need more.
        """
        key = (problem, max_workspace_bytes, deterministic, top_k, live)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        all_rows, source = self.candidates_for(problem, live=live)
        # The candidate part of the features depends only on the list, which nearby problems share.
        mkey = (source, problem.key if source in ("records", "live") else gemm_kind(problem))
        result = self._rank(problem, all_rows, source, mkey, max_workspace_bytes, deterministic, top_k)
        self._cache[key] = result
        return result

    def is_recorded(self, problem: ConvProblem) -> bool:
        """Whether the records this model ships with measured ``problem`` itself."""
        return problem.key in self._spans

    def rank_rows(
        self, problem: ConvProblem, rows: list[dict[str, Any]], max_workspace_bytes: int | None = None
    ) -> list[Choice]:
        """Rank an explicit candidate list (e.g. cuDNN's live list, as the runtime hook has it), best first."""
        return self._rank(problem, rows, "live", None, max_workspace_bytes, False, len(rows))

    def _rank(self, problem, all_rows, source, mkey, max_workspace_bytes, deterministic, top_k) -> list[Choice]:
        # Features are built for the shortlist only (it depends on the list alone, so it is cached with it).
        cached = self._matrices.get(mkey) if mkey is not None else None
        if cached is None:
            shortlist = self.manifest.get("shortlist_rank")
            eligible = [i for i, r in enumerate(all_rows) if _on_shortlist(r, shortlist)]
            cached = (eligible, candidate_matrix([all_rows[i] for i in eligible]))
            if mkey is not None:
                self._matrices[mkey] = cached
        eligible, matrix = cached
        positions = [j for j, i in enumerate(eligible)
                     if self._allowed(all_rows[i], problem, max_workspace_bytes, deterministic)]  # fmt: skip
        keep = [eligible[j] for j in positions]
        if not keep:
            raise ValueError(
                f"no candidate for {problem.key} satisfies the filters "
                f"(max_workspace_bytes={max_workspace_bytes}, deterministic={deterministic})"
            )
        rows = [all_rows[i] for i in keep]
        n = len(keep)
        X = np.hstack([np.tile(problem_vector(problem), (n, 1)), matrix[positions], np.tile(self._hardware, (n, 1))])
        scores = self.ranker.score(X)
        order = np.argsort(-scores, kind="stable")[: max(1, top_k)]
        return [
            Choice(
                candidate_id=rows[i]["candidate_id"],
                space=rows[i]["space"],
                engine_id=int(rows[i]["engine_id"]),
                knobs=rows[i]["knobs"] or "",
                score=float(scores[i]),
                workspace_bytes=None if rows[i]["workspace_bytes"] < 0 else int(rows[i]["workspace_bytes"]),
                source=source,
                **_legacy_names(problem, rows[i]),
            )
            for i in order
        ]

    def recorded_gain_us(self, problem: ConvProblem, candidate_id: str) -> float | None:
        """Device time the candidate saves over PyTorch's default per call, where both were measured on this
        very problem; else None."""
        rows = self._rows(problem.key)
        if not rows:
            return None
        times = {r["candidate_id"]: r.get("time_ms_median") for r in rows}
        t, t_default = times.get(candidate_id), times.get("pytorch:default")
        if t is None or t_default is None or math.isnan(t) or math.isnan(t_default):  # not timed
            return None
        return 1000.0 * (t_default - t)

    def _allowed(self, row: Mapping[str, Any], problem: ConvProblem, max_ws: int | None, deterministic: bool) -> bool:
        if (int(row["engine_id"]), problem.direction, problem.dtype) in self.blocked and row["space"] == "cudnn":
            return False
        if row.get("status", "ok") != "ok" and row.get("status") != "workspace_exceeded":
            return False  # measured failing on this very problem
        if max_ws is not None and row["workspace_bytes"] is not None and row["workspace_bytes"] > max_ws:
            return False
        if deterministic and row["space"] == "cudnn":
            notes = (row.get("notes") or "").split(",")
            return self.manifest.get("numeric_notes_recorded", False) and "nondeterministic" not in notes
        if deterministic and row["space"] == "legacy":
            # The v7 heuristic states determinism for the algorithms it lists; unlisted ones are unknown.
            return row["rank_a"] >= 0 and "nondeterministic" not in (row.get("notes") or "").split(",")
        return True


def _legacy_names(problem: ConvProblem, row: Mapping[str, Any]) -> dict[str, str]:
    if row["space"] != "legacy":
        return {}
    from algosel.candidates.cudnn_legacy import algo_enum_name  # noqa: PLC0415

    math_type = (row.get("knobs") or "").removeprefix("math=")
    return {"cudnn_algo": algo_enum_name(problem.direction, int(row["engine_id"])),
            "cudnn_math_type": f"CUDNN_{math_type}"}  # fmt: skip


def candidate_row(c: Candidate, workspace_bytes: int = -1) -> dict[str, Any]:
    """A candidate as a catalogue row (``workspace_bytes`` -1: unknown until its plan is built)."""
    return {"candidate_id": c.candidate_id, "space": c.space, "engine_id": c.engine_id, "knobs": c.knobs,
            "rank_a": c.rank_a, "rank_b": c.rank_b, "rank_fallback": c.rank_fallback, "notes": ",".join(c.notes),
            "workspace_bytes": workspace_bytes, "status": "ok"}  # fmt: skip


def fixed_rows(problem: ConvProblem) -> list[dict[str, Any]]:
    """The candidates outside cuDNN's lists: GEMM lowering where the math allows, and PyTorch's default."""
    kind = gemm_kind(problem)
    rows = [] if kind is None else [candidate_row(Candidate("gemm", kind), workspace_bytes=0)]
    return rows + [candidate_row(Candidate("pytorch", "default"), workspace_bytes=0)]


def _on_shortlist(row: Mapping[str, Any], shortlist_rank: int | None) -> bool:
    """The selection rule of :func:`algosel.evaluate.shortlist_mask`, for one row."""
    if shortlist_rank is None or row["space"] != "cudnn":
        return True
    return 0 <= row["rank_a"] < shortlist_rank or 0 <= row["rank_b"] < shortlist_rank


def _check_environment(model_env: Mapping[str, Any], directory: Path, force: bool) -> None:
    try:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            return
        name = torch.cuda.get_device_name()
        cudnn = int(torch.backends.cudnn.version() or 0)
    except Exception:  # noqa: BLE001 - no usable CUDA: offline use for the model's own GPU
        return
    mismatches = []
    if name != model_env.get("gpu_name"):
        mismatches.append(f"GPU {name!r} (model: {model_env.get('gpu_name')!r})")
    if cudnn != model_env.get("cudnn"):
        mismatches.append(f"cuDNN {cudnn} (model: {model_env.get('cudnn')})")
    if mismatches:
        text = f"{directory} was trained for another environment: this process has {', '.join(mismatches)}"
        if not force:
            raise SelectorError(text + "; train a model for this GPU, or pass force=True to use it anyway")
        warnings.warn(text, stacklevel=3)


def build_catalogue(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[_CATALOGUE_COLUMNS].copy()


def blocked_engines(frame: pd.DataFrame) -> list[list[Any]]:
    """(engine id, direction, dtype) of cuDNN engines that ever gave a wrong result: never chosen there."""
    bad = frame[(frame["status"] == "wrong_result") & (frame["space"] == "cudnn")]
    return sorted({(int(e), d, t) for e, d, t in bad[["engine_id", "direction", "dtype"]].itertuples(index=False)})


def new_manifest(params: RankerParams, environment: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    import lightgbm  # noqa: PLC0415
    import sklearn  # noqa: PLC0415

    import algosel  # noqa: PLC0415

    return {
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "params": params.__dict__.copy(),
        "environment": dict(environment),
        "libraries": {
            "algosel": algosel.__version__,
            "lightgbm": lightgbm.__version__,
            "numpy": np.__version__,
            "pandas": pd.__version__,
            "scikit-learn": sklearn.__version__,
        },
        **extra,
    }


def space_of(spaces: Iterable[str]) -> str:
    """What a model of these candidate spaces selects: ``"legacy"`` (the legacy API's algorithms alone) or
    ``"cudnn"`` (engine configs, GEMM lowering, PyTorch's default)."""
    return "legacy" if list(spaces) == ["legacy"] else "cudnn"


def model_space(directory: Path) -> str:
    """:func:`space_of` a model directory (read from its manifest)."""
    try:
        spaces = json.loads((directory / MANIFEST_FILE).read_text()).get("spaces", SPACES_DEFAULT)
    except (OSError, json.JSONDecodeError):
        return "cudnn"
    return space_of(spaces)


def default_model_dir(models_root: str | Path | None = None, space: str = "cudnn") -> Path:
    """The shipped model of ``space`` (``"cudnn"``: engine configs, GEMM lowering and PyTorch's default;
    ``"legacy"``: the legacy algorithms) matching this GPU where one is visible, else the first of that space."""
    if space not in ("cudnn", "legacy"):
        raise ValueError(f"space must be 'cudnn' or 'legacy', got {space!r}")
    root = Path(models_root) if models_root else Path(__file__).resolve().parent.parent / "models"
    dirs = sorted(d for d in root.glob("*") if (d / MANIFEST_FILE).is_file() and model_space(d) == space)
    if not dirs:
        raise SelectorError(f"no trained {space} model under {root}; run `algosel train`")
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            from algosel.environment import collect_environment, gpu_slug  # noqa: PLC0415

            slug = gpu_slug(collect_environment()) + ("-legacy" if space == "legacy" else "")
            for d in dirs:
                if d.name == slug:
                    return d
    except Exception:  # noqa: BLE001,S110 - fall back to the first model
        pass
    return dirs[0]


def load_default(models_root: str | Path | None = None, force: bool = False, space: str = "cudnn") -> Selector:
    """Load :func:`default_model_dir`."""
    return Selector.load(default_model_dir(models_root, space), force=force)
