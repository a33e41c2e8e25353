"""The executor's model, loaded off the training step's path.

Loading the shipped model (LightGBM's ranker and time model, the catalogue of records) and the libraries it needs
takes about 2.3 s on the GPU machines: paid on the first step, it made a fresh process's first pass longer than a
quarter of benchmark mode's tuning on most networks. With ``background=True`` it is loaded on a thread of its own
while the first steps run; until it is ready, every new call signature passes through (``pytorch:loading the model``,
not memoised: its next call asks again), so the hook costs those steps nothing but its dispatch. A selector object
given to the executor is used as it is (nothing to load).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from algosel.runtime.fallbacks import NoModel, load_selector, model_calibration, warn_once


class ModelLoading:
    """A model being loaded (see the module docstring): :meth:`ready` says whether it is, :meth:`wait` waits for it.

    Parameters
    ----------
    selector : None, path or selector object
        As :func:`algosel.runtime.fallbacks.load_selector` takes it.
    calibration : bool
        Also load the model's calibration (:func:`algosel.runtime.fallbacks.model_calibration`).
    background : bool
        Load on a thread of its own (a selector object is never loaded so: it is ready).
    """

    def __init__(self, selector: Any, calibration: bool, background: bool):
        self._arg, self._want_calibration = selector, calibration
        self._done = threading.Event()
        self.selector: Any = None
        self.unavailable = ""
        self.calibration: Any = None
        #: Seconds the load took (for the benchmarks of a fresh process).
        self.seconds = 0.0
        if background and (selector is None or isinstance(selector, (str, os.PathLike))):
            # Not a daemon: a process that ends while the model loads waits for the load (a second or two) rather
            # than finalize under it (pyarrow's thread pool, still reading the catalogue, hung such exits)
            threading.Thread(target=self._load, name="algosel-model", daemon=False).start()
        else:
            self._load(raising=True)

    def _load(self, raising: bool = False) -> None:
        t0 = time.perf_counter()
        try:
            self.selector, self.unavailable = load_selector(self._arg)
            if self._want_calibration and not self.unavailable:
                self.calibration = model_calibration(self.selector)  # its directory and manifest, as loaded
        except Exception as exc:  # noqa: BLE001 - a loading thread's error must reach the user as one warning
            if raising:
                raise
            why = f"the model cannot be loaded ({exc}); the hook runs PyTorch's own convolutions"
            if threading.main_thread().is_alive():  # (a process that ended mid-load has nothing left to warn)
                warn_once(why)
            self.selector, self.unavailable = NoModel(why), why
        finally:
            self.seconds = time.perf_counter() - t0
            self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self) -> ModelLoading:
        self._done.wait()
        return self
