"""Finding trained selectors: the shipped ones (inside the installed package) and a user's own.

The shipped models live in the package (:func:`algosel.resources.shipped_path`), so a plain ``pip install`` finds
them; ``models/`` of a source checkout links there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from algosel.learn.artifact import MANIFEST_FILE, SPACES_DEFAULT, SelectorError, read_manifest, space_of
from algosel.learn.selector import Selector
from algosel.records.environment import coverage, gpu_slug, mismatches, model_environments, visible_gpu
from algosel.resources import shipped_path
from algosel.spaces import get_space

#: Where the shipped models are.
SHIPPED_MODELS: Path = shipped_path("models")
#: What a model can select (:func:`~algosel.learn.artifact.space_of`).
MODEL_SPACES: tuple[str, ...] = ("cudnn", "legacy")
_live: dict[int, bool] = {}


def model_space(directory: Path) -> str:
    """:func:`~algosel.learn.artifact.space_of` a model directory (read from its manifest); ``"cudnn"`` for a
    manifest that cannot say (unreadable, not an object, ``spaces`` not a list of names): loading it says why."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON
        return "cudnn"
    spaces = manifest.get("spaces", SPACES_DEFAULT) if isinstance(manifest, dict) else None
    if not isinstance(spaces, (list, tuple)) or not all(isinstance(s, str) for s in spaces):
        return "cudnn"
    return space_of(spaces)


def model_dirs(models_root: str | Path | None = None, space: str = "cudnn") -> list[Path]:
    """The model directories of ``space`` under ``models_root`` (default: the shipped models), sorted by name."""
    if space not in MODEL_SPACES:
        raise ValueError(f"space must be {' or '.join(map(repr, MODEL_SPACES))}, got {space!r}")
    root = Path(models_root) if models_root else SHIPPED_MODELS
    # Hidden names are directories being written (algosel.files.atomic_directory), or left by a killed write.
    return sorted(
        d
        for d in root.glob("*")
        if not d.name.startswith(".") and (d / MANIFEST_FILE).is_file() and model_space(d) == space
    )


def default_model_dir(models_root: str | Path | None = None, space: str = "cudnn") -> Path:
    """The model of ``space`` (``"cudnn"``: engine configs, GEMM lowering and PyTorch's default; ``"legacy"``: the
    legacy algorithms) made for this GPU where one is visible and a model for it exists: its own (named by
    :func:`gpu_slug`), else a joint model trained on it, else a joint model of GPUs of its family; else the first."""
    dirs = model_dirs(models_root, space)
    if not dirs:
        root = Path(models_root) if models_root else SHIPPED_MODELS
        raise SelectorError(f"no trained {space} model under {root}; run `algosel train`")
    here = visible_gpu()
    if here is not None:
        slug = gpu_slug(here) + ("-legacy" if space == "legacy" else "")
        for d in dirs:
            if d.name == slug:
                return d
        # Else a model trained on this GPU among others (a joint model), else one whose GPUs are of its family.
        covering = {kind: [] for kind in ("exact", "family")}
        for d in dirs:
            try:
                kind, _ = coverage(model_environments(read_manifest(d)), here)
            except SelectorError:  # unreadable: loading it says why, if it is the one chosen
                continue
            if kind in covering:
                covering[kind].append(d)
        for kind in ("exact", "family"):
            if covering[kind]:
                return covering[kind][0]
    return dirs[0]


def model_by_fingerprint(fingerprint: str, roots: list[str | Path | None]) -> Path | None:
    """The model directory under ``roots`` (``None``: the shipped models) whose records' fingerprint is
    ``fingerprint`` (a runtime cache's folder names the model that filled it so); ``None`` where none is."""
    for root in roots:
        if root is not None and not Path(root).is_dir():
            continue
        for d in model_dirs(root):
            try:
                if read_manifest(d).get("data_fingerprint") == fingerprint:
                    return d
            except SelectorError:  # unreadable: not the one
                continue
    return None


def load_default(models_root: str | Path | None = None, force: bool = False, space: str = "cudnn") -> Selector:
    """Load :func:`default_model_dir`."""
    return Selector.load(default_model_dir(models_root, space), force=force)


def check_records_environment(
    manifest: Mapping[str, Any], model_dir: str | Path, records_env: Mapping[str, Any], force: bool = False
) -> list[str]:
    """How the records' environment differs from the one the model of ``manifest`` (a selector's, or one read
    before loading it: the check costs no load) was trained for (:func:`mismatches`): a model judged or priced on
    records of another GPU or cuDNN means nothing, so a difference is refused unless ``force`` (then returned, for
    the caller to note). The refusal is ``algosel evaluate``'s, word for word.

    Raises
    ------
    SelectorError
        ``<model_dir> was trained for <GPU> (cuDNN <v>) but the records are of ...; pass --force ...``.
    """
    if coverage(model_environments(manifest), records_env)[0] == "exact":
        return []  # records of a GPU the model (joint or not) was trained on
    environment = manifest["environment"]
    other = mismatches(environment, records_env)
    if other and not force:
        raise SelectorError(
            f"{model_dir} was trained for {environment.get('gpu_name')} (cuDNN {environment.get('cudnn')}) "
            f"but the records are of {', '.join(other)}; pass --force to score it on them anyway"
        )
    return other


def check_space(manifest: Mapping[str, Any], model_dir: str | Path, want: str, what: str) -> None:
    """Refuse the model of ``manifest`` (a selector's, or one read before loading it: the check costs no load) of
    another space
    than ``want`` (``"cudnn"``: engine configs, GEMM lowering, PyTorch's default; ``"legacy"``: the legacy API's
    algorithms) for ``what`` (the records it is scored on, an option's calls): its picks would be priced among
    candidates it never ranks, and the numbers would mean nothing.

    Raises
    ------
    SelectorError
        ``<model_dir> selects <space> candidates (<its spaces>); <what> are <want> ones``.
    """
    spaces = tuple(manifest.get("spaces", SPACES_DEFAULT))  # as Selector.spaces reads it
    space = space_of(spaces)
    if space != want:
        raise SelectorError(
            f"{model_dir} selects {space} candidates ({', '.join(spaces)}); {what} are {want} ones: give "
            f"a {want} model"
        )


def records_space(frame: Any) -> str:
    """The space of records (:func:`~algosel.learn.artifact.space_of` their ``space`` column)."""
    return space_of(sorted(frame["space"].unique()))


def live_available(sel: Selector) -> bool:
    """Whether ``sel`` can rank live candidate lists here: a GPU, the space's library, and the model's own GPU and
    cuDNN (memoised per selector)."""
    hit = _live.get(id(sel))
    if hit is None:
        here = visible_gpu()
        try:
            hit = (
                here is not None
                and get_space(sel.space).available() is None
                and coverage(model_environments(sel.manifest), here)[0] != "none"
            )
        except Exception:  # noqa: BLE001 - anything missing means offline
            hit = False
        _live[id(sel)] = hit
    return hit
