"""``algosel calibrate``: a saved model's calibration (:mod:`algosel.learn.calibration`) fitted on the records it
was trained on and written into its folder, recorded in its manifest. For a model saved before ``algosel train``
wrote one, or one whose records have grown since."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from algosel.files import write_text
from algosel.learn.artifact import SelectorError, read_manifest, record_files
from algosel.learn.calibration import CALIBRATION_FILE, Calibration, fit_calibration
from algosel.learn.selector import Selector
from algosel.outputs import check_not_shipped
from algosel.records import load_records
from algosel.records.environment import coverage, model_environments


def _training_data(directory: Path, data: Sequence[str] | None) -> list[str]:
    """``data``, else the records the manifest says the model was trained on, which must be here."""
    if data:
        return [str(d) for d in data]
    recorded = [str(d) for d in read_manifest(directory).get("data") or []]
    if not recorded:
        raise SelectorError(f"{directory}: its manifest names no training records; give them with --data")
    missing = [d for d in recorded if not Path(d).exists()]
    if missing:
        raise SelectorError(
            f"{directory}: trained on {', '.join(recorded)}, and {missing[0]} is not here; give the records with --data"
        )
    return recorded


def calibrate_saved_model(directory: str | Path, data: Sequence[str] | None = None,
                          replace_shipped: bool = False) -> Calibration:  # fmt: skip
    """Fit the calibration of the model in ``directory`` on ``data`` (default: its manifest's training records),
    write :data:`~algosel.learn.calibration.CALIBRATION_FILE` there and record it in the manifest.

    Raises
    ------
    SelectorError
        No such model directory, a model without a time model, training records not found, or records of a GPU or
        cuDNN the model was not trained on (a calibration measures the model on its own GPU's problems).
    algosel.outputs.OutputError
        A shipped model's folder without ``replace_shipped`` (checked before any work).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise SelectorError(f"--model {directory}: no such model directory")
    check_not_shipped(directory, "--model", replace_shipped)
    selector = Selector.load(directory, force=True)  # the model's own GPU need not be this machine's
    if selector.time_model is None:
        raise SelectorError(f"{directory}: the model has no time model: nothing to calibrate (retrain it)")
    frame, envs = load_records(*_training_data(directory, data))
    trained_on = model_environments(selector.manifest)
    for env_id in frame["env_id"].unique():
        if coverage(trained_on, envs[env_id])[0] != "exact":
            env = envs[env_id]
            raise SelectorError(
                f"{directory} was trained for {', '.join(str(e.get('gpu_name')) for e in trained_on)} but the records "
                f"hold {env.get('gpu_name')} (cuDNN {env.get('cudnn')}): calibrate it on its own GPU's records"
            )
    calibration = fit_calibration(selector, frame, envs)
    write_text(directory / CALIBRATION_FILE, calibration.to_json())
    record_files(directory, [CALIBRATION_FILE])
    return calibration
