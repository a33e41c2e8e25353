"""The compiled runtime path (``algosel/runtime/_ext``): built once per environment, loaded if built.

The extension runs the selector's cuDNN plans and the hooked convolution's autograd Function in C++ (a hooked call
then costs about what PyTorch's own call costs on the host). It needs a C++ compiler, CUDA's headers (nvcc's
toolkit), cuDNN's headers and library (the ``nvidia-cudnn`` wheel torch depends on) and the cuDNN frontend (the
``nvidia-cudnn-frontend`` wheel), whose bundled JSON reader decodes the plans it serializes. Building takes about a
minute: it is never done implicitly inside a training step. ``algosel build-ext`` (or :func:`build`) builds it into
the cache folder; afterwards :func:`load` imports it in every process of this environment. Without it the runtime
uses its Python path (same choices, more host time).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_SOURCES = ("plan.cpp", "conv_ext.cpp")
#: Compiler flags (part of the build's identity).
_CFLAGS = ("-O2", "-std=c++17")
_HEADERS = ("plan.h",)
_NAME = "algosel_conv_ext"
_loaded: dict[str, ModuleType | None] = {}


class NativeBuildError(RuntimeError):
    """The extension could not be built here (the message says what is missing)."""


def cache_root() -> Path:
    """algosel's cache folder: ``$ALGOSEL_CACHE_DIR``, else ``~/.cache/algosel``."""
    return Path(os.environ.get("ALGOSEL_CACHE_DIR") or Path.home() / ".cache" / "algosel")


def _source_dir() -> Path:
    return Path(__file__).resolve().parent / "_ext"


def _frontend_include() -> Path | None:
    try:
        import cudnn  # noqa: PLC0415 - nvidia-cudnn-frontend, optional
    except ImportError:
        return None
    # The wheel installs its header-only C++ API as include/ beside the cudnn package.
    path = Path(cudnn.__file__).resolve().parent.parent / "include"
    return path if (path / "cudnn_frontend.h").is_file() else None


def _cudnn_include() -> Path | None:
    for base in map(Path, sys.path):
        path = base / "nvidia" / "cudnn" / "include"
        if (path / "cudnn.h").is_file():
            return path
    return None


def environment_tag() -> str:
    """What the build depends on: the sources, torch's version and CUDA, the frontend's headers."""
    import torch  # noqa: PLC0415

    h = hashlib.blake2b(digest_size=8)
    for name in (*_SOURCES, *_HEADERS):
        h.update((_source_dir() / name).read_bytes())
    try:
        import cudnn  # noqa: PLC0415

        frontend = getattr(cudnn, "__version__", "?")
    except ImportError:
        frontend = "none"
    h.update(f"{torch.__version__}|{torch.version.cuda}|{frontend}|{sys.version_info[:2]}|{_CFLAGS}".encode())
    return h.hexdigest()


def build_dir() -> Path:
    return cache_root() / "ext" / environment_tag()


def _library(directory: Path) -> Path | None:
    found = sorted(directory.glob(f"{_NAME}*.so"))
    return found[0] if found else None


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The built extension of this environment, or ``None`` (not built, no GPU, or ``ALGOSEL_NATIVE=0``).

    Never builds. Memoised per process.
    """
    if "module" in _loaded:
        return _loaded["module"]
    module = None
    if os.environ.get("ALGOSEL_NATIVE", "1") != "0":
        try:
            import torch  # noqa: PLC0415

            if torch.cuda.is_available() and torch.version.cuda and _frontend_include() is not None:
                path = _library(build_dir())
                if path is not None:
                    module = _import(path)
        except Exception as exc:  # noqa: BLE001 - a broken build must not break the hook: the Python path runs
            log.warning("algosel: the compiled runtime path does not load (%s); using the Python path", exc)
            module = None
    _loaded["module"] = module
    return module


def status() -> str:
    """One line: whether the extension is built and loads here, and why not."""
    if os.environ.get("ALGOSEL_NATIVE", "1") == "0":
        return "disabled (ALGOSEL_NATIVE=0)"
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return "no torch"
    if not torch.version.cuda:
        return "not applicable (CPU build of torch)"
    if _frontend_include() is None:
        return "not built: needs nvidia-cudnn-frontend (pip install 'algosel[gpu]')"
    path = _library(build_dir())
    if path is None:
        return f"not built (run `algosel build-ext`; it builds into {build_dir()})"
    return f"built: {path}" + ("" if load() is not None else " (but it does not load: see the log)")


def build(verbose: bool = False) -> Path:
    """Compile the extension into :func:`build_dir` (about a minute); returns the library's path.

    Raises :class:`NativeBuildError` naming what is missing (a GPU build of torch, the frontend, cuDNN's or
    CUDA's headers, a compiler).
    """
    import torch  # noqa: PLC0415
    from torch.utils import cpp_extension  # noqa: PLC0415

    if not torch.version.cuda:
        raise NativeBuildError(f"torch {torch.__version__} is a CPU build: the compiled path needs CUDA")
    frontend, cudnn_inc = _frontend_include(), _cudnn_include()
    if frontend is None:
        raise NativeBuildError("the cuDNN frontend's headers are missing: pip install 'algosel[gpu]'")
    if cudnn_inc is None:
        raise NativeBuildError("cuDNN's headers are missing (site-packages/nvidia/cudnn/include)")
    cuda_home = cpp_extension.CUDA_HOME
    if cuda_home is None or not (Path(cuda_home) / "include" / "cuda_runtime.h").is_file():
        raise NativeBuildError("CUDA's headers are missing (set CUDA_HOME to a CUDA toolkit)")
    # The frontend's folder for the JSON reader it bundles (nlohmann/json), cuDNN's for cudnn.h.
    includes = [str(frontend), str(cudnn_inc), str(Path(cuda_home) / "include")]
    cudnn_lib = cudnn_inc.parent / "lib"
    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cpp_extension.load(
        name=_NAME,
        sources=[str(_source_dir() / s) for s in _SOURCES],
        extra_include_paths=includes,
        extra_cflags=list(_CFLAGS),
        # The libcudnn.so.9 torch loads (same file, so the same library at run time).
        extra_ldflags=[f"-L{cudnn_lib}", "-l:libcudnn.so.9", f"-Wl,-rpath,{cudnn_lib}"],
        with_cuda=True,
        build_directory=str(out),
        verbose=verbose,
    )
    path = _library(out)
    if path is None:
        raise NativeBuildError(f"the build left no library in {out}")
    log.info("algosel: built %s in %.0f s", path, time.perf_counter() - t0)
    _loaded.clear()
    return path
