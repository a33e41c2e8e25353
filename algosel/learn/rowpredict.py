"""LightGBM predictions of a few rows without LightGBM's per-call set-up.

A first prediction scores a dozen shortlisted candidates with the ranker and two with the time model, one
``Booster.predict`` call each. Each such call parses its parameters and builds a predictor before it walks a tree:
about 100 us of fixed cost per call on one core (H200 model, 150 trees of 127 leaves: 330 us for 12 rows, of which
the trees are about 200 us), a third of the 1 ms a first prediction may take. LightGBM's C API has a path made for
this (``LGBM_BoosterPredictForMatSingleRowFastInit`` once, then ``LGBM_BoosterPredictForMatSingleRowFast`` per
row): the same predictor, set up once. :class:`RowPredictor` uses it for up to :data:`FAST_ROWS` rows and
``Booster.predict`` otherwise (and wherever the fast path cannot be set up); both give the same numbers, bit for
bit (``tests/test_rowpredict.py``).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import lightgbm as lgb
import numpy as np

#: Up to this many rows the fast path is used; beyond it one ``Booster.predict`` call costs less than one call per
#: row (the fixed cost is then spread over the rows).
FAST_ROWS = 32
_PREDICT_NORMAL, _FLOAT64 = 0, 1  # C_API_PREDICT_NORMAL (what Booster.predict returns), C_API_DTYPE_FLOAT64


def _lib() -> Any:
    from lightgbm.basic import _LIB  # noqa: PLC0415 - LightGBM's own handle on its library

    return _LIB


class RowPredictor:
    """``booster.predict(X, num_threads=1)`` for small ``X``, set up once (see the module docstring).

    Not for concurrent use from several threads without its lock: one predictor buffer is shared, so calls are
    serialised.
    """

    def __init__(self, booster: lgb.Booster):
        self.booster = booster
        self._config: ctypes.c_void_p | None = None
        self._ncol = booster.num_feature()
        self._failed = False
        self._lock = threading.Lock()

    @property
    def fast_path_ready(self) -> bool:
        """Whether LightGBM's single-row fast path is set up (after a first small prediction; False where this
        LightGBM lacks it and every prediction takes the plain path)."""
        return self._config is not None

    def _init(self) -> bool:
        from lightgbm.basic import _c_str, _safe_call  # noqa: PLC0415

        handle = ctypes.c_void_p()
        try:
            _safe_call(
                _lib().LGBM_BoosterPredictForMatSingleRowFastInit(
                    self.booster._handle,  # noqa: SLF001 - the booster's C handle
                    ctypes.c_int(_PREDICT_NORMAL),
                    ctypes.c_int(0),  # start iteration
                    ctypes.c_int(-1),  # all iterations
                    ctypes.c_int(_FLOAT64),
                    ctypes.c_int32(self._ncol),
                    _c_str("num_threads=1"),
                    ctypes.byref(handle),
                )
            )
        except (AttributeError, lgb.basic.LightGBMError):  # a LightGBM without the fast path: the plain one
            self._failed = True
            return False
        self._config = handle
        return True

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The booster's prediction of the rows of ``X`` (2-D), as ``Booster.predict(X, num_threads=1)``."""
        X = np.asarray(X)
        if len(X) > FAST_ROWS or X.ndim != 2 or X.shape[1] != self._ncol or self._failed:
            return self.booster.predict(X, num_threads=1)
        rows = np.ascontiguousarray(X, dtype=np.float64)
        out = np.empty(len(rows), dtype=np.float64)
        out_len = ctypes.c_int64(0)
        with self._lock:
            if self._config is None and not self._init():
                return self.booster.predict(X, num_threads=1)
            fast = _lib().LGBM_BoosterPredictForMatSingleRowFast
            base, step = rows.ctypes.data, rows.strides[0]
            result = out.ctypes.data
            for i in range(len(rows)):
                ret = fast(
                    self._config,
                    ctypes.c_void_p(base + i * step),
                    ctypes.byref(out_len),
                    ctypes.c_void_p(result + 8 * i),
                )
                if ret != 0:
                    raise lgb.basic.LightGBMError(_lib().LGBM_GetLastError().decode("utf-8"))
        return out

    def __del__(self) -> None:
        config = getattr(self, "_config", None)
        if config is not None:
            try:
                _lib().LGBM_FastConfigFree(config)
            except Exception:  # noqa: BLE001, S110 - interpreter shutdown: nothing left to free into
                pass


def row_predictor(owner: Any, booster: lgb.Booster) -> Any:
    """What predicts ``booster``'s few rows for ``owner`` (a ranker or time model): its compiled forest where one is
    attached for this booster (``compiled_forest``, :mod:`algosel.learn.compiled`), else the :class:`RowPredictor` of
    ``booster``, kept on ``owner`` until its booster changes. Both have ``predict(X)``."""
    compiled = owner.__dict__.get("compiled_forest")
    if compiled is not None and compiled.booster is booster:
        return compiled
    pred = owner.__dict__.get("_row_predictor")
    if pred is None or pred.booster is not booster:
        pred = RowPredictor(booster)
        owner.__dict__["_row_predictor"] = pred
    return pred
