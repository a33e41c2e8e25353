"""Compiled trees: a model's forests (the ranker and the time model) as native code of this machine, cached.

A first prediction walks the ranker's trees for a dozen candidates and the time model's for two; through LightGBM
(even its single-row fast path, :mod:`algosel.learn.rowpredict`) every node costs a branch through generic tree
arrays. lleaves (LLVM, through llvmlite) compiles a LightGBM text model into one function per forest, which scores
the same rows with the same numbers several times faster (``benchmarks/predict_speed.py`` prints both paths), so
that a larger model fits the first prediction's budget.

Compiling takes seconds to minutes (the shipped 150 x 127 ranker: 20 s on one core with inlining off, 197 s with
it on) and its result is code for this CPU, so it is done once per machine, by ``algosel compile`` (or
:func:`compile_selector`), and kept in the cache (:attr:`CompileOptions.root`: ``$ALGOSEL_CACHE_DIR/compiled`` or
``~/.cache/algosel/compiled``), one entry per model text, compiler version, CPU and options: the object file, the
model text lleaves reads beside it, and a JSON file holding the object's SHA-256, which is checked before the object
is loaded. :meth:`~algosel.learn.selector.Selector.load` takes a cached entry where there is one
(:func:`attach_cached`) and never compiles; without lleaves (``pip install 'algosel[compiled]'``), or without a
cached entry, predictions go through LightGBM as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from algosel.files import write_bytes, write_text

#: The attribute of a ranker or time model that holds its :class:`CompiledForest` (read by
#: :func:`algosel.learn.rowpredict.row_predictor`).
COMPILED_ATTRIBUTE = "compiled_forest"


class CompileError(RuntimeError):
    """The tree compiler is missing or failed: one line naming the model file and what to do."""


@dataclass(frozen=True)
class CompileOptions:
    """How forests are compiled and where they are kept.

    Parameters
    ----------
    inline : bool
        lleaves' ``finline``: inlining the trees into the forest's function. Off by default: on the shipped ranker it
        made the compile 10x slower (197 s against 20 s, one core of the 2-core CPU machine, 2026-12-06) for no faster
        prediction of a dozen rows.
    root : Path, optional
        The cache folder; default ``$ALGOSEL_CACHE_DIR/compiled``, else ``~/.cache/algosel/compiled``.
    """

    inline: bool = False
    root: Path | None = None

    @property
    def folder(self) -> Path:
        """The cache folder these options name."""
        if self.root is not None:
            return Path(self.root)
        return Path(os.environ.get("ALGOSEL_CACHE_DIR") or Path.home() / ".cache" / "algosel") / "compiled"


def compiler() -> dict[str, str] | None:
    """lleaves' and llvmlite's versions and this CPU's name and features (what a compiled object depends on), or
    None where lleaves is not installed."""
    try:
        import lleaves  # noqa: F401
        import llvmlite
        import llvmlite.binding as llvm
    except ImportError:
        return None
    from importlib.metadata import version  # noqa: PLC0415

    features = llvm.get_host_cpu_features().flatten()
    return {"lleaves": version("lleaves"), "llvmlite": llvmlite.__version__, "cpu": llvm.get_host_cpu_name(),
            "cpu_features": hashlib.sha256(features.encode()).hexdigest()[:16]}  # fmt: skip


class CompiledForest:
    """A compiled forest that predicts as ``booster.predict(X, num_threads=1)`` does (the raw score of a ranker, the
    value of a regression), for any number of rows."""

    def __init__(self, booster: Any, model: Any, entry: Path) -> None:
        self.booster = booster  # the LightGBM booster it stands for (row_predictor checks it is still the owner's)
        self.model = model
        self.entry = entry

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions of the rows of ``X`` (2-D), on the calling thread."""
        return self.model.predict(np.ascontiguousarray(X, dtype=np.float64), n_jobs=1)


def _entry_name(model_sha256: str, versions: dict[str, str], options: CompileOptions) -> str:
    what = json.dumps({**versions, "inline": options.inline}, sort_keys=True)
    return f"{model_sha256[:16]}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"


def _load_entry(folder: Path, name: str, booster: Any) -> CompiledForest | None:
    """The forest of a cache entry whose object file matches the SHA-256 its JSON records; None where the entry is
    missing or does not match (a half-written or altered entry is never loaded)."""
    import lleaves  # noqa: PLC0415

    obj, text, meta = (folder / f"{name}{suffix}" for suffix in (".o", ".txt", ".json"))
    try:
        recorded = json.loads(meta.read_text())
        data = obj.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or hashlib.sha256(data).hexdigest() != recorded.get("object_sha256"):
        return None
    if not text.is_file() or hashlib.sha256(text.read_bytes()).hexdigest() != recorded.get("model_sha256"):
        return None
    model = lleaves.Model(model_file=str(text))
    model.compile(cache=str(obj), finline=bool(recorded.get("inline", False)), fblocksize=model.num_trees())
    return CompiledForest(booster, model, obj)


