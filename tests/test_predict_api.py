"""``algosel.predict``'s API: bad arguments refused naming them, numpy integers taken, answers outside the model's
records saying so, and one extrapolation warning per kind and process."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support import RECORDED

import algosel
from algosel.learn.extrapolation import ExtrapolationWarning, extrapolation_warnings_scope
from algosel.learn.models import load_default
from algosel.problem import ConvProblem

# --------------------------------------------------------------------------------------- predict's API
GOOD = {"n": 2, "c": 8, "k": 8, "h": 8, "w": 8, "r": 3, "s": 3}


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((3,), {}, r"takes a ConvProblem .* got 3 \(int\)"),
        ((), {**GOOD, "top_k": "3"}, r"top_k=.* integer >= 1, got '3'"),
        ((), {**GOOD, "top_k": 0}, r"top_k=.* got 0"),
        ((), {**GOOD, "max_workspace_bytes": "1GB"}, r"max_workspace_bytes=.* got '1GB'"),
        ((), {**GOOD, "max_workspace_bytes": -1}, r"max_workspace_bytes=.* got -1"),
        ((), {**GOOD, "deterministic": "yes"}, r"deterministic=.* got 'yes'"),
        ((), {**GOOD, "live": "no"}, r"live=.* got 'no'"),
        ((), {**GOOD, "model": 3}, r"model=.* got 3"),
        ((), {**GOOD, "n": 0}, r"ConvProblem.n must be positive, got 0"),
    ],
    ids=[
        "problem-3",
        "top_k-str",
        "top_k-0",
        "workspace-str",
        "workspace-negative",
        "deterministic-str",
        "live-str",
        "model-int",
        "n-0",
    ],
)
def test_predict_refuses_bad_arguments_naming_them(args, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        algosel.predict(*args, **kwargs)


def test_predict_takes_numpy_integers() -> None:
    got = algosel.predict(ConvProblem.from_key(RECORDED), top_k=np.int64(2), max_workspace_bytes=np.int64(1 << 30),
                          live=False)  # fmt: skip
    assert len(got) == 2 and not got[0].extrapolated and got[0].extrapolation == ""


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"dtype": "float32_strict"}, "dtype 'float32_strict' is not among the model's records (bfloat16, float16,"),
        ({"n": 10**9}, "n=1000000000 is 6.25e+05x the largest recorded n (1600)"),
        ({"h": 10**6, "w": 10**6}, "h=1000000 is 1.75e+03x the largest recorded h (570)"),
    ],
    ids=["float32_strict", "n-1e9", "h-w-1e6"],
)
def test_answers_outside_the_models_records_say_so(fields, reason) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        choices = algosel.predict(ConvProblem.from_key(RECORDED).replace(**fields), top_k=3, live=False)
    assert choices and all(c.extrapolated and reason in c.extrapolation for c in choices)


def test_one_extrapolation_warning_per_kind_and_process() -> None:
    """A first extrapolation (the batch size) does not silence a later one of another kind (the channels); a
    second of a kind already warned about (another batch size) stays quiet."""
    p = ConvProblem.from_key(RECORDED)
    sel = load_default()  # the shipped model, without the answers an earlier test got (memoised, warned no more)
    with extrapolation_warnings_scope(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert algosel.predict(p.replace(n=10**6), live=False, model=sel)[0].extrapolated
        assert algosel.predict(p.replace(c=10**5), live=False, model=sel)[0].extrapolated
        assert algosel.predict(p.replace(n=10**7), live=False, model=sel)[0].extrapolated
        near = algosel.predict(p.replace(n=48), live=False, model=sel)  # not recorded, but within the records' sizes
    assert near[0].source.startswith("nearest:") and not near[0].extrapolated
    caught = [str(w.message) for w in seen if issubclass(w.category, ExtrapolationWarning)]
    assert len(caught) == 2, caught
    assert "n=1000000 is 625x the largest recorded n (1600)" in caught[0] and "kind (n)" in caught[0]
    assert "c=100000 is" in caught[1] and "kind (c)" in caught[1]
