"""Bad inputs, third pass: nothing lost, nothing silently wrong.

As ``tests/test_bad_inputs_cli.py`` (whose runner and hashes come from ``tests/test_reliability.py``), every command
line runs as a user runs it, ``python -m algosel ...`` in a subprocess: the exit status, no traceback, one error line
naming the bad value, and the files it must not touch hashed before and after. Cases (issue 52's numbering):

1. ``train --force`` replaces only a model's own files: a ``NOTES.txt`` beside a model, or a folder holding no
   model, is refused, nothing touched; every shipped model is left as it is by ``train --force --name <its name>``;
3. readers that check what they are given (a model's space against the records', one GPU per selector, paths that
   must exist);
4-5. one line where a traceback or a misleading message was;
6. sizes and counts validated before the work starts (a grid of ten million shapes);
7. ``algosel --version``.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_rows import check_command_row
from conftest import REPO, SLICE
from test_reliability import Row, _hashes, _run

from algosel.resources import shipped_path
from algosel.version import __version__

#: Every model shipped with the package, by name (read from the package, never listed by hand).
SHIPPED_NAMES = sorted(p.name for p in shipped_path("models").iterdir() if not p.name.startswith("."))


@pytest.fixture(scope="module")
def paths(tmp_path_factory, slice_model) -> dict[str, Path]:
    """Inputs built once: models with a user's file beside them, a folder that holds no model."""
    root = tmp_path_factory.mktemp("bad-inputs-third")
    p = {"root": root, "models": root / "models"}
    p["with-notes"] = p["models"] / "with-notes"
    shutil.copytree(slice_model[0], p["with-notes"])
    (p["with-notes"] / "NOTES.txt").write_text("my notes on this model\n")
    p["with-folder"] = p["models"] / "with-folder"
    shutil.copytree(slice_model[0], p["with-folder"])
    (p["with-folder"] / "plots").mkdir()
    (p["with-folder"] / "plots" / "mine.png").write_bytes(b"png")
    p["no-model"] = p["models"] / "no-model"
    p["no-model"].mkdir()
    (p["no-model"] / "thesis.tex").write_text("\\section{mine}\n")
    return p


def _rows(p: dict[str, Path]) -> dict[str, Row]:
    train = ["train", str(SLICE), "--quick", "--no-progress", "--force", "--models", str(p["models"])]
    rows = {
        # 1. --force never removes what the command did not write.
        "train-force-notes-beside-a-model": Row([*train, "--name", "with-notes"], says=("'NOTES.txt'", "with-notes"),
                                                unchanged=(p["models"],)),
        "train-force-a-folder-beside-a-model": Row([*train, "--name", "with-folder"], says=("'plots'",),
                                                   unchanged=(p["models"],)),
        "train-force-a-folder-holding-no-model": Row([*train, "--name", "no-model"],
                                                     says=("no-model", "holds no model manifest"),
                                                     unchanged=(p["models"],)),
        # 7.
        "version": Row(["--version"], status=0, says=(f"algosel {__version__}",)),
    }  # fmt: skip
    for name in SHIPPED_NAMES:  # the default --models of a checkout is the shipped models' folder
        rows[f"train-force-shipped-{name}"] = Row(
            ["train", str(SLICE), "--quick", "--no-progress", "--force", "--name", name],
            says=(name, "shipped", "--replace-shipped"),
            unchanged=(REPO / "models" / name, shipped_path("models", name)),
        )
    return rows


ROW_NAMES = list(_rows({k: Path("/unused") for k in ("root", "models", "with-notes", "with-folder", "no-model")}))


@pytest.fixture(scope="module")
def ran(paths) -> dict[str, Row]:
    """Every row, in subprocesses of a thread pool."""
    rows = _rows(paths)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(_run, row) for name, row in rows.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("name", ROW_NAMES)
def test_command_line_row(ran: dict[str, Row], name: str) -> None:
    row = ran[name]
    if row.argv[0] == "--version":  # no command name: the version line on stdout, nothing on stderr
        assert row.result.returncode == 0 and row.result.stdout.strip() == f"algosel {__version__}"
        assert row.result.stderr == ""
        return
    check_command_row(row, _hashes)


def test_the_shipped_models_are_found_in_the_package() -> None:
    """The rows above cover every shipped model, whatever models ship."""
    assert SHIPPED_NAMES and all((shipped_path("models", n) / "manifest.json").is_file() for n in SHIPPED_NAMES)