def compiled_forest(
    model_sha256: str,
    model_text: Callable[[], bytes],
    booster: Any,
    options: CompileOptions = CompileOptions(),
    build: bool = False,
) -> CompiledForest | None:
    """The compiled forest of a LightGBM model (``model_sha256``: its text's, as a model directory's manifest records
    it) from the cache, compiled and cached first where ``build``.

    Returns None where lleaves is not installed, or nothing is cached and ``build`` is False. ``model_text`` gives
    the text to compile (asked only then); the cache keeps a copy of it, which lleaves reads.

    Raises
    ------
    CompileError
        Where ``build`` and lleaves is missing, or compiling fails.
    """
    folder = options.folder
    # Nothing cached for this model: return before importing llvmlite (0.4 s), which a process need not pay.
    if not build and not any(folder.glob(f"{model_sha256[:16]}-*.json")):
        return None
    versions = compiler()
    if versions is None:
        if build:
            raise CompileError("the tree compiler lleaves is not installed: pip install 'algosel[compiled]'")
        return None
    name = _entry_name(model_sha256, versions, options)
    found = _load_entry(folder, name, booster)
    if found is not None or not build:
        return found
    import lleaves  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    text = model_text()
    write_bytes(folder / f"{name}.txt", text)
    # lleaves writes the object where it is told: a name of this process's own, renamed once complete.
    partial = folder / f".{name}.{uuid.uuid4().hex}.o"
    started = time.perf_counter()
    try:
        model = lleaves.Model(model_file=str(folder / f"{name}.txt"))
        model.compile(cache=str(partial), finline=options.inline, fblocksize=model.num_trees())
        data = partial.read_bytes()
        partial.replace(folder / f"{name}.o")
    except Exception as exc:  # noqa: BLE001 - LLVM raises several types; reported as one line
        partial.unlink(missing_ok=True)
        raise CompileError(f"compiling the trees failed: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    seconds = time.perf_counter() - started
    record = {**versions, "inline": options.inline, "model_sha256": hashlib.sha256(text).hexdigest(),
              "object_sha256": hashlib.sha256(data).hexdigest(), "compile_seconds": seconds}  # fmt: skip
    write_text(folder / f"{name}.json", json.dumps(record, indent=1) + "\n")
    return CompiledForest(booster, model, folder / f"{name}.o")


def _forests(selector: Any) -> list[tuple[str, Any, str, Callable[[], bytes]]]:
    """(name, owner, SHA-256 of its text, its text) of each forest of a selector: the ranker, and the time model where
    it has one. The SHA-256 is the manifest's record of the file where it has one (no text made to look it up)."""
    files = selector.manifest.get("files") or {}
    section = selector.manifest.get("time_model") or {}
    owners = [("ranker", selector.ranker, "model.txt", lambda: selector.ranker.booster_.model_to_string().encode())]
    if selector.time_model is not None:
        owners.append(("time model", selector.time_model, str(section.get("file", "time_model.txt")),
                       lambda: selector.time_model.model_text().encode()))  # fmt: skip
    out = []
    for name, owner, file, text in owners:
        sha = (files.get(file) or {}).get("sha256") or hashlib.sha256(text()).hexdigest()
        out.append((name, owner, str(sha), text))
    return out


def compile_selector(selector: Any, options: CompileOptions = CompileOptions()) -> dict[str, Path]:
    """Compile a selector's forests into the cache (where not cached yet) and use them from now on.

    Returns each forest's cache entry (its object file) by name (``ranker``, ``time model``).

    Raises
    ------
    CompileError
        Where lleaves is missing or compiling fails.
    """
    entries = {}
    for name, owner, sha, text in _forests(selector):
        forest = compiled_forest(sha, text, owner.booster_, options, build=True)
        owner.__dict__[COMPILED_ATTRIBUTE] = forest
        entries[name] = forest.entry
    return entries


def attach_cached(selector: Any, options: CompileOptions = CompileOptions()) -> list[str]:
    """Use the cached compiled forests of a selector where the cache has them (never compiles); returns the names of
    the forests that are now compiled."""
    attached = []
    for name, owner, sha, text in _forests(selector):
        forest = compiled_forest(sha, text, owner.booster_, options)
        if forest is not None:
            owner.__dict__[COMPILED_ATTRIBUTE] = forest
            attached.append(name)
    return attached


def detach(selector: Any) -> None:
    """Predict through LightGBM again (the compiled forests stay cached): what ``benchmarks/predict_speed.py`` compares
    the compiled path with."""
    for owner in (selector.ranker, selector.time_model):
        if owner is not None:
            owner.__dict__.pop(COMPILED_ATTRIBUTE, None)
