"""Library messages that name the real trouble: one extrapolation warning per kind, ``predict(live=True)`` without
a GPU, and ``examples/mynet_step.py``'s percentiles of a few steps."""

from __future__ import annotations

import sys
import warnings

import pytest
from conftest import REPO
from support import RECORDED

from algosel.problem import ConvProblem


# ------------------------------------------------------------------------------------ library messages
def test_one_extrapolation_warning_per_kind() -> None:
    """A dtype the records lack and a batch size beyond them are two kinds: both warned about, once each (the
    first used to silence every later one; tests/test_predict_api.py has the size fields)."""
    import algosel
    from algosel.learn.extrapolation import ExtrapolationWarning, extrapolation_warnings_scope

    p = ConvProblem.from_key(RECORDED)
    with extrapolation_warnings_scope(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for fields in ({"dtype": "float32_strict"}, {"n": 10**6}, {"dtype": "float32_strict", "k": 128}):
            assert algosel.predict(p.replace(**fields), live=False)[0].extrapolated
    caught = [str(w.message) for w in seen if issubclass(w.category, ExtrapolationWarning)]
    assert len(caught) == 2 and "dtype 'float32_strict'" in caught[0] and "n=1000000" in caught[1], caught


def test_predict_live_without_a_gpu_says_so() -> None:
    import torch

    import algosel

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the live list can be enumerated")
    with pytest.raises(ValueError, match=r"predict\(live=True\): .*cannot be enumerated here \(no CUDA device\)"):
        algosel.predict(ConvProblem.from_key(RECORDED), live=True)


def test_mynet_step_percentiles_stay_within_the_measured_times() -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import mynet_step
    finally:
        sys.path.remove(str(REPO / "examples"))
    two = mynet_step.step_summary([1.0, 10.0])  # the default ("exclusive") method gave p25 = -1.25
    assert 1.0 <= two["step_ms_p25"] <= two["step_ms_median"] <= two["step_ms_p75"] <= 10.0
    assert mynet_step.step_summary([4.0]) == {"step_ms_median": 4.0, "step_ms_p25": 4.0, "step_ms_p75": 4.0}
    with pytest.raises(SystemExit):
        mynet_step.main(["--steps", "0", "--device", "cpu"])
