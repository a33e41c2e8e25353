"""A trained selector on disk: a model directory and how it is written and read.

A model directory (``models/<gpu>-cudnn<version>/``, or ``...-legacy/`` for a selector of cuDNN's legacy algorithms)
holds

- ``model.txt``: LightGBM's own text format (portable; no pickle);
- ``manifest.json``: feature schema version, hyperparameters, data fingerprint, the environment the records came
  from, cross-validation and test scores, library versions, and the engine configs blocked for wrong results;
- ``catalogue.parquet``: for every recorded problem, its candidates (ids, heuristic ranks, notes, workspace, status,
  median time): :class:`~algosel.records.catalogue.Catalogue`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.learn.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from algosel.learn.ranker import Ranker, RankerParams
from algosel.records.catalogue import CATALOGUE_COLUMNS
from algosel.version import __version__

MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE = "model.txt", "manifest.json", "catalogue.parquet"
#: The spaces of a model whose manifest does not list them (schema-1 models made before the field existed).
SPACES_DEFAULT = ("cudnn", "gemm", "pytorch")


class SelectorError(ValueError):
    """A model directory that is missing, corrupt, or made for another schema, GPU or cuDNN."""


@dataclass
class Artifact:
    """What a model directory holds, loaded."""

    ranker: Ranker
    manifest: dict[str, Any]
    catalogue: pd.DataFrame


def save_artifact(directory: str | Path, ranker: Ranker, manifest: Mapping[str, Any], catalogue: pd.DataFrame) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if ranker.booster_ is None:
        raise SelectorError("cannot save an unfitted ranker")
    ranker.booster_.save_model(str(directory / MODEL_FILE))
    (directory / MANIFEST_FILE).write_text(json.dumps(dict(manifest), indent=2, sort_keys=True, default=str) + "\n")
    cols = [c for c in CATALOGUE_COLUMNS if c in catalogue]
    catalogue[cols].to_parquet(directory / CATALOGUE_FILE, index=False)
    return directory


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of a model directory, checked for the fields every model has."""
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
    return manifest


def load_artifact(directory: str | Path) -> Artifact:
    """Read and check a model directory (schema, model file, catalogue); the environment is not checked here."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest["feature_schema_version"] != FEATURE_SCHEMA_VERSION or manifest["feature_names"] != list(FEATURE_NAMES):
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
    params = RankerParams(**{k: v for k, v in manifest["params"].items() if k in RankerParams.__dataclass_fields__})
    return Artifact(Ranker(params, booster), manifest, catalogue)


def new_manifest(params: RankerParams, environment: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of a newly trained model: schema, parameters, environment, library versions and ``extra``."""
    import sklearn  # noqa: PLC0415

    return {
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "params": params.__dict__.copy(),
        "environment": dict(environment),
        "libraries": {
            "algosel": __version__,
            "lightgbm": lgb.__version__,
            "numpy": np.__version__,
            "pandas": pd.__version__,
            "scikit-learn": sklearn.__version__,
        },
        **extra,
    }


def space_of(spaces: list[str] | tuple[str, ...]) -> str:
    """What a model of these candidate spaces selects: ``"legacy"`` (the legacy API's algorithms alone) or
    ``"cudnn"`` (engine configs, GEMM lowering, PyTorch's default)."""
    return "legacy" if list(spaces) == ["legacy"] else "cudnn"
