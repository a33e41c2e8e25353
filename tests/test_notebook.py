"""notebooks/analysis.ipynb runs from top to bottom on the shipped records and model, on the CPU."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nbclient  # the dev extra: nbclient, nbformat, ipykernel
import nbformat
import pytest
from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"
#: The notebook is meant to stay quick enough to rerun while reading it.
BUDGET_S = 60


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    assert all(not c.outputs and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # A probe cell at the end: which interpreter the kernel really runs.
    nb.cells.append(nbformat.v4.new_code_cell("import sys, json; print(json.dumps({'executable': sys.executable}))"))
    cwd = tmp_path_factory.mktemp("notebook")  # the notebook must not depend on where it is started
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(cwd)}}, allow_errors=False
    )
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    return nb, time.perf_counter() - t0


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def test_notebook_runs_without_errors_in_this_interpreter(executed) -> None:
    nb, elapsed_s = executed
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr" and "Traceback" in o.text]
    probe = json.loads(nb.cells[-1].outputs[0].text)
    # The kernel spec "python3" must start this very venv's python, as in CI's fresh .venv-ci.
    assert Path(probe["executable"]).resolve() == Path(sys.executable).resolve()
    assert elapsed_s < BUDGET_S, f"the notebook took {elapsed_s:.0f} s"


def test_notebook_shows_figures_and_tables(executed) -> None:
    nb, _ = executed
    outputs = _outputs(nb)
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) >= 2  # the CDF and the whole-network bars
    html = "\n".join(o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {}))
    for name in ("model", "heuristic_a", "heuristic_b", "pytorch_default", "gemm_else_a", "cuDNN heuristic mode A"):
        assert name in html, name
    for column in ("gemm_best_share", "speedup_geomean", "best_candidate", "calls"):
        assert column in html, column
    text = "\n".join(o.text for o in outputs if o.output_type == "stream")
    assert "held-out problems" in text and "records of" in text
