"""``algosel doctor``: what this machine has, which model matches it, and what the hook will do here.

Everything is read, nothing is measured, and nothing here needs a GPU: on a CPU machine the report says so. The
verdict on the hook comes from the same calls the hook makes (:func:`algosel.learn.models.load_default`, the cuDNN
space's ``available()``), so it says what will happen, not what should.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from algosel.learn.artifact import SelectorError, read_manifest
from algosel.learn.models import MODEL_SPACES, SHIPPED_MODELS, default_model_dir, model_dirs
from algosel.learn.selector import JointModelWarning, check_environment, new_gpu_fix
from algosel.records.environment import (
    coverage,
    gpu_slug,
    mismatches,
    model_environments,
    nearness,
    visible_gpu,
    visible_hardware,
)
from algosel.runtime.unseen import ENV_VAR
from algosel.version import __version__

#: What the report calls the compiled runtime path (:mod:`algosel.runtime.native`, sources in ``runtime/_ext``).
EXTENSION = "compiled extension"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> str:
    try:
        import pynvml  # noqa: PLC0415 - nvidia-ml-py, optional

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except ImportError:
        return "unknown (nvidia-ml-py is not installed)"
    except Exception as exc:  # noqa: BLE001 - NVML missing or failing: say so instead of failing
        return f"unknown (NVML: {type(exc).__name__}: {exc})"


def extension_status(status: Callable[[], str] | None = None) -> str:
    """The compiled path's own one-line status (built, not built and why, disabled): ``status()``, by default
    :func:`algosel.runtime.native.status`; where it raises, ``unknown (`` the error ``)``."""
    if status is None:
        from algosel.runtime.native import status  # noqa: PLC0415

    try:
        return status()
    except Exception as exc:  # noqa: BLE001 - a broken build is reported, not raised
        return f"unknown ({type(exc).__name__}: {exc})"


def _gpus() -> list[dict[str, Any]]:
    import torch  # noqa: PLC0415

    try:
        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append(
                {
                    "index": i,
                    "name": props.name,
                    "compute_capability": f"{props.major}.{props.minor}",
                    "memory_bytes": int(props.total_memory),
                    "sm_count": int(props.multi_processor_count),
                }
            )
        return out
    except Exception:  # noqa: BLE001 - a broken CUDA setup is "no usable GPU", as the hook sees it
        return []


def _cudnn_version() -> int | None:
    import torch  # noqa: PLC0415

    try:
        return int(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - no usable cuDNN
        return None


def _model_row(directory: Path, here: dict[str, Any] | None) -> dict[str, Any]:
    from algosel.learn.models import model_space  # noqa: PLC0415

    try:
        manifest = read_manifest(directory)
        env = manifest["environment"]
    except SelectorError as exc:
        return {"name": directory.name, "path": str(directory), "error": str(exc)}
    envs = model_environments(manifest)
    row = {
        "name": directory.name,
        "path": str(directory),
        "space": model_space(directory),
        "gpu_name": " + ".join(str(e.get("gpu_name")) for e in envs),
        "cudnn": env.get("cudnn"),
    }
    if here is None:
        row["match"] = "no GPU here: usable offline (algosel.predict ranks from its records)"
    else:
        kind, near = coverage(envs, here)
        row["nearness"] = list(nearness(envs, {**visible_hardware(), **here}))
        if kind == "exact":
            row["match"] = "matches this GPU and cuDNN"
        elif kind == "family":
            row["match"] = (
                f"a joint model of this GPU's family (compute capability {near.get('compute_capability')}): used, "
                "with a warning; its picks here are unmeasured"
            )
        else:
            row["match"] = "another environment: " + ", ".join(mismatches(env, here))
    return row


def _model_roots(extra: Sequence[str | Path]) -> list[Path]:
    roots = [SHIPPED_MODELS]
    for root in extra:
        path = Path(root)
        if path.is_dir() and all(path.resolve() != r.resolve() for r in roots):
            roots.append(path)
    return roots


def _default_model(space: str, roots: Sequence[Path]) -> dict[str, Any]:
    """What ``load_default`` picks (from the shipped models, as the hook does) and whether it loads."""
    try:
        directory = default_model_dir(space=space)
        with warnings.catch_warnings():  # the joint model's warning is the report's "coverage" field here
            warnings.simplefilter("ignore", JointModelWarning)
            check_environment(model_environments(read_manifest(directory)), directory, force=False)
    except SelectorError as exc:
        return {"space": space, "model": None, "error": str(exc)}
    matching = []
    here = visible_gpu()
    if here is not None:
        for root in roots[1:]:
            for d in model_dirs(root, space):
                try:
                    manifest = read_manifest(d)
                except SelectorError:  # listed among the models as unreadable, with why
                    continue
                if coverage(model_environments(manifest), here)[0] == "exact":
                    matching.append(str(d))
    kind = coverage(model_environments(read_manifest(directory)), here)[0] if here is not None else None
    return {"space": space, "model": str(directory), "error": None, "local_matches": matching, "coverage": kind}


def hook_verdict(facts: dict[str, Any]) -> list[str]:
    """What ``algosel.hook.enabled()`` will do on this machine, from :func:`collect`'s facts."""
    default = facts["default_models"]["cudnn"]
    if not facts["gpus"]:
        lines = [
            "no CUDA GPU: no cuDNN engine config can run here; every convolution passes through to PyTorch's own, "
            "except problems whose records show GEMM lowering ahead of PyTorch's default (a matmul on the CPU too)"
        ]
        if default["model"]:
            lines.append(f"the hook would load {Path(default['model']).name} (no GPU to check it against)")
        else:
            lines.append(f"enabling the hook raises: {default['error']}")
        return lines
    if default["error"]:
        local = default.get("local_matches") or []
        if local:
            hint = [f"pass a model made here: enabled(selector=Selector.load({local[0]!r}))"]
        else:
            hint = [
                "no model covers this GPU: the hook runs PyTorch's own convolutions (warned once)",
                *_nearest_model_lines(facts),
                f"make one: {new_gpu_fix(facts['here'])} (docs/selector.md, \"A GPU of your own\"); or pass a model "
                "with Selector.load(path, force=True)",
            ]
        return [f"loading the default model here raises: {default['error']}", *hint]
    name = Path(default["model"]).name
    lines = []
    if default.get("coverage") == "family":
        lines.append(
            f"{name} is a joint model of this GPU's family, not trained on this GPU: used with a warning, its picks "
            f"unmeasured here; make a model of its own: {new_gpu_fix(facts['here'])}"
        )
    lines += [
        f"the hook runs {name}'s choice where its gain over PyTorch's default is known: problems its records "
        "measured, a measurement on first use with enabled(verify=k), or its predicted times where it has them; "
        "every other convolution passes through to PyTorch's own"
    ]
    if facts["cudnn_space"] is None:
        lines.append("cuDNN engine configs: built on first use of each problem (the frontend is here)")
    else:
        lines.append(
            f"cuDNN engine configs cannot be built ({facts['cudnn_space']}): where one is chosen, the call passes "
            "through to PyTorch"
        )
    built = str(facts["extension"]).startswith("built")
    lines.append("host path: " + ("compiled" if built else f"Python ({facts['extension']})"))
    return lines


