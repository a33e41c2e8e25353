"""A trained selector on disk: a model directory and how it is written and read.

A model directory (``models/<gpu>-cudnn<version>/``, or ``...-legacy/`` for a selector of cuDNN's legacy algorithms)
holds

- ``model.txt``: LightGBM's own text format (portable; no pickle);
- ``manifest.json``: feature schema version, hyperparameters, data fingerprint, the environment the records came
  from, cross-validation and test scores, library versions, and the engine configs blocked for wrong results;
- ``catalogue.parquet``: for every recorded problem, its candidates (ids, heuristic ranks, notes, workspace, status,
  median time, host time per call): :class:`~algosel.records.catalogue.Catalogue`;
- whatever reports were saved with it (``algosel train`` adds ``tuning.csv``, ``test_report.csv``, ``README.md``).

A directory is written as a whole (:func:`algosel.files.atomic_directory`: filled under a temporary name, then
renamed), and its manifest's ``files`` records the size and SHA-256 of every other file. Loading checks the files it
reads against them before LightGBM or pyarrow sees a byte: a truncated ``model.txt`` (an interrupted copy) is a
one-line :class:`SelectorError` naming the file, never a crash inside LightGBM. A manifest without ``files`` (a
model older than the field, or one written by hand) is refused: its files cannot be verified. Then every LightGBM
file is read by a strict parser (:mod:`algosel.learn.model_text`) before LightGBM parses it, because LightGBM
aborts, segfaults or loops on a damaged model text that a recomputed hash would let through.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from algosel.files import atomic_directory, describe_file, sha256_file, write_text
from algosel.learn.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from algosel.learn.model_text import ModelTextError, check_model_text
from algosel.learn.ranker import Ranker, RankerParams
from algosel.outputs import OutputError
from algosel.records.catalogue import CATALOGUE_COLUMNS
from algosel.resources import shipped_path
from algosel.version import __version__

MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE = "model.txt", "manifest.json", "catalogue.parquet"
#: The spaces of a model whose manifest does not list them (schema-1 models made before the field existed).
SPACES_DEFAULT = ("cudnn", "gemm", "pytorch")
#: The manifest's fields a loader reads, and the JSON type each must have (a hand-edited manifest with a string for
#: an object was a traceback deep inside a loader).
_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "feature_schema_version": (int,), "feature_names": (list,), "params": (dict,), "environment": (dict,),
    "files": (dict,), "time_model": (dict,), "spaces": (list,), "blocked_engines": (list,),
}  # fmt: skip
#: SHA-256 of the model texts :func:`booster_from_bytes` found sound in this process (the check is ~50-150 ms).
_sound_texts: set[bytes] = set()


class SelectorError(ValueError):
    """A model directory that is missing, corrupt, or made for another schema, GPU or cuDNN."""


@dataclass
class Artifact:
    """What a model directory holds, loaded."""

    ranker: Ranker
    manifest: dict[str, Any]
    catalogue: pd.DataFrame


def save_artifact(
    directory: str | Path,
    ranker: Ranker,
    manifest: Mapping[str, Any],
    catalogue: pd.DataFrame,
    extra_files: Mapping[str, str | bytes] | None = None,
    replace: bool = False,
    replace_shipped: bool = False,
) -> Path:
    """Write a model directory as a whole: model, catalogue, ``extra_files`` (name -> content) and the manifest,
    whose ``files`` records the size and SHA-256 of each other file.

    ``directory`` must not exist unless ``replace``: then it must hold a model's own files alone (those its
    manifest lists, :func:`replaceable_files`), which are replaced, so that no file of the old model survives
    beside the new one; a shipped model is replaced only with ``replace_shipped`` too.

    Raises
    ------
    SelectorError
        For an unfitted ranker, when ``directory`` exists and ``replace`` is false, or holds anything else than a
        model's own files, or is a shipped model without ``replace_shipped``.
    """
    directory = Path(directory)
    if ranker.booster_ is None:
        raise SelectorError("cannot save an unfitted ranker")
    reserved = {MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE}
    for name in extra_files or {}:
        if name in reserved or Path(name).name != name or name.startswith("."):
            raise SelectorError(f"cannot save an extra file named {name!r} in a model directory")
    owned = replaceable_files(directory, replace_shipped) if replace and directory.exists() else None
    try:
        with atomic_directory(directory, replace=owned) as tmp:
            (tmp / MODEL_FILE).write_text(ranker.booster_.model_to_string(), encoding="utf-8")
            cols = [c for c in (*CATALOGUE_COLUMNS, "env_id") if c in catalogue]  # env_id: a joint model's
            # sorted by problem, as the catalogue reads it: a sorted file is read without sorting it again
            catalogue[cols].sort_values("problem_key", kind="stable").to_parquet(tmp / CATALOGUE_FILE, index=False)
            for name, content in (extra_files or {}).items():
                data = content.encode("utf-8") if isinstance(content, str) else content
                (tmp / name).write_bytes(data)
            files = {p.name: describe_file(p) for p in sorted(tmp.iterdir())}
            full = {**dict(manifest), "files": files}
            (tmp / MANIFEST_FILE).write_text(json.dumps(full, indent=2, sort_keys=True, default=str) + "\n")
    except FileExistsError:
        raise SelectorError(f"{directory} exists; a model directory is never overwritten unless asked to") from None
    except OutputError as exc:  # a file appeared in the directory while the model was written
        raise SelectorError(str(exc)) from None
    return directory


#: Shipped models taken out of the package, by directory name: the model that replaces each. A path to one of these
#: names that holds no model is refused saying so, never taken for some other model.
RETIRED_MODELS: dict[str, str] = {
    # The joint H100+H200 model scored the H200's held-out problems as well (1.044 / 81.1% within 5% against the
    # H200-only model's 1.045 / 80.6%, docs/selector.md): one model for the Hopper GPUs.
    "h200-cudnn91900": "joint-h100-h200-cudnn91900",
}
def is_shipped(directory: str | Path) -> bool:
    """Whether ``directory`` is (or lies in) one of the package's shipped models (``models/`` of a checkout links
    there)."""
    shipped = shipped_path("models").resolve()
    return shipped in Path(directory).resolve().parents


def replaceable_files(directory: str | Path, replace_shipped: bool = False) -> frozenset[str]:
    """The files a new model may replace in the existing model directory ``directory``: those its manifest lists,
    and the manifest. Checked before any training, and again when the new model is written.

    Raises
    ------
    SelectorError
        One line naming the directory: a shipped model without ``replace_shipped``; no readable manifest (a folder
        that holds no model); an entry the manifest does not list (a user's file beside the model).
    """
    directory = Path(directory)
    if is_shipped(directory) and not replace_shipped:
        raise SelectorError(
            f"{directory}: a model shipped with algosel; it is never replaced unless --replace-shipped "
            "(replace_shipped=True) names it; choose another --name or --models"
        )
    if not directory.is_dir():
        raise SelectorError(f"{directory}: exists and is not a model directory; not replaced")
    try:
        listed = json.loads((directory / MANIFEST_FILE).read_bytes().decode("utf-8")).get("files")
    except (OSError, ValueError, AttributeError, RecursionError):
        listed = None
    if not isinstance(listed, dict):
        raise SelectorError(
            f"{directory}: holds no model manifest listing its files, so it is not replaced (a folder of yours?); "
            "choose another --name or --models"
        )
    owned = frozenset([*map(str, listed), MANIFEST_FILE])
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in owned or not p.is_file())
    if foreign:
        raise SelectorError(
            f"{directory}: holds {foreign[0]!r}, which is not one of the model's files its manifest lists; nothing "
            "was replaced (move it away, or choose another --name or --models)"
        )
    return owned


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of a model directory, checked for the fields every model has."""
    directory = Path(directory)
    successor = RETIRED_MODELS.get(directory.name)
    if successor is not None and not directory.exists():
        raise SelectorError(
            f"{directory}: the model {directory.name} was retired in favour of models/{successor}; use that one"
        )
    if not directory.is_dir():
        raise SelectorError(
            f"{directory}: not a model directory ({'a file' if directory.exists() else 'no such directory'})"
        )
    for name in (MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE):
        if not (directory / name).is_file():
            raise SelectorError(f"{directory}: not a model directory (missing {name})")
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise SelectorError(f"{directory / MANIFEST_FILE}: corrupt manifest ({exc})") from None
    except OSError as exc:
        raise SelectorError(f"{directory / MANIFEST_FILE}: unreadable ({exc.strerror or exc})") from None
    if not isinstance(manifest, dict):
        raise SelectorError(f"{directory / MANIFEST_FILE}: corrupt manifest (not a JSON object)")
    for field in ("feature_schema_version", "feature_names", "params", "environment"):
        if field not in manifest:
            raise SelectorError(f"{directory / MANIFEST_FILE}: manifest lacks {field!r}")
    for field, types in _MANIFEST_TYPES.items():
        value = manifest.get(field)
        if value is None and field in ("files", "time_model"):
            continue  # as if absent: no time model; no files, which verified_bytes refuses naming the fix
        if field in manifest and (not isinstance(value, types) or isinstance(value, bool)):
            want = {int: "an integer", list: "a list", dict: "an object"}[types[0]]
            raise SelectorError(
                f"{directory / MANIFEST_FILE}: corrupt manifest ({field!r} is {type(value).__name__} "
                f"{json.dumps(value)[:40]}, expected {want}); restore the model directory or retrain"
            )
    for field, item, want in (("spaces", str, "names"), ("blocked_engines", list, "lists")):
        if not all(isinstance(v, item) for v in manifest.get(field, [])):
            raise SelectorError(f"{directory / MANIFEST_FILE}: corrupt manifest ({field!r} must hold {want})")
    return manifest


def tuned_params(directory: str | Path, base: RankerParams | None = None) -> RankerParams:
    """The ranker hyperparameters a model's tuning chose (its manifest's ``params``) on top of ``base``, less
    ``num_threads``, which belongs to the machine that trains, not to the model: what ``algosel train
    --params-from`` and the benchmarks that refit a model's setting start from."""
    base = base if base is not None else RankerParams()
    names = {f.name for f in fields(RankerParams)} - {"num_threads"}
    chosen = read_manifest(directory)["params"]
    return replace(base, **{k: v for k, v in chosen.items() if k in names})


def verified_bytes(directory: str | Path, manifest: Mapping[str, Any], name: str) -> bytes:
    """The content of ``directory/name``, checked against the size and SHA-256 the manifest's ``files`` records.

    Raises
    ------
    SelectorError
        Naming the manifest when it records no ``files`` (nothing to verify against: a model saved before manifests
        listed their files, or a manifest written by hand), else naming the file when it is missing, unreadable, or
        differs from what the manifest records.
    """
    path = Path(directory) / name
    files = manifest.get("files")
    if files is None:
        raise SelectorError(
            f"{Path(directory) / MANIFEST_FILE}: records no 'files' (sizes and SHA-256), so {name} cannot be "
            "verified before it is read; retrain the model with `algosel train` (or restore its directory)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SelectorError(f"{path}: unreadable ({exc.strerror or exc})") from None
    entry = files.get(name) if isinstance(files, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or "sha256" not in entry:
        raise SelectorError(f"{Path(directory) / MANIFEST_FILE}: records no size and sha256 of {name}")
    if len(data) != entry["bytes"]:
        raise SelectorError(
            f"{path}: {len(data)} bytes, the manifest records {entry['bytes']} (truncated or replaced; restore the "
            "model directory or retrain)"
        )
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise SelectorError(f"{path}: content differs from the manifest's sha256 (damaged or replaced)")
    return data


def verify_directory(directory: str | Path) -> list[str]:
    """Every file the manifest lists that is missing or differs from its recorded size and SHA-256 (empty: the
    directory is as it was written). Loading checks only the files it reads (:func:`load_artifact`)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    problems = []
    for name, entry in sorted((manifest.get("files") or {}).items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif not isinstance(entry, dict):
            problems.append(f"{directory / MANIFEST_FILE}: records no size and sha256 of {name}")
        elif path.stat().st_size != entry.get("bytes") or sha256_file(path) != entry.get("sha256"):
            problems.append(f"{path}: differs from the manifest")
    return problems


def record_files(directory: str | Path, names: list[str]) -> dict[str, Any]:
    """Record the size and SHA-256 of the files ``names`` of a model directory in its manifest's ``files`` (the
    manifest rewritten atomically); the other entries are kept as they were, unchecked.

    For reports written into a model directory after it was saved (``algosel evaluate --out`` the model's own
    directory): the model, time model and catalogue are never re-recorded this way.

    Raises
    ------
    SelectorError
        For a name the directory lacks, or one of the model's own files.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    files = dict(manifest.get("files") or {})
    protected = {MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE, str((manifest.get("time_model") or {}).get("file", ""))}
    for name in names:
        path = directory / name
        if name in protected or Path(name).name != name:
            raise SelectorError(f"{directory}: record_files does not re-record {name!r}")
        if not path.is_file():
            raise SelectorError(f"{path}: missing; cannot record it in the manifest")
        files[name] = describe_file(path)
    full = {**manifest, "files": dict(sorted(files.items()))}
    write_text(directory / MANIFEST_FILE, json.dumps(full, indent=2, sort_keys=True, default=str) + "\n")
    return full


def load_artifact(directory: str | Path) -> Artifact:
    """Read and check a model directory (schema, file hashes, model file, catalogue); the environment is not
    checked here."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    names = manifest["feature_names"]
    if manifest["feature_schema_version"] == FEATURE_SCHEMA_VERSION and names != list(FEATURE_NAMES):
        raise SelectorError(
            f"{directory / MANIFEST_FILE}: feature_names differ from schema {FEATURE_SCHEMA_VERSION}'s "
            f"({_first_difference(names)}); restore the model directory or retrain"
        )
    if manifest["feature_schema_version"] != FEATURE_SCHEMA_VERSION:
        raise SelectorError(
            f"{directory}: trained on feature schema {manifest['feature_schema_version']}, this algosel builds "
            f"schema {FEATURE_SCHEMA_VERSION}; retrain with `algosel train`"
        )
    # LightGBM and pyarrow parse the very bytes that were verified (no second read of the files).
    model_text = verified_bytes(directory, manifest, MODEL_FILE)
    catalogue_bytes = verified_bytes(directory, manifest, CATALOGUE_FILE)
    booster = booster_from_bytes(model_text, directory / MODEL_FILE)
    if booster.num_feature() != len(FEATURE_NAMES):
        raise SelectorError(
            f"{directory / MODEL_FILE}: {booster.num_feature()} features, expected {len(FEATURE_NAMES)}"
        )
    try:
        catalogue = pd.read_parquet(io.BytesIO(catalogue_bytes))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise SelectorError(f"{directory / CATALOGUE_FILE}: unreadable catalogue ({exc})") from exc
    params = RankerParams(**{k: v for k, v in manifest["params"].items() if k in RankerParams.__dataclass_fields__})
    return Artifact(Ranker(params, booster), manifest, catalogue)


def _first_difference(names: list[Any]) -> str:
    """Where a manifest's ``feature_names`` first differ from :data:`FEATURE_NAMES` (an edited manifest)."""
    for i, (given, built) in enumerate(zip(names, FEATURE_NAMES)):
        if given != built:
            return f"feature {i} is {given!r}, the schema's is {built!r}"
    return f"{len(names)} names, the schema has {len(FEATURE_NAMES)}"


def booster_from_bytes(data: bytes, path: str | Path) -> lgb.Booster:
    """A LightGBM booster from the text model ``data`` (read from ``path``), which the strict parser
    (:func:`~algosel.learn.model_text.check_model_text`) reads first: LightGBM itself never sees a text that could
    abort, segfault or hang the process.

    Raises
    ------
    SelectorError
        ``<path>: corrupt LightGBM model (line N: ...)``.
    """
    digest = hashlib.sha256(data).digest()
    try:
        text = data.decode("utf-8") if digest in _sound_texts else check_model_text(data)
    except ModelTextError as exc:
        raise SelectorError(f"{path}: corrupt LightGBM model ({exc}); restore the model directory or retrain") from None
    try:
        booster = lgb.Booster(model_str=text)
    except Exception as exc:  # noqa: BLE001 - LightGBMError, or the wrapper's own errors reading what LightGBM read
        raise SelectorError(f"{path}: corrupt LightGBM model ({type(exc).__name__}: {exc})") from None
    _sound_texts.add(digest)
    return booster


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
