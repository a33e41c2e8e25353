"""``algosel train --from-cache``: the measured decisions of runtime cache folders as training records, each read
with the model that filled it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.learn.models import model_by_fingerprint
from algosel.learn.selector import Selector
from algosel.runtime.cache import cache_folders, folder_environment
from algosel.runtime.measured import records_from_cache


def _cache_folders(given: Sequence[str]) -> list[tuple[str | Path, dict[str, Any]]]:
    """Each of ``given`` that is a runtime cache folder, and the cache folders inside each that is a cache root."""
    folders: list[tuple[str | Path, dict[str, Any]]] = []
    for path in given:
        env, why = folder_environment(path)
        if env is not None:
            folders.append((path, env))
            continue
        inner = [(f, folder_environment(f)[0]) for f in cache_folders(path)]
        inner = [(f, e) for f, e in inner if e is not None]
        if not inner:
            raise ValueError(f"--from-cache {path}: not a runtime cache folder, nor a cache root holding one ({why})")
        folders += inner
    return folders


def cache_training_records(given: Sequence[str], models_root: str | Path) -> list[pd.DataFrame]:
    """The records of every runtime cache folder of ``given`` (a cache root: its folders), each read with the model
    that filled it (found by its records' fingerprint under ``models_root`` or among the shipped ones).

    Raises
    ------
    ValueError
        A path that holds no cache folder, a folder whose model is nowhere to be found, or no measured decision at
        all (verify mode's timings are what a cache teaches).
    """
    frames = []
    for folder, env in _cache_folders(given):
        model = model_by_fingerprint(str(env.get("model")), [models_root, None])
        if model is None:
            raise ValueError(
                f"--from-cache {folder}: filled with the model of data fingerprint {env.get('model')}, which is "
                f"neither under --models {models_root} nor shipped (its candidate lists give the timed candidates' "
                "heuristic ranks): put that model under --models"
            )
        frames.append(records_from_cache(folder, Selector.load(model, force=True)))
    if not any(len(f) for f in frames):
        raise ValueError(f"--from-cache {' '.join(given)}: no measured decision (verify mode's) to learn from")
    return frames
