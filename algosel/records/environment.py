"""The environment a measurement was made in: GPU, clocks, driver and library versions.

Every record refers to one environment by its ``env_id`` (a hash of the fields), so that records of several
GPUs or cuDNN versions can live in one dataset and the ranker can learn from hardware features.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import platform
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

#: Hardware fields the ranker uses as features (numbers, the same on every machine of one kind).
HARDWARE_FIELDS: tuple[str, ...] = (
    "sm_count",
    "compute_capability",
    "l2_bytes",
    "memory_bandwidth_gbps",
    "sm_clock_mhz",
    "memory_bytes",
)


def env_id(env: dict[str, Any]) -> str:
    """A short stable identity of an environment record."""
    payload = json.dumps({k: v for k, v in sorted(env.items()) if k != "env_id"}, sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=6).hexdigest()


def _nvml_info(index: int) -> dict[str, Any]:
    try:
        import pynvml  # noqa: PLC0415 - nvidia-ml-py, optional

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        info = {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "memory_bus_bits": pynvml.nvmlDeviceGetMemoryBusWidth(h),
        }
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}
    except Exception:  # noqa: BLE001 - NVML is optional; the torch fields still describe the GPU
        return {}


def collect_environment(device_index: int | None = None) -> dict[str, Any]:
    """Describe the current CUDA device and software stack (needs a GPU)."""
    import torch  # noqa: PLC0415

    index = torch.cuda.current_device() if device_index is None else device_index
    props = torch.cuda.get_device_properties(index)
    nvml = _nvml_info(index)
    mem_clock = nvml.get("memory_clock_mhz") or (getattr(props, "memory_clock_rate", 0) or 0) / 1000
    bus_bits = nvml.get("memory_bus_bits") or getattr(props, "memory_bus_width", 0) or 0
    try:
        import cudnn  # noqa: PLC0415

        frontend = getattr(cudnn, "__version__", "unknown")
    except ImportError:
        frontend = "not installed"
    env = {
        "gpu_name": props.name,
        "sm_count": int(props.multi_processor_count),
        "compute_capability": float(f"{props.major}.{props.minor}"),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
        "memory_bytes": int(props.total_memory),
        # Double data rate: two transfers per clock over the bus.
        "memory_bandwidth_gbps": round(2 * float(mem_clock) * 1e6 * int(bus_bits) / 8 / 1e9, 1),
        "sm_clock_mhz": int(nvml.get("sm_clock_mhz") or (getattr(props, "clock_rate", 0) or 0) / 1000),
        "driver": str(nvml.get("driver", "unknown")),
        "cuda": str(torch.version.cuda),
        "cudnn": int(torch.backends.cudnn.version() or 0),
        "torch": torch.__version__,
        "cudnn_frontend": str(frontend),
        "python": platform.python_version(),
    }
    env["env_id"] = env_id(env)
    return env


def gpu_slug(env: dict[str, Any]) -> str:
    """A directory-friendly name such as ``h200-cudnn91900`` for models and datasets."""
    name = str(env.get("gpu_name", "gpu")).lower().replace("nvidia", "").strip()
    name = "-".join(part for part in name.replace("_", " ").split() if part) or "gpu"
    return f"{name}-cudnn{env.get('cudnn', 0)}"


#: What :func:`described_as` says this process's GPU is ("gpu") and has ("hardware"), while it does.
_described: dict[str, dict[str, Any]] = {}


def visible_gpu() -> dict[str, Any] | None:
    """``{"gpu_name": ..., "cudnn": ..., "compute_capability": ...}`` of this process's CUDA device; ``None``
    without a usable one. Inside :func:`described_as` given a ``gpu``, that one."""
    if "gpu" in _described:
        return dict(_described["gpu"])
    try:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            return None
        here = {"gpu_name": torch.cuda.get_device_name(), "cudnn": int(torch.backends.cudnn.version() or 0)}
    except Exception:  # noqa: BLE001 - no usable CUDA (driver missing, CPU build): no GPU to compare with
        return None
    try:
        major, minor = torch.cuda.get_device_capability()
    except Exception:  # noqa: BLE001 - a device that cannot say: no family to match a joint model by
        return here
    here["compute_capability"] = float(f"{major}.{minor}")
    return here


_hardware_here: dict[str, Any] | None = None


def visible_hardware() -> dict[str, Any]:
    """The :data:`HARDWARE_FIELDS` of this process's CUDA device (:func:`collect_environment`, read once); empty
    without a usable GPU. A joint model ranks for these on a GPU it was not trained on. Inside
    :func:`described_as` given a ``hardware``, that one."""
    if "hardware" in _described:
        return dict(_described["hardware"])
    global _hardware_here  # noqa: PLW0603 - one device description per process
    if _hardware_here is None:
        try:
            env = collect_environment()
        except Exception:  # noqa: BLE001 - no usable CUDA: no hardware to describe
            return {}
        _hardware_here = {f: env[f] for f in HARDWARE_FIELDS if env.get(f)}
    return dict(_hardware_here)


@contextlib.contextmanager
def described_as(gpu: Mapping[str, Any] | None = None, hardware: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Within the block, this process's GPU is ``gpu`` (what :func:`visible_gpu` returns: ``gpu_name``, ``cudnn``,
    ``compute_capability``) and its hardware ``hardware`` (what :func:`visible_hardware` returns), each where given;
    after it, what they were. The whole process sees it, every thread; blocks nest.

    For running as another GPU without patching this module: which model loads, which GPU it ranks for, what it
    refuses (tests/conftest.py's GPU tests on a GPU without a model of its own, :func:`algosel.testing.fake_gpu`)."""
    saved = dict(_described)
    if gpu is not None:
        _described["gpu"] = dict(gpu)
    if hardware is not None:
        _described["hardware"] = dict(hardware)
    try:
        yield
    finally:
        _described.clear()
        _described.update(saved)


