"""Bad model files, manifests and cache folders: one line naming the bad value, never a crash, never a lost file.

- ``algosel cache clear`` removes only the folders the runtime cache can prove it wrote (its header, the folder named
  after the header's environment) and only its own files in them; it deleted the extension sources of a checkout
  whose ``algosel/`` the cache root pointed at.
- A model file is verified (a manifest without ``files`` is refused) and read by a strict parser before LightGBM
  sees it (the parser's refusals: tests/test_model_text.py); a manifest's fields of the wrong type are refused.
- ``report --model`` and ``analyze-log --model`` refuse a model of another GPU as ``evaluate`` does.
- ``doctor --models`` lists a manifest that is a list, or whose environment is a string, as unreadable.

The command lines run in one module fixture (``ran``), each in a process of its own (``tests/cli_rows.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_rows import check_command_row, run_rows
from conftest import REPO
from support import LEGACY, Row, edit_line

from algosel.candidates import DEFAULT_ID
from algosel.learn.artifact import MANIFEST_FILE, MODEL_FILE, SelectorError, read_manifest
from algosel.learn.selector import Selector
from algosel.learn.time_model import TIME_MODEL_FILE
from algosel.runtime.cache import RuntimeCache, clear_folder, folder_environment
from algosel.runtime.decision import Decision

LEGACY_LOG = Path(__file__).resolve().parent / "fixtures" / "cudnn_logs" / "legacy.log.gz"
LEGACY_SLICE = REPO / "data" / "samples" / "h200-legacy-slice"
RECORDED = "n32_c64_k64_h56_w56_r3_s3_p1x1_u1x1_d1x1_g1_float16_nchw_fwd"
ENV = {"gpu_name": "NVIDIA H200", "cudnn": 91900, "torch": "2.11.0", "cudnn_frontend": "1.32.0", "model": "abc"}


def _hashes(*roots: Path) -> dict[str, str]:
    """SHA-256 of every file under ``roots`` and the target of every link (missing roots hash as absent)."""
    out = {}
    for root in roots:
        if not root.exists() and not root.is_symlink():
            out[str(root)] = "absent"
        paths = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
        for p in paths:
            if p.is_symlink():
                out[str(p)] = "link to " + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _rerecord(model: Path, name: str) -> None:
    """Record a changed file's size and SHA-256 in the manifest, as a hand edit or a bad tool would."""
    manifest = json.loads((model / MANIFEST_FILE).read_text())
    data = (model / name).read_bytes()
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (model / MANIFEST_FILE).write_text(json.dumps(manifest))


# ------------------------------------------------------------------------------------------- command lines
def _cache_root(root: Path) -> Path:
    """A cache root holding: a folder of the runtime cache (decisions, a plan, a claim, a set-aside file); one with a
    user's notes beside its decisions; one whose header names another environment than its folder's name; a link to
    a user's folder; and a user's folder with no header."""
    root.mkdir(mode=0o700)
    own = RuntimeCache(root, ENV)
    own.put(Decision("k1", DEFAULT_ID, "records"))
    own.put_plan("k1", "cudnn:eng0", (1, 2, 3), b"blob")
    (own.folder / "claims").mkdir()
    (own.folder / "claims" / f"{'ab' * 10}.claim").write_text("{}")
    (own.folder / "decisions.jsonl.bad").write_text("set aside\n")
    with_notes = RuntimeCache(root, dict(ENV, cudnn=90100))
    with_notes.put(Decision("k1", DEFAULT_ID, "records"))
    (with_notes.folder / "notes.txt").write_text("a user's notes\n")
    forged = root / "runtime" / "0123456789abcdef"
    forged.mkdir()
    forged_header = {"format": "algosel-runtime-cache", "version": 1, "environment": ENV}
    (forged / "decisions.jsonl").write_text(json.dumps(forged_header) + "\n")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.csv").write_text("a,b\n")
    (root / "runtime" / "link").symlink_to(elsewhere)
    (root / "runtime" / "mine").mkdir()
    (root / "runtime" / "mine" / "keep.txt").write_text("keep me\n")
    return root


