"""`algosel calibrate`, and the calibration `algosel train` writes into every model it saves (CPU, the slice)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from conftest import SLICE

from algosel.cli import main
from algosel.learn.artifact import read_manifest, verify_directory
from algosel.learn.calibration import CALIBRATION_FILE, load_calibration
from algosel.records import load_records
from algosel.records.environment import env_id
from algosel.records.store import write_part
from algosel.resources import shipped_path


def _copy(model: Path, to: Path) -> Path:
    shutil.copytree(model, to)
    return to


def _without_calibration(model: Path) -> Path:
    """``model`` as one saved before train wrote a calibration: no file, no manifest entry."""
    manifest = read_manifest(model)
    del manifest["files"][CALIBRATION_FILE]
    (model / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    (model / CALIBRATION_FILE).unlink()
    return model


def test_train_writes_the_calibration_into_the_model(slice_model) -> None:
    directory, _ = slice_model
    cal = load_calibration(directory, read_manifest(directory))
    assert cal is not None and len(cal.groups["all"]) > 20  # read as the runtime's rule reads it
    assert 0.0 < cal.coverage["all"]["share"] <= 1.0
    assert verify_directory(directory) == []  # recorded in the manifest, size and hash


def test_calibrate_fits_writes_and_records_it(slice_model, tmp_path, capsys) -> None:
    model = _without_calibration(_copy(slice_model[0], tmp_path / "m"))
    assert load_calibration(model, read_manifest(model)) is None
    assert main(["calibrate", "--model", str(model), "--data", str(SLICE)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {model / CALIBRATION_FILE}" in out and "interval of the speed-up error holds" in out
    assert verify_directory(model) == []
    fitted = load_calibration(model, read_manifest(model))
    saved = load_calibration(slice_model[0], read_manifest(slice_model[0]))
    assert {g: len(s) for g, s in fitted.groups.items()} == {g: len(s) for g, s in saved.groups.items()}


def test_calibrate_reads_the_records_the_manifest_names(slice_model, tmp_path, capsys) -> None:
    model = _without_calibration(_copy(slice_model[0], tmp_path / "m"))
    assert [Path(d) for d in read_manifest(model)["data"]] == [SLICE]
    assert main(["calibrate", "--model", str(model)]) == 0
    assert "interval of the speed-up error holds" in capsys.readouterr().out
    assert load_calibration(model, read_manifest(model)) is not None


def test_calibrate_without_the_training_records_asks_for_them(slice_model, tmp_path, capsys) -> None:
    model = _copy(slice_model[0], tmp_path / "m")
    manifest = read_manifest(model)
    manifest["data"] = [str(tmp_path / "gone")]
    (model / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    assert main(["calibrate", "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'gone'} is not here; give the records with --data" in err


def test_calibrate_refuses_a_missing_folder(tmp_path, capsys) -> None:
    assert main(["calibrate", "--model", str(tmp_path / "none"), "--data", str(SLICE)]) == 2
    err = capsys.readouterr().err
    assert err == f"algosel calibrate: error: --model {tmp_path / 'none'}: no such model directory\n"


def test_calibrate_refuses_a_model_without_a_time_model(slice_model, tmp_path, capsys) -> None:
    model = _without_calibration(_copy(slice_model[0], tmp_path / "m"))
    manifest = read_manifest(model)
    time_model = manifest.pop("time_model")
    del manifest["files"][time_model["file"]]
    (model / time_model["file"]).unlink()
    (model / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    assert main(["calibrate", "--model", str(model), "--data", str(SLICE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the model has no time model: nothing to calibrate" in err
    assert not (model / CALIBRATION_FILE).exists()


def test_calibrate_refuses_records_of_another_gpu(slice_model, tmp_path, capsys) -> None:
    frame, envs = load_records(SLICE)
    env = {**next(iter(envs.values())), "gpu_name": "NVIDIA A100-SXM4-80GB"}
    env["env_id"] = env_id(env)
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
            for r in frame.assign(env_id=env["env_id"]).to_dict("records")]  # fmt: skip
    write_part(tmp_path / "a100" / "part-a100.parquet", rows, [env])
    model = _without_calibration(_copy(slice_model[0], tmp_path / "m"))
    assert main(["calibrate", "--model", str(model), "--data", str(tmp_path / "a100")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the records hold NVIDIA A100-SXM4-80GB" in err
    assert not (model / CALIBRATION_FILE).exists()


def test_calibrate_writes_into_a_shipped_model_only_with_replace_shipped(capsys) -> None:
    shipped = next(p for p in sorted(shipped_path("models").iterdir()) if (p / "manifest.json").is_file())
    before = {p.name: p.stat().st_mtime_ns for p in shipped.iterdir()}
    assert main(["calibrate", "--model", str(shipped), "--data", str(SLICE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--replace-shipped" in err
    assert {p.name: p.stat().st_mtime_ns for p in shipped.iterdir()} == before
