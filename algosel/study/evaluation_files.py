"""Where ``algosel evaluate`` writes its files, and how: one unit per run, never over a file it did not write.

:func:`check_out` runs before any work; :func:`write_evaluation` writes the files of a run once they are all
computed (:func:`algosel.outputs.write_output_dir`). In the model's own directory (how its committed report is made)
the model's manifest records the new files in the same unit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from algosel.outputs import check_output_dir, write_output_dir

# Light on purpose (algosel.learn.artifact, which loads LightGBM, is imported where a model directory is written):
# the command line checks --out with this module before the seconds of importing the evaluation.

TOP_K_CSV, TOP_K_PNG, CELLS_CSV = "top_k.csv", "top_k.png", "cells.csv"
#: The files of the held-out evaluation and leave-one-network-out, in the order they are listed.
EVALUATION_FILES: tuple[str, ...] = ("report.csv", CELLS_CSV, TOP_K_CSV, TOP_K_PNG, "network_totals.csv",
                                     "report.json")  # fmt: skip
#: The files of the evaluation on a user's layers (:func:`~algosel.study.evaluation_layers.run_layers_evaluation`).
LAYERS_FILES: tuple[str, ...] = ("layers_report.csv", "layers_problems.csv", "layers_time_totals.csv",
                                 "layers_totals.csv", "layers_report.json")  # fmt: skip
#: Every file ``algosel evaluate`` writes into its output folder.
EVALUATE_FILES: tuple[str, ...] = EVALUATION_FILES + LAYERS_FILES


def default_out(model_dir: str | Path) -> Path:
    """Where ``algosel evaluate`` writes without ``--out``: ``reports/<model name>`` (never the model directory,
    whose committed report a partial or mistaken run must not replace)."""
    return Path("reports") / Path(model_dir).name


def _is_own_directory(out_dir: Path, model_dir: str | Path) -> bool:
    return out_dir.exists() and out_dir.resolve() == Path(model_dir).resolve()


def check_out(out: str | Path | None, model_dir: str | Path, overwrite: bool = False,
              names: tuple[str, ...] = EVALUATE_FILES, replace_shipped: bool = False) -> Path:  # fmt: skip
    """The output folder of an evaluation of ``model_dir``, checked before any work
    (:func:`algosel.outputs.check_output_dir`): a directory, or a place where one can be made, holding none of the
    files ``names`` that ``algosel evaluate`` did not write there unless ``overwrite``, nor a shipped model's folder
    unless ``replace_shipped``. In the model's own directory its manifest is among them (the evaluation records its
    files there).

    Raises
    ------
    algosel.outputs.OutputError
        One line naming ``--out`` and the file in the way.
    """
    out_dir = Path(out) if out else default_out(model_dir)
    if _is_own_directory(out_dir, model_dir):
        names = (*names, "manifest.json")  # the model's (algosel.learn.artifact.MANIFEST_FILE)
    return check_output_dir(out_dir, "evaluate", names, overwrite=overwrite, replace_shipped=replace_shipped)


def _manifest_with(model_dir: Path, files: dict[str, bytes], names: tuple[str, ...]) -> bytes | None:
    """The model's manifest with ``files`` recorded (size and SHA-256) and the other files of ``names`` (removed
    as an earlier run's) no longer listed, as :func:`~algosel.learn.artifact.record_files` writes it; None for a
    model saved before manifests listed their files (it stays as it is)."""
    from algosel.learn.artifact import read_manifest  # noqa: PLC0415 - see the imports

    manifest = read_manifest(model_dir)
    if manifest.get("files") is None:
        return None
    entries = {name: entry for name, entry in manifest["files"].items() if name not in names}
    entries |= {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}
    text = json.dumps({**manifest, "files": dict(sorted(entries.items()))}, indent=2, sort_keys=True, default=str)
    return (text + "\n").encode()


def write_evaluation(
    out: str | Path | None,
    model_dir: str | Path,
    files: dict[str, bytes],
    overwrite: bool = False,
    names: tuple[str, ...] = EVALUATE_FILES,
    replace_shipped: bool = False,
) -> list[Path]:
    """Write an evaluation's files (name -> content) into ``out`` as one unit; any other file of ``names`` there
    (an earlier run's) is removed (:func:`algosel.outputs.write_output_dir`). In the model's own directory (how its
    committed report is made) the manifest records the new files in the same unit, so that the directory stays
    verifiable, and ``overwrite`` is needed for every file of ``names`` already there and for the manifest."""
    from algosel.learn.artifact import MANIFEST_FILE  # noqa: PLC0415 - see the imports

    out_dir = Path(out) if out else default_out(model_dir)
    own = _is_own_directory(out_dir, model_dir)
    files = dict(files)
    if own:
        manifest = _manifest_with(out_dir, files, names)
        if manifest is not None:
            files[MANIFEST_FILE] = manifest
            names = (*names, MANIFEST_FILE)
    return write_output_dir(
        out_dir, files, "evaluate", names, overwrite=overwrite, record=not own, replace_shipped=replace_shipped
    )
