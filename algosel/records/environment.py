"""The environment a measurement was made in: GPU, clocks, driver and library versions.

Every record refers to one environment by its ``env_id`` (a hash of the fields), so that records of several
GPUs or cuDNN versions can live in one dataset and the ranker can learn from hardware features.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
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


def visible_gpu() -> dict[str, Any] | None:
    """``{"gpu_name": ..., "cudnn": ...}`` of this process's CUDA device; ``None`` without a usable one."""
    try:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            return None
        return {"gpu_name": torch.cuda.get_device_name(), "cudnn": int(torch.backends.cudnn.version() or 0)}
    except Exception:  # noqa: BLE001 - no usable CUDA (driver missing, CPU build): no GPU to compare with
        return None


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