def _checkout(root: Path) -> Path:
    """A checkout's ``algosel/`` (the runtime package with its extension sources), as a cache root by mistake."""
    shutil.copytree(REPO / "algosel" / "runtime" / "_ext", root / "algosel" / "runtime" / "_ext")
    shutil.copy(REPO / "algosel" / "runtime" / "cache.py", root / "algosel" / "runtime" / "cache.py")
    (root / "algosel" / "runtime" / "__pycache__").mkdir()
    (root / "algosel" / "runtime" / "__pycache__" / "cache.cpython-311.pyc").write_bytes(b"\0pyc")
    return root / "algosel"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Damaged models and cache roots, built once."""
    root = tmp_path_factory.mktemp("bad-inputs")
    paths = {"root": root, "cache": _cache_root(root / "cache"), "checkout": _checkout(root / "checkout")}
    paths["cache-own"] = RuntimeCache(paths["cache"], ENV).folder
    paths["cache-notes"] = RuntimeCache(paths["cache"], dict(ENV, cudnn=90100)).folder

    # One threshold written longer, and the hash recomputed: every later tree moves, LightGBM aborted (exit 134).
    garbled = shutil.copytree(LEGACY, root / "garbled")
    text = (garbled / MODEL_FILE).read_text()
    (garbled / MODEL_FILE).write_text(edit_line(text, "threshold=", 0, "12.5000000000000002"))
    _rerecord(garbled, MODEL_FILE)
    paths["garbled"] = garbled

    other = shutil.copytree(LEGACY, root / "other-gpu")
    manifest = json.loads((LEGACY / MANIFEST_FILE).read_text())
    manifest["environment"]["gpu_name"] = "NVIDIA B200"
    (other / MANIFEST_FILE).write_text(json.dumps(manifest))
    paths["other-gpu"] = other

    bad = root / "bad-manifests"
    for name, edit in (("as-list", lambda m: [m]), ("env-string", lambda m: {**m, "environment": "NVIDIA H200"})):
        model = bad / name
        model.mkdir(parents=True)
        for file in (MODEL_FILE, "catalogue.parquet"):  # doctor reads manifests only: the others may be links
            (model / file).symlink_to(LEGACY / file)
        (model / MANIFEST_FILE).write_text(json.dumps(edit(json.loads((LEGACY / MANIFEST_FILE).read_text()))))
    paths["bad-manifests"] = bad
    return paths


def _rows(p: dict[str, Path]) -> dict[str, Row]:
    out = p["root"] / "out"
    cache = p["cache"]
    kept = (p["cache-notes"] / "notes.txt", cache / "runtime" / "0123456789abcdef", cache / "runtime" / "link",
            cache / "elsewhere", cache / "runtime" / "mine")  # fmt: skip
    return {
        # Item 1: cache clear deleted every folder under runtime/, a checkout's extension sources included.
        "cache-clear-a-checkout": Row(["cache", "clear"], status=0, env={"ALGOSEL_CACHE_DIR": str(p["checkout"])},
                                      says=("_ext: left, not a runtime cache folder (no decisions.jsonl)",
                                            "removed 0 runtime cache folder(s)"),
                                      unchanged=(p["checkout"],)),
        "cache-clear-mixed": Row(["cache", "clear", "--root", str(cache)], status=0,
                                 says=("removed 1 runtime cache folder(s)", "notes.txt: left, not a file",
                                       "0123456789abcdef: left, not a runtime cache folder (its header's environment",
                                       "link: left, not a runtime cache folder (a link", "mine: left"),
                                 unchanged=kept),
        # Item 3: a resized tree block with a matching hash aborted (exit 134) inside LightGBM.
        "predict-garbled-threshold": Row(["predict", "--model", str(p["garbled"]), "--key", RECORDED, "--offline"],
                                         says=(str(p["garbled"] / MODEL_FILE), "corrupt LightGBM model",
                                               "line 12: tree 0: the block is not"),
                                         unchanged=(p["garbled"],)),
        # Item 7: report and analyze-log used a model of another GPU silently; evaluate refuses it.
        "report-model-of-another-gpu": Row(["report", "--model", str(p["other-gpu"]), "--data", str(LEGACY_SLICE),
                                            "--out", str(out / "report")],
                                           says=(f"{p['other-gpu']} was trained for NVIDIA B200", "--force"),
                                           unchanged=(p["other-gpu"], out / "report")),
        "analyze-log-model-of-another-gpu": Row(["analyze-log", str(LEGACY_LOG), "--legacy-model",
                                                 str(p["other-gpu"]), "--data", str(LEGACY_SLICE), "--csv",
                                                 str(out / "log.csv")],
                                                says=(f"{p['other-gpu']} was trained for NVIDIA B200", "--force"),
                                                unchanged=(p["other-gpu"], out / "log.csv")),
        # Item 8: a manifest that is a list, or whose environment is a string, was a traceback.
        "doctor-bad-manifests": Row(["doctor", "--models", str(p["bad-manifests"])], status=0,
                                    says=("as-list", "manifest.json: corrupt manifest (not a JSON object)",
                                          "env-string", "'environment' is str \"NVIDIA H200\", expected an object"),
                                    unchanged=(p["bad-manifests"],)),
    }  # fmt: skip


@pytest.fixture(scope="module")
def ran(inputs) -> dict[str, Row]:
    """Every row, each in a process of its own (forked from one that imported the libraries once: tests/cli_rows.py),
    in the repository with the row's environment added."""
    return run_rows(_rows(inputs), _hashes)


_INPUTS = ("root", "cache", "checkout", "cache-own", "cache-notes", "garbled", "other-gpu", "bad-manifests")
ROW_NAMES = list(_rows({k: Path("/unused") for k in _INPUTS}))


@pytest.mark.parametrize("name", ROW_NAMES)
def test_command_line_row(ran: dict[str, Row], name: str) -> None:
    check_command_row(ran[name], _hashes)


