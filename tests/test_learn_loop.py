"""benchmarks/learn_loop.py (the learn-from-cache loop replayed on CPU) on the committed H200 slice's FPN problems:
its bookkeeping (held-out network, sizes learned and not, the replayed cache, the totals), never a model's quality."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pandas as pd
import pytest
from conftest import REPO, SLICE

from algosel.candidates import DEFAULT_ID
from algosel.problem import ConvProblem
from algosel.records import load_records

SMALL = ["--data", str(SLICE), "--trees", "8", "--leaves", "7", "--time-trees", "8", "--threads", "1"]


def _script():
    spec = importlib.util.spec_from_file_location("learn_loop", REPO / "benchmarks" / "learn_loop.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("learn-loop") / "fpn.json"
    _script().main([*SMALL, "--suite", str(REPO / "data" / "suites" / "fpn.csv"), "--out", str(out)])
    return json.loads(out.read_text())


def test_the_held_out_network_s_problems_split_by_input_size(result):
    frame, _ = load_records(SLICE)
    fpn = set(frame.loc[frame["source"] == "suite:fpn", "problem_key"])
    assert result["card"] == "NVIDIA H200" and result["network"] == "fpn"
    assert result["problems"]["network"] == len(fpn)
    assert result["problems"]["learned"] + result["problems"]["other_sizes"] == len(fpn)
    assert result["problems"]["learned"] > 0 and result["problems"]["other_sizes"] > 0

    suite = pd.read_csv(REPO / "data" / "suites" / "fpn.csv")
    learned, other = _script().size_split(fpn, REPO / "data" / "suites" / "fpn.csv")
    sizes = sorted(suite["size"].unique())
    shapes_of = {
        size: {ConvProblem(**{f: int(r[f]) for f in suite.columns[2:-1]}).shape_key for _, r in rows.iterrows()}
        for size, rows in suite.groupby("size")
    }
    learned_shapes = set().union(*(shapes_of[s] for s in sizes[::2]))
    assert all(ConvProblem.from_key(k).shape_key in learned_shapes for k in learned)
    assert not any(ConvProblem.from_key(k).shape_key in learned_shapes for k in other) and not learned & other


def test_the_cache_holds_what_verify_measured_and_the_totals_are_consistent(result):
    assert result["cache"]["problems"] == result["learned"]["problems"] and result["cache"]["weight"] == 1.0
    for group in ("learned", "other_sizes"):
        s = result[group]
        assert s["best_ms"] <= s["verify_ms"] <= s["default_ms"]
        assert math.isclose(s["verify_x_default"], s["verify_ms"] / s["default_ms"])
        for name in ("first", "second", "second_without_cache_catalogue"):
            r = s[name]
            assert r["x_best"] >= 1 - 1e-9 and math.isclose(
                r["x_best"] * s["best_ms"], r["x_default"] * s["default_ms"]
            )
            gain = (1 - r["x_default"]) / (1 - s["verify_x_default"])
            assert math.isclose(r["share_of_verify_gain"], gain, rel_tol=1e-6)


def test_verify_times_are_the_shortlist_and_the_default_at_recorded_times(slice_model):
    from algosel.learn.selector import Selector

    loop = _script()
    frame, _ = load_records(SLICE)
    recorded = loop.recorded_times(frame)
    sel = Selector.load(slice_model[0])
    key = sorted(recorded)[0]
    times = loop.verify_times(sel, ConvProblem.from_key(key), recorded[key], 3)
    assert DEFAULT_ID in times and len(times) <= 4
    assert all(recorded[key][c] == t for c, t in times.items())


def test_a_network_without_records_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match="no records of network 'nonet'"):
        _script().main([*SMALL, "--network", "nonet"])
