"""``algosel cache show`` and ``algosel cache clear``: the runtime's persistent decisions, folder by folder, as
lines of text."""

from __future__ import annotations

import warnings
from pathlib import Path

from algosel.runtime.cache import RuntimeCache, cache_folders, clear_folder, folder_environment


def show_lines(root: Path) -> list[str]:
    """A line per runtime cache folder under ``root``: its decisions by source, its plans, its environment; a
    folder that is not one of the runtime's is named with why."""
    folders = cache_folders(root)
    if not folders:
        return [f"no runtime decisions under {root / 'runtime'}"]
    lines = []
    for folder in folders:
        env, why = folder_environment(folder)
        if env is None:
            lines.append(f"{folder}: not a runtime cache folder ({why})")
            continue
        cache = RuntimeCache(root, env)
        with warnings.catch_warnings():  # damaged lines are said on the folder's line, naming the file
            warnings.simplefilter("ignore", RuntimeWarning)
            s = cache.summary()
        hook_decisions = s["decisions"] - s["predict_measured"]
        damaged = f"; {s['damaged_lines']} damaged line(s) of {cache.decisions_path} skipped" if s[
            "damaged_lines"] else ""  # fmt: skip
        lines.append(f"{s['folder']}: {hook_decisions} decisions of the hook {s['by_source']}, "
                     f"{s['predict_measured']} problems measured by predict(verify=k), {s['plans']} plans "
                     f"({s['plan_bytes']} bytes); {env.get('gpu_name')}, cuDNN {env.get('cudnn')}, "
                     f"torch {env.get('torch')}, model {env.get('model')}{damaged}")  # fmt: skip
    return lines


def clear_lines(root: Path) -> list[str]:
    """Remove the runtime cache folders under ``root``; returns a line per item left and a last line counting.

    Only what the cache can prove it wrote goes (:func:`~algosel.runtime.cache.clear_folder`): never a folder
    someone else put there."""
    removed, left = 0, []
    for folder in cache_folders(root):
        lines = clear_folder(folder)
        removed += not lines
        left += lines
    return [*left, f"removed {removed} runtime cache folder(s) under {root / 'runtime'}; {len(left)} item(s) left"]