def _nearest_model_lines(facts: dict[str, Any]) -> list[str]:
    """The model nearest this GPU (:func:`~algosel.records.environment.nearness`), as the report says it."""
    rows = [m for m in facts["models"] if m.get("nearness") and m.get("space") == "cudnn"]
    if not rows:
        return []
    near = min(rows, key=lambda m: tuple(m["nearness"]))
    return [f"nearest model: {near['name']} ({near['gpu_name']}, cuDNN {near['cudnn']}): {near['match']}"]


def collect(models: Sequence[str | Path] = ("models",)) -> dict[str, Any]:
    """The facts ``algosel doctor`` prints, as a dict (``algosel doctor --json``).

    Parameters
    ----------
    models : sequence of path
        Directories of local models, listed after the shipped ones (missing ones are skipped).
    """
    import torch  # noqa: PLC0415

    from algosel.spaces import get_space  # noqa: PLC0415

    gpus = _gpus()
    here = visible_gpu()
    try:
        cudnn_space = get_space("cudnn").available()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        cudnn_space = f"{type(exc).__name__}: {exc}"
    roots = _model_roots(models)
    model_rows = [_model_row(d, here) for root in roots for space in MODEL_SPACES for d in model_dirs(root, space)]
    return {
        "algosel": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpus": gpus,
        "driver": _driver() if gpus else None,
        "cudnn": _cudnn_version(),
        "cudnn_frontend": _version("nvidia-cudnn-frontend"),
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "lightgbm": _version("lightgbm"),
        "extension": extension_status(),
        "cudnn_space": cudnn_space,
        "record_unseen": os.environ.get(ENV_VAR) or None,
        "gpu_slug": gpu_slug(here) if here else None,
        "here": here,
        "model_roots": [str(r) for r in roots],
        "models": model_rows,
        "default_models": {space: _default_model(space, roots) for space in MODEL_SPACES},
    }


