"""Compiled trees (algosel.learn.compiled, `algosel compile`): the same predictions as LightGBM, cached per machine,
loaded only when their recorded hash matches, and the plain LightGBM path wherever lleaves is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
from conftest import REPO

from algosel.cli import main
from algosel.learn.compiled import CompileError, CompileOptions, attach_cached, compile_selector, compiled_forest
from algosel.learn.features import FEATURE_NAMES
from algosel.learn.ranker import Ranker, RankerParams
from algosel.learn.selector import Selector

SHIPPED = REPO / "models" / "joint-h100-h200-cudnn91900"


def _tiny_booster(seed: int = 0) -> lgb.Booster:
    """A ranker-sized feature width, a forest small enough to compile in a fraction of a second."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, len(FEATURE_NAMES)))
    y = X[:, 0] * 2 + np.sin(X[:, 1]) + rng.normal(scale=0.1, size=400)
    params = {"objective": "regression", "num_leaves": 7, "verbose": -1, "num_threads": 1, "seed": seed}
    return lgb.train(params, lgb.Dataset(X, y), num_boost_round=8)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """The shipped model's directory with a tiny ranker, no time model and 20 problems' catalogue, saved whole."""
    sel = Selector.load(SHIPPED, force=True)
    manifest = {k: v for k, v in sel.manifest.items() if k not in ("files", "time_model")}
    catalogue = sel.catalogue.frame
    catalogue = catalogue[catalogue["problem_key"].isin(catalogue["problem_key"].unique()[:20])]  # small: fast to load
    tiny = Selector(Ranker(RankerParams(), _tiny_booster()), manifest, catalogue, None)
    out = tmp_path_factory.mktemp("models") / "tiny"
    tiny.save(out)
    return out


def test_without_lleaves_predictions_go_through_lightgbm_and_compile_is_one_line(tiny_model, tmp_path, capsys,
                                                                                 monkeypatch) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "lleaves", None)  # as if not installed: importing it raises ImportError
    sel = Selector.load(tiny_model, force=True)
    assert attach_cached(sel, CompileOptions(root=tmp_path)) == []
    with pytest.raises(CompileError, match=r"pip install 'algosel\[compiled\]'"):
        compile_selector(sel, CompileOptions(root=tmp_path))
    assert main(["compile", "--model", str(tiny_model), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("algosel compile: error: ") and str(tiny_model) in err[0]
    assert not (tmp_path / "compiled").exists()


def test_compiled_forest_predicts_as_lightgbm_and_a_new_process_takes_it_from_the_cache(tmp_path) -> None:
    pytest.importorskip("lleaves")
    booster = _tiny_booster()
    text = booster.model_to_string().encode()
    options = CompileOptions(root=tmp_path)
    sha = "ab" * 32
    assert compiled_forest(sha, lambda: text, booster, options) is None  # nothing cached, not asked to build
    built = compiled_forest(sha, lambda: text, booster, options, build=True)
    X = np.random.default_rng(1).normal(size=(12, len(FEATURE_NAMES)))
    np.testing.assert_allclose(built.predict(X), booster.predict(X, num_threads=1), rtol=0, atol=1e-12)

    def must_not_compile() -> bytes:
        raise AssertionError("a cached forest is loaded, not compiled again")

    again = compiled_forest(sha, must_not_compile, booster, options)
    np.testing.assert_allclose(again.predict(X), booster.predict(X, num_threads=1), rtol=0, atol=1e-12)
    # an object file changed since it was recorded is never loaded
    built.entry.write_bytes(built.entry.read_bytes()[:-8] + b"\0" * 8)
    assert compiled_forest(sha, must_not_compile, booster, options) is None


def test_algosel_compile_caches_the_trees_that_every_later_load_takes(tiny_model, tmp_path, capsys) -> None:
    pytest.importorskip("lleaves")
    assert main(["compile", "--model", str(tiny_model), "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ranker: " in out and str(tmp_path / "compiled") in out
    sel = Selector.load(tiny_model, force=True)
    assert attach_cached(sel, CompileOptions(root=tmp_path / "compiled")) == ["ranker"]
    X = np.random.default_rng(2).normal(size=(5, len(FEATURE_NAMES)))
    np.testing.assert_allclose(sel.ranker.score(X), sel.ranker.booster_.predict(X), rtol=0, atol=1e-12)
    assert type(sel.ranker.__dict__["compiled_forest"]).__name__ == "CompiledForest"