def test_cache_clear_removes_its_own_folders_whole(ran, inputs) -> None:
    """What the mixed root's clear removed: the cache's own folder whole (decisions, plans, claims, the set-aside
    file), and in the folder with a user's notes its own decisions only."""
    assert ran["cache-clear-mixed"].result.returncode == 0
    assert not inputs["cache-own"].exists()
    assert sorted(p.name for p in inputs["cache-notes"].iterdir()) == ["notes.txt"]
    lines = ran["cache-clear-mixed"].result.stdout.splitlines()
    assert len(lines) == 5 and lines[-1].endswith("; 4 item(s) left")  # one line per item left, then the count


def test_folder_environment_proves_a_folder_only_by_its_header_and_name(tmp_path) -> None:
    cache = RuntimeCache(tmp_path, ENV)
    cache.put(Decision("k", DEFAULT_ID, "records"))
    assert folder_environment(cache.folder) == (ENV, "")
    renamed = cache.folder.rename(cache.folder.with_name("fedcba9876543210"))
    assert folder_environment(renamed)[0] is None
    assert clear_folder(renamed) == [f"{renamed}: left, not a runtime cache folder (its header's environment is not "
                                     "the one the folder is named after)"]  # fmt: skip
    (renamed / "decisions.jsonl").write_bytes(b"\xff\xfe not text\n")
    assert folder_environment(renamed)[1].startswith("decisions.jsonl does not start with a algosel-runtime-cache")
    assert sorted(p.name for p in renamed.iterdir()) == ["decisions.jsonl"]


# --------------------------------------------------------------------------------------- model directories
def test_a_manifest_without_files_is_refused_naming_it_and_the_fix(tmp_path) -> None:
    """It was accepted silently, the model text read unverified. The shipped manifests have ``files``."""
    model = tmp_path / "m"
    model.mkdir()
    for name in (MODEL_FILE, "catalogue.parquet", TIME_MODEL_FILE):
        (model / name).symlink_to(LEGACY / name)
    manifest = read_manifest(LEGACY)
    del manifest["files"]
    (model / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(SelectorError) as got:
        Selector.load(model)
    assert str(got.value) == (
        f"{model / MANIFEST_FILE}: records no 'files' (sizes and SHA-256), so model.txt cannot be verified before it "
        "is read; retrain the model with `algosel train` (or restore its directory)"
    )


def test_a_time_model_damaged_with_its_hash_recomputed_is_refused(tmp_path) -> None:
    model = shutil.copytree(LEGACY, tmp_path / "m")
    text = (model / TIME_MODEL_FILE).read_text()
    (model / TIME_MODEL_FILE).write_text(text.replace("\nTree=3\n", "\nTree=3x\n", 1))
    _rerecord(model, TIME_MODEL_FILE)
    with pytest.raises(SelectorError, match=r"time_model\.txt: corrupt LightGBM model \(line \d+: expected 'Tree=3'"):
        Selector.load(model)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda m: [m], "corrupt manifest (not a JSON object)"),
        (lambda m: {**m, "environment": "NVIDIA H200"}, "'environment' is str \"NVIDIA H200\", expected an object"),
        (lambda m: {**m, "params": [1]}, "'params' is list [1], expected an object"),
        (lambda m: {**m, "spaces": "legacy"}, "'spaces' is str \"legacy\", expected a list"),
        (lambda m: {**m, "blocked_engines": [1, 2]}, "'blocked_engines' must hold lists"),
        (lambda m: {**m, "files": {**m["files"], MODEL_FILE: "abc"}}, f"records no size and sha256 of {MODEL_FILE}"),
        (lambda m: {**m, "time_model": {**m["time_model"], "file": "../x.txt"}}, "time_model names the file"),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_refused_naming_the_field(tmp_path, edit, says) -> None:
    model = tmp_path / "m"
    model.mkdir()
    for name in (MODEL_FILE, "catalogue.parquet", TIME_MODEL_FILE):
        (model / name).symlink_to(LEGACY / name)
    (model / MANIFEST_FILE).write_text(json.dumps(edit(read_manifest(LEGACY))))
    with pytest.raises(SelectorError) as got:
        Selector.load(model)
    assert says in str(got.value) and "\n" not in str(got.value), str(got.value)


def test_records_of_another_gpu_are_refused_unless_forced(inputs) -> None:
    """The check report and analyze-log share with evaluate's wording; with force, the difference is returned."""
    from algosel.learn.models import check_records_environment

    sel = Selector.load(inputs["other-gpu"])
    records_env = read_manifest(LEGACY)["environment"]
    with pytest.raises(SelectorError, match=r"trained for NVIDIA B200 \(cuDNN 91900\) but the records are of GPU"):
        check_records_environment(sel.manifest, inputs["other-gpu"], records_env)
    assert check_records_environment(sel.manifest, inputs["other-gpu"], records_env, force=True) == [
        "GPU 'NVIDIA H200' (expected 'NVIDIA B200')"
    ]
    assert check_records_environment(sel.manifest, inputs["other-gpu"], sel.environment) == []