def format_report(facts: dict[str, Any]) -> str:
    """The text of ``algosel doctor``."""
    gpus = facts["gpus"]
    gpu_text = (
        "; ".join(
            f"{g['index']}: {g['name']} (cc {g['compute_capability']}, {g['sm_count']} SMs, "
            f"{g['memory_bytes'] / 2**30:.0f} GiB)"
            for g in gpus
        )
        if gpus
        else "none visible"
    )
    rows = [
        ("algosel", f"{facts['algosel']} (Python {facts['python']}, {facts['platform']})"),
        ("torch", f"{facts['torch']}" + (f" (CUDA {facts['torch_cuda']})" if facts["torch_cuda"] else " (CPU build)")),
        ("GPU", gpu_text),
        ("driver", facts["driver"] or "none (no GPU)"),
        ("CUDA", facts["torch_cuda"] or "none (CPU build of torch)"),
        ("cuDNN", str(facts["cudnn"]) if facts["cudnn"] else "not available"),
        ("nvidia-cudnn-frontend", facts["cudnn_frontend"] or "not installed"),
        ("nvidia-ml-py", facts["nvidia_ml_py"] or "not installed"),
        ("lightgbm", facts["lightgbm"] or "not installed"),
        (EXTENSION, facts["extension"]),
        (ENV_VAR, facts["record_unseen"] or "unset"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", "models (" + ", ".join(facts["model_roots"]) + "):"]
    name_width = max((len(m["name"]) for m in facts["models"]), default=0)
    for m in facts["models"]:
        if "error" in m:
            lines.append(f"  {m['name']:<{name_width}}  unreadable: {m['error']}")
        else:
            model = f"{m['gpu_name']}, cuDNN {m['cudnn']}"
            lines.append(f"  {m['name']:<{name_width}}  {m['space']:<6}  {model}: {m['match']}")
    if not facts["models"]:
        lines.append("  none")
    lines.append("")
    for space, d in facts["default_models"].items():
        shown = Path(d["model"]).name if d["model"] else f"none ({d['error']})"
        lines.append(f"default {space} model: {shown}")
    lines += ["", "when the hook is enabled:"]
    lines += [f"  {line}" for line in hook_verdict(facts)]
    return "\n".join(lines)


def main_text(models: Sequence[str | Path] = ("models",), as_json: bool = False) -> str:
    """``algosel doctor``'s output: :func:`format_report` or, with ``as_json``, the facts as JSON."""
    facts = collect(models)
    return json.dumps(facts, indent=2, default=str) if as_json else format_report(facts)
