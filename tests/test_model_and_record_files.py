"""Model and record files: a damaged model directory is refused naming the file before LightGBM reads it, the
shipped models are as their manifests record them, a model's directory is written whole or not at all; records
without physical sense are refused naming file and column, the shipped ones pass, and the README's table is what
``algosel summarize`` prints of them."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO
from support import SHIPPED, copy_model, truncate

from algosel.files import atomic_directory, write_text
from algosel.learn.artifact import CATALOGUE_FILE, MANIFEST_FILE, MODEL_FILE, SelectorError, verify_directory
from algosel.learn.models import load_default
from algosel.learn.selector import Selector
from algosel.learn.time_model import TIME_MODEL_FILE
from algosel.records import RecordsError, load_records, read_part, write_part


# --------------------------------------------------------------------------------------- the model directory
@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.9999])
def test_a_truncated_shipped_model_is_refused_before_lightgbm_reads_it(tmp_path, fraction) -> None:
    """What predict, evaluate and the hook load (load_default -> Selector.load): refused naming the file. Were
    LightGBM to read the file, this test process would die of the segmentation fault."""
    model = copy_model(SHIPPED, tmp_path / SHIPPED.name)
    recorded = json.loads((SHIPPED / MANIFEST_FILE).read_text())["files"][MODEL_FILE]["bytes"]
    truncate(model / MODEL_FILE, fraction)
    with pytest.raises(SelectorError, match=rf"model\.txt: \d+ bytes, the manifest records {recorded} "):
        load_default(models_root=tmp_path)


def test_a_damaged_catalogue_is_refused(tmp_path) -> None:
    model = copy_model(SHIPPED, tmp_path / "m")
    data = bytearray((model / CATALOGUE_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    (model / CATALOGUE_FILE).write_bytes(bytes(data))
    with pytest.raises(SelectorError, match=r"catalogue\.parquet: content differs from the manifest's sha256"):
        Selector.load(model)
    assert verify_directory(model) == [f"{model / CATALOGUE_FILE}: differs from the manifest"]


def test_shipped_models_are_as_their_manifests_record_them() -> None:
    for model in (SHIPPED, REPO / "models" / "h200-cudnn91900-legacy"):
        manifest = json.loads((model / MANIFEST_FILE).read_text())
        assert sorted(manifest["files"]) == sorted(p.name for p in model.iterdir() if p.name != MANIFEST_FILE)
        assert verify_directory(model) == []


def test_save_refuses_an_existing_directory_and_replaces_only_a_models_own_files(slice_model, tmp_path) -> None:
    sel = Selector.load(slice_model[0])
    out = tmp_path / "m"
    out.mkdir()
    (out / "report.csv").write_text("an old model's report\n")
    with pytest.raises(SelectorError, match="exists"):
        sel.save(out)
    with pytest.raises(SelectorError, match="holds no model manifest"):
        sel.save(out, replace=True)
    assert sorted(p.name for p in out.iterdir()) == ["report.csv"]
    model = tmp_path / "model"
    sel.save(model, extra_files={"old.txt": "an old model's own report\n"})
    sel.save(model, replace=True, extra_files={"notes.txt": "new\n"})
    expected = [MODEL_FILE, MANIFEST_FILE, CATALOGUE_FILE, "notes.txt"] + ([TIME_MODEL_FILE] if sel.time_model else [])
    assert sorted(p.name for p in model.iterdir()) == sorted(expected)
    assert verify_directory(model) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary directory left"


def test_a_failed_directory_write_leaves_nothing(tmp_path) -> None:
    target = tmp_path / "d"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("killed mid-write (simulated)")
    assert list(tmp_path.iterdir()) == []
    write_text(tmp_path / "f.txt", "whole\n")
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


# ------------------------------------------------------------------------------------------------ records
@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("status", "exploded", "column status: unknown status"),
        ("time_ms_median", 0.0, "column time_ms_median: a time that is not positive"),
        ("time_ms_min", float("nan"), "column time_ms_min"),
        ("time_ms_p75", float("inf"), "column time_ms_p75"),
        ("workspace_bytes", -2, "column workspace_bytes: below -1"),
    ],
)
def test_records_without_physical_sense_are_refused_naming_file_and_column(
    slice_records, tmp_path, column, value, message
) -> None:
    frame, envs = slice_records
    bad = frame.head(20).copy()
    bad.loc[bad.index[3], column] = value
    path = write_part(tmp_path / "part-x.parquet", bad.to_dict("records"), envs.values())
    with pytest.raises(RecordsError, match=re.escape(f"{path}: {message}")):
        read_part(path)


def test_failed_rows_may_have_no_time(slice_records, tmp_path) -> None:
    frame, envs = slice_records
    rows = frame.head(5).copy()
    rows["status"], rows["time_ms_median"] = "build_failed", float("nan")
    assert len(read_part(write_part(tmp_path / "part-f.parquet", rows.to_dict("records"), envs.values()))[0]) == 5


# ------------------------------------------------------------------------------------------------- README
def test_readme_summarize_command_prints_the_readme_table(capsys) -> None:
    """The README's main job runs `algosel summarize` on the records its table is of, and prints its numbers."""
    from algosel.cli import main

    readme = (REPO / "README.md").read_text()
    command = re.search(r"\.venv/bin/algosel summarize ([^&]+?) &&", readme)
    assert command, "the main job runs algosel summarize"
    assert command.group(1).split() == ["data/sweeps/h200"]
    section = readme[readme.index("## What it finds") :]
    assert "`algosel summarize data/sweeps/h200` on 5,742 problems" in section
    table = re.findall(r"^\| [^|]+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+)% \|$", section, re.M)[:3]
    assert len(table) == 3
    assert main(["summarize", *command.group(1).split(), "--worst", "0"]) == 0
    printed = capsys.readouterr().out
    assert "5742 problems" in printed
    for selector, (geomean, p95, worst, within) in zip(("heuristic_a", "heuristic_b", "pytorch_default"), table):
        line = next(x for x in printed.splitlines() if x.split()[:3] == ["all", "all", selector])
        values = line.split()
        assert float(values[4]) == pytest.approx(float(geomean), abs=5e-4)
        assert float(values[5]) == pytest.approx(float(p95), abs=5e-3)
        assert float(values[6]) == pytest.approx(float(worst), abs=0.5)  # 2188.5 is written 2189x
        assert values[7] == f"{within}%"


def test_shipped_records_pass_the_physical_checks() -> None:
    frame, _ = load_records(REPO / "data" / "sweeps" / "h200-legacy")
    assert len(frame) == 79212
