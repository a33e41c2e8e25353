"""Bad inputs, third pass: nothing lost, nothing silently wrong.

As ``tests/test_bad_inputs_cli.py`` (its rows and hashes come from ``tests/support.py``), every command
line runs as a user runs it, ``python -m algosel ...`` in a process of its own (forked from one that imported the
libraries once: ``tests/cli_rows.py``): the exit status, no traceback, one error line naming the bad value, and the
files it must not touch hashed before and after. Cases (issue 52's numbering):

1. ``train --force`` replaces only a model's own files: a ``NOTES.txt`` beside a model, or a folder holding no
   model, is refused, nothing touched; every shipped model is left as it is by ``train --force --name <its name>``;
3. readers that check what they are given (a model's space against the records', one GPU per selector, paths that
   must exist);
4-5. one line where a traceback or a misleading message was;
6. sizes and counts validated before the work starts (a grid of ten million shapes);
7. ``algosel --version``.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from cli_rows import check_command_row, run_rows
from conftest import REPO, SLICE
from support import Row, hashes, run_in_process

from algosel.learn.artifact import MANIFEST_FILE
from algosel.records import load_records, write_part
from algosel.resources import shipped_path
from algosel.version import __version__

#: Every model shipped with the package, by name (read from the package, never listed by hand).
SHIPPED_NAMES = sorted(p.name for p in shipped_path("models").iterdir() if not p.name.startswith("."))
ENGINE_MODEL = REPO / "models" / "joint-h100-h200-cudnn91900"
LEGACY_MODEL = REPO / "models" / "h200-cudnn91900-legacy"
LEGACY_SLICE = REPO / "data" / "samples" / "h200-legacy-slice"
LOGS = Path(__file__).resolve().parent / "fixtures" / "cudnn_logs"
H100 = REPO / "data" / "sweeps" / "h100-80gb-hbm3-cudnn91900-targeted"
NHWC = REPO / "data" / "sweeps" / "h200-nhwc"
PROBLEM = ["--n", "32", "--c", "64", "--k", "64", "--h", "56", "--w", "56", "--r", "3", "--s", "3", "--offline"]


def _first_problems(dataset: Path, out: Path, count: int, source_prefix: str = "") -> Path:
    """A small part of ``dataset``: every record of its first ``count`` problems (of sources with the prefix)."""
    frame, envs = load_records(dataset)
    frame = frame[frame["source"].str.startswith(source_prefix)]
    keys = sorted(frame["problem_key"].unique())[:count]
    return write_part(out / "part-0.parquet", frame[frame["problem_key"].isin(keys)].to_dict("records"), envs.values())


def _damaged_cache(root: Path) -> Path:
    """A runtime cache folder whose decisions.jsonl has a line of other bytes than UTF-8 and a line of garbage."""
    from algosel.runtime.cache import FORMAT, FORMAT_VERSION, environment_key

    env = {"gpu_name": "NVIDIA H200", "cudnn": 91900}
    folder = root / "runtime" / environment_key(env)
    folder.mkdir(parents=True)
    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "environment": env}, sort_keys=True)
    (folder / "decisions.jsonl").write_bytes(header.encode() + b'\n{"problem": "\xff\xfe"}\ngarbage\n')
    return folder / "decisions.jsonl"


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
    p["engine-model"] = slice_model[0]
    p["no-model"] = p["models"] / "no-model"
    p["no-model"].mkdir()
    (p["no-model"] / "thesis.tex").write_text("\\section{mine}\n")
    p["h100"] = _first_problems(H100, root / "h100", 12).parent
    p["nhwc-suites"] = _first_problems(NHWC, root / "nhwc", 30, "suite:").parent
    p["cache"] = root / "cache"
    p["cache-file"] = _damaged_cache(p["cache"])
    p["edited-names"] = shutil.copytree(LEGACY_MODEL, root / "edited-names")
    manifest = json.loads((LEGACY_MODEL / MANIFEST_FILE).read_text())
    manifest["feature_names"][3] = "height"
    (p["edited-names"] / MANIFEST_FILE).write_text(json.dumps(manifest))
    return p


def _rows(p: dict[str, Path]) -> dict[str, Row]:
    out = p["root"] / "out"
    engine = p["engine-model"]  # a model of engine configs: the slice's, which loads far sooner than the shipped one
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
        # 3. Readers that check what they are given.
        "evaluate-legacy-model-on-engine-records": Row(["evaluate", "--model", str(LEGACY_MODEL), "--data", str(SLICE),
                                                        "--out", str(out / "e1"), "--no-lono", "--no-progress"],
                                                       says=(str(LEGACY_MODEL), "selects legacy", "cudnn ones"),
                                                       unchanged=(out / "e1",)),
        "evaluate-engine-model-on-legacy-records": Row(["evaluate", "--model", str(engine), "--data",
                                                        str(LEGACY_SLICE), "--out", str(out / "e2"), "--no-lono"],
                                                       says=(str(engine), "selects cudnn", "legacy ones"),
                                                       unchanged=(out / "e2",)),
        "analyze-log-legacy-model-of-engine-configs": Row(["analyze-log", str(LOGS / "legacy.log.gz"),
                                                           "--legacy-model", str(engine)],
                                                          says=("selects cudnn", "--legacy-model", "legacy ones")),
        "analyze-log-model-of-legacy-algorithms": Row(["analyze-log", str(LOGS / "pytorch.log.gz"), "--model",
                                                       str(LEGACY_MODEL)], says=("selects legacy", "--model")),
        "summarize-two-gpus-a-table-each": Row(["summarize", str(SLICE), str(p["h100"])], status=0,
                                               says=("== h100-80gb-hbm3-cudnn91900\n", "== h200-cudnn91900\n")),
        "train-two-gpus-without-joint": Row([*train[:2], str(p["h100"]), "--quick", "--models", str(out / "m2")],
                                            says=("records of 2 GPU x cuDNN", "h100-80gb-hbm3-cudnn91900 (",
                                                  "h200-cudnn91900 (", "--joint"), unchanged=(out / "m2",)),
        "evaluate-two-gpus": Row(["evaluate", "--model", str(ENGINE_MODEL), "--data", str(SLICE), str(p["h100"]),
                                  "--out", str(out / "e3"), "--no-lono"], says=("records of 2 GPU x cuDNN",),
                                 unchanged=(out / "e3",)),
        "analyze-log-data-of-two-gpus": Row(["analyze-log", str(LOGS / "pytorch.log.gz"), "--data", str(SLICE),
                                             str(p["h100"])], says=("records of 2 GPU x cuDNN",)),
        "analyze-log-data-without-a-value": Row(["analyze-log", str(LOGS / "pytorch.log.gz"), "--data"],
                                                says=("--data", "expected at least one argument")),
        "sweep-resume-from-missing": Row(["sweep", "--out", str(out / "s"), "--grid", "3", "--suites", "none",
                                          "--resume-from", "/nope", "--dry-run"], says=("--resume-from /nope",),
                                         unchanged=(out / "s",)),
        "doctor-models-missing": Row(["doctor", "--models", "/nope"], says=("--models /nope", "no such directory")),
        "compile-model-missing": Row(["compile", "--model", "/nope"], says=("/nope: not a model directory",
                                                                            "no such directory")),
        "analyze-log-model-missing": Row(["analyze-log", str(LOGS / "pytorch.log.gz"), "--model", "/nope"],
                                         says=("/nope: not a model directory",)),
        # 4. Tracebacks.
        "report-records-of-suites-in-nhwc": Row(["report", "--data", str(p["nhwc-suites"]), "--out", str(out / "r")],
                                                status=0, says=("wrote",)),
        "grid-budgets-no-shape-fits": Row(["grid", "--count", "5", "--max-flops", "1"],
                                          says=("could not draw 5", "max_flops=1")),
        "cache-show-non-utf8-line": Row(["cache", "show", "--root", str(p["cache"])], status=0,
                                        says=("2 damaged line(s)", str(p["cache-file"])), unchanged=(p["cache"],)),
        # 5. Misleading errors.
        "predict-legacy-bfloat16": Row(["predict", *PROBLEM, "--space", "legacy", "--dtype", "bfloat16"],
                                       says=("dtype 'bfloat16' is not among", "legacy model")),
        "predict-legacy-float32-strict": Row(["predict", *PROBLEM, "--space", "legacy", "--dtype", "float32_strict"],
                                             says=("dtype 'float32_strict' is not among", "legacy model")),
        "predict-edited-feature-names": Row(["predict", *PROBLEM, "--space", "legacy", "--model",
                                             str(p["edited-names"])],
                                            says=("feature_names differ", "feature 3 is 'height'")),
        "analyze-log-dev-null": Row(["analyze-log", "/dev/null"], says=("/dev/null: not a regular file",)),
        # 6. Counts validated before the work.
        "sweep-dry-run-ten-million-grid-shapes": Row(["sweep", "--out", str(out / "s"), "--grid", "10000000",
                                                      "--dry-run"], says=("--grid 10000000", "100,000"),
                                                     unchanged=(out / "s",)),
        # 7.
        "version": Row(["--version"], status=0, says=(f"algosel {__version__}",)),
    }  # fmt: skip
    shipped = shipped_path("models", SHIPPED_NAMES[0])
    rows["report-into-a-shipped-model"] = Row(
        ["report", "--data", str(SLICE), "--out", str(shipped), "--overwrite"],
        says=("--out", "shipped with algosel"),
        unchanged=(shipped,),
    )
    rows["evaluate-into-a-shipped-model"] = Row(
        ["evaluate", "--model", str(shipped), "--data", str(SLICE), "--out", str(shipped), "--overwrite", "--no-lono"],
        says=("--out", "--replace-shipped"),
        unchanged=(shipped,),
    )
    rows["layers-into-the-shipped-models"] = Row(["layers", "--model", "x.py:f", "--input", "1,3,8,8", "--out",
                                                  str(shipped.parent / "layers.csv")], says=("shipped with algosel",),
                                                 unchanged=(shipped.parent,))  # fmt: skip
    for name in SHIPPED_NAMES:  # the default --models of a checkout is the shipped models' folder
        rows[f"train-force-shipped-{name}"] = Row(
            ["train", str(SLICE), "--quick", "--no-progress", "--force", "--name", name],
            says=(name, "shipped", "--replace-shipped"),
            unchanged=(REPO / "models" / name, shipped_path("models", name)),
        )
    return rows


ROW_NAMES = list(_rows(defaultdict(lambda: Path("/unused"))))


@pytest.fixture(scope="module")
def ran(paths) -> dict[str, Row]:
    """Every row, each in a process of its own (forked from one that imported the libraries once: tests/cli_rows.py)."""
    return run_rows(_rows(paths), hashes)


@pytest.mark.parametrize("name", ROW_NAMES)
def test_command_line_row(ran: dict[str, Row], name: str) -> None:
    row = ran[name]
    if row.argv[0] == "--version":  # no command name: the version line on stdout, nothing on stderr
        assert row.result.returncode == 0 and row.result.stdout.strip() == f"algosel {__version__}"
        assert row.result.stderr == ""
        return
    check_command_row(row, hashes)


def test_the_shipped_models_are_found_in_the_package() -> None:
    """The rows above cover every shipped model, whatever models ship."""
    assert SHIPPED_NAMES and all((shipped_path("models", n) / "manifest.json").is_file() for n in SHIPPED_NAMES)


def test_the_ten_million_shape_dry_run_is_refused_at_once(ran: dict[str, Row]) -> None:
    """Before: minutes of silence while ten million shapes were drawn."""
    assert ran["sweep-dry-run-ten-million-grid-shapes"].seconds < 30


def test_layers_records_a_reflect_padded_conv_as_the_problem_it_runs(tmp_path: Path) -> None:
    """``padding_mode='reflect'`` (or replicate, circular): PyTorch pads the input first and convolves with padding
    0, which the hook sees; the layers file records that problem (h=20, pad=0), not h=16, pad=2. 'same' padding
    with an even kernel pads 1 + 2 rows."""
    net = tmp_path / "net.py"
    net.write_text(
        "import torch.nn as nn\n\n\ndef make_model():\n"
        "    return nn.Sequential(nn.Conv2d(3, 8, 5, padding=2, padding_mode='reflect'),\n"
        "                         nn.Conv2d(8, 8, 4, padding='same', padding_mode='replicate'),\n"
        "                         nn.Conv2d(8, 8, 3, padding=1))\n"
    )
    out = tmp_path / "layers.csv"
    # in this process (what is tested is the file it writes; the command's own process is test_layers.py's)
    row = run_in_process(Row(["layers", "--model", f"{net}:make_model", "--input", "2,3,16,16", "--out", str(out)],
                             status=0, says=("3 conv calls",)))  # fmt: skip
    check_command_row(row, hashes)
    frame = pd.read_csv(out)
    assert frame[["h", "w", "pad_h", "pad_w"]].values.tolist() == [[20, 20, 0, 0], [19, 19, 0, 0], [16, 16, 1, 1]]


def test_predict_takes_a_problem_or_its_fields_not_both() -> None:
    import algosel
    from algosel.problem import ConvProblem

    problem = ConvProblem(n=32, c=64, k=64, h=56, w=56, r=3, s=3)
    with pytest.raises(ValueError, match=r"^predict\(\) takes a ConvProblem or its fields, not both \(got a problem "
                                         r"and n=1\); pass problem.replace"):  # fmt: skip
        algosel.predict(problem, n=1, live=False)
    assert algosel.predict(problem.replace(n=1), live=False)[0].candidate_id


def test_a_shipped_model_is_replaced_only_when_a_flag_names_it(slice_model, tmp_path: Path) -> None:
    """Through the Python API too: ``Selector.save(replace=True)`` over a shipped model is refused, nothing touched."""
    from algosel.learn.artifact import SelectorError
    from algosel.learn.selector import Selector

    target = shipped_path("models", SHIPPED_NAMES[0])
    before = hashes(target)
    with pytest.raises(SelectorError, match=r"a model shipped with algosel; .*--replace-shipped"):
        Selector.load(slice_model[0]).save(target, replace=True)
    assert hashes(target) == before