def mismatches(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """How ``actual`` differs from ``expected`` in what makes measurements and models specific: the GPU and cuDNN.

    The one environment compatibility check of algosel: models against the visible GPU, models against records.
    """
    out = []
    if actual.get("gpu_name") != expected.get("gpu_name"):
        out.append(f"GPU {actual.get('gpu_name')!r} (expected {expected.get('gpu_name')!r})")
    if int(actual.get("cudnn") or 0) != int(expected.get("cudnn") or 0):
        out.append(f"cuDNN {actual.get('cudnn')} (expected {expected.get('cudnn')})")
    return out


def model_environments(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The environments a model was trained on: a joint model's ``environments`` (its main one first), else its
    one ``environment``."""
    envs = manifest.get("environments")
    if isinstance(envs, list) and envs and all(isinstance(e, Mapping) for e in envs):
        return [dict(e) for e in envs]
    return [dict(manifest["environment"])]


def same_family(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two environments are GPUs of one family for a joint model: the same compute capability (one chip
    generation: the H100 and H200 are 9.0) and the same cuDNN (whose engine configs the model ranks)."""
    cc_a, cc_b = a.get("compute_capability"), b.get("compute_capability")
    return (
        cc_a is not None
        and cc_b is not None
        and round(float(cc_a), 1) == round(float(cc_b), 1)
        and int(a.get("cudnn") or 0) == int(b.get("cudnn") or 0)
    )


def coverage(model_envs: Sequence[Mapping[str, Any]], here: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """How a model trained on ``model_envs`` covers the GPU ``here``: ``("exact", env)`` where it was trained on
    this GPU and cuDNN; ``("family", env)`` where it is a joint model (two GPUs or more) with a GPU of this one's
    family (:func:`same_family`; ``env`` that GPU's); ``("none", None)`` otherwise. A one-GPU model covers its
    GPU only: nothing in it says what changes from one GPU to another."""
    for env in model_envs:
        if not mismatches(env, here):
            return "exact", dict(env)
    if len({e.get("gpu_name") for e in model_envs}) >= 2:
        for env in model_envs:
            if same_family(env, here):
                return "family", dict(env)
    return "none", None


def nearness(model_envs: Sequence[Mapping[str, Any]], here: Mapping[str, Any]) -> tuple[float, float, float]:
    """A sort key of how near a model's GPUs are to ``here`` (smaller is nearer): its coverage (trained on this
    GPU, a joint model of its family, neither), then the nearest compute capability, then the nearest memory
    bandwidth (log ratio; what most separates GPUs of one generation). Unknown fields count as far."""
    kind, _ = coverage(model_envs, here)
    rank = {"exact": 0.0, "family": 1.0}.get(kind, 2.0)
    cc_here, bw_here = here.get("compute_capability"), here.get("memory_bandwidth_gbps")
    best = (math.inf, math.inf)
    for env in model_envs:
        cc, bw = env.get("compute_capability"), env.get("memory_bandwidth_gbps")
        d_cc = abs(float(cc) - float(cc_here)) if cc is not None and cc_here is not None else math.inf
        d_bw = abs(math.log(float(bw) / float(bw_here))) if bw and bw_here else math.inf
        best = min(best, (d_cc, d_bw))
    return (rank, *best)
