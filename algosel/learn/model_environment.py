"""Which environment a loaded model ranks for, and the refusal of one that does not cover this GPU and cuDNN.

:func:`check_environment` is what :meth:`algosel.learn.selector.Selector.load` and ``algosel doctor`` ask: a model
ranks for the visible GPU where it was trained on it, for a GPU of a joint model's family with a warning
(:class:`JointModelWarning`), and is refused elsewhere unless forced; :func:`new_gpu_fix` names the commands that
make a model for this GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from algosel.learn.artifact import SelectorError
from algosel.records.environment import coverage, gpu_slug, mismatches, visible_gpu, visible_hardware


class JointModelWarning(UserWarning):
    """A joint model ranks for a GPU it was not trained on, one of the same family (warned once per process)."""


_joint_warned: set[str] = set()


def new_gpu_fix(here: Mapping[str, Any]) -> str:
    """The commands that make a model for the GPU ``here`` (docs/selector.md, "A GPU of your own")."""
    slug = gpu_slug(here)
    return f"`algosel sweep --quick 20 --out data/sweeps/{slug}` then `algosel train data/sweeps/{slug}`"


def check_environment(
    model_env: Mapping[str, Any] | Sequence[Mapping[str, Any]], directory: Path | str, force: bool
) -> dict[str, Any]:
    """The environment whose hardware features the model ranks for here; refuse (or, with ``force``, warn about)
    a model that does not cover the visible GPU and cuDNN (:func:`~algosel.records.environment.coverage`).

    ``model_env``: the model's environment, or a joint model's environments (main first). Without a GPU the
    model answers for its main environment; on a GPU it trained on, for that GPU; on a GPU of a joint model's
    family, for this GPU's own hardware (warned once: its picks there are unmeasured)."""
    envs = [dict(model_env)] if isinstance(model_env, Mapping) else [dict(e) for e in model_env]
    here = visible_gpu()
    if here is None:
        return envs[0]  # offline use (no GPU here): the model is read for its own GPU
    kind, env = coverage(envs, here)
    if kind == "exact":
        return env
    if kind == "family":
        trained = ", ".join(str(e.get("gpu_name")) for e in envs)
        if str(directory) not in _joint_warned:
            _joint_warned.add(str(directory))
            warnings.warn(
                f"algosel: {here.get('gpu_name')} has no model of its own; {directory} is a joint model of {trained} "
                f"(compute capability {env.get('compute_capability')}, cuDNN {env.get('cudnn')}) and ranks for "
                f"this GPU's hardware, unmeasured here; make a model of its own with {new_gpu_fix(here)}",
                JointModelWarning,
                stacklevel=3,
            )
        return {**env, **visible_hardware(), "gpu_name": here.get("gpu_name")}
    found = mismatches(envs[0], here)
    text = f"{directory} was trained for another environment: this process has {', '.join(found)}"
    if not force:
        raise SelectorError(text + f"; make a model for this GPU with {new_gpu_fix(here)}, or pass force=True")
    warnings.warn(text, stacklevel=3)
    return envs[0]
