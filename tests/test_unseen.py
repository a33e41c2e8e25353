"""The recorder of problems the runtime hook met without records: counts per shape, the merged layers file,
atomic writes, concurrent processes, the flush at exit, the environment variable, and `algosel sweep --layers` of
the result."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from forked import Forks

from algosel.cli import main
from algosel.measure.cases import build_cases
from algosel.measure.layers import LAYERS_COLUMNS, load_layers, write_layers
from algosel.problem import ConvProblem
from algosel.runtime.unseen import ENV_VAR, UnseenRecorder, recorder_for, recorder_from_env

P = ConvProblem(n=2, c=3, k=4, h=8, w=8, r=3, s=3, pad_h=1, pad_w=1)
Q = ConvProblem(n=2, c=3, k=8, h=8, w=6, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2)


def _calls(path: Path) -> dict[str, int]:
    frame = load_layers(path)
    return dict(zip(frame["layer"], frame["calls"]))


def test_counts_per_shape_whatever_the_dtype_layout_and_direction(tmp_path: Path) -> None:
    rec = UnseenRecorder(tmp_path / "unseen.csv", flush_at_exit=False)
    rec.add(P)
    rec.add(P.replace(dtype="float16", layout="nhwc"), calls=4)
    rec.add(P.replace(direction="bwd_filter"))
    rec.add(Q, calls=2)
    assert rec.pending == {P.shape_key: 6, Q.shape_key: 2}
    with pytest.raises(ValueError, match="calls must be >= 1, got 0"):
        rec.add(P, calls=0)


def test_flush_writes_a_layers_file_and_clears_the_counts(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "unseen.csv"
    rec = UnseenRecorder(path, flush_at_exit=False)
    assert rec.flush() is None and not path.exists(), "nothing pending: no file"
    rec.add(P, 3)
    rec.add(Q)
    assert rec.flush() == path
    assert rec.pending == {}
    frame = load_layers(path)
    assert list(frame.columns) == list(LAYERS_COLUMNS)
    assert list(frame["network"]) == ["unseen", "unseen"]
    assert list(frame["layer"]) == [P.shape_key, Q.shape_key] and list(frame["calls"]) == [3, 1]
    assert list(frame["size"]) == ["8x8", "8x6"]
    row = frame.iloc[1]
    assert ConvProblem(**{f: int(row[f]) for f in ("n", "c", "k", "h", "w", "r", "s")}).h == 8
    assert (row["stride_h"], row["pad_w"]) == (2, 1)
    assert sorted(p.name for p in path.parent.iterdir()) == ["unseen.csv"], "no temporary nor lock file left"


def test_flushes_merge_by_shape_and_keep_other_rows(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    # A file that also holds a network's layers: those rows are kept as they are.
    other = pd.DataFrame(
        [
            {
                "network": "mynet",
                "layer": "conv",
                **{f: getattr(P, f) for f in ("n", "c", "k", "h", "w", "r", "s")},
                "pad_h": 1,
                "pad_w": 1,
                "stride_h": 1,
                "stride_w": 1,
                "dilation_h": 1,
                "dilation_w": 1,
                "groups": 1,
                "size": "8x8",
                "calls": 5,
            }
        ]  # fmt: skip
    )
    write_layers(other, path)
    rec = UnseenRecorder(path, flush_at_exit=False)
    rec.add(P, 2)
    rec.flush()
    rec.add(Q)
    rec.add(P)
    rec.flush()
    frame = load_layers(path)
    assert list(zip(frame["network"], frame["layer"], frame["calls"])) == [
        ("mynet", "conv", 5),
        ("unseen", P.shape_key, 3),
        ("unseen", Q.shape_key, 1),
    ]


def test_a_corrupt_file_is_never_overwritten_and_the_counts_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    path.write_text("network,layer\nx,y\n")
    rec = UnseenRecorder(path, flush_at_exit=False)
    rec.add(P, 2)
    with pytest.raises(ValueError, match=r"unseen.csv is missing column"):
        rec.flush()
    assert path.read_text() == "network,layer\nx,y\n"
    assert rec.pending == {P.shape_key: 2}
    path.unlink()
    rec.flush()
    assert _calls(path) == {P.shape_key: 2}


@pytest.fixture(scope="module")
def workers():
    """Processes of tests/unseen_worker.py, each forked from one that imported it (tests/forked.py)."""
    with Forks("unseen_worker") as forks:
        yield forks


def test_two_processes_flushing_at_once_lose_no_count(tmp_path: Path, workers: Forks) -> None:
    path, start = tmp_path / "unseen.csv", tmp_path / "start"
    procs = [workers.start("flush", str(path), str(start), str(tag), cwd=tmp_path) for tag in (1, 2)]
    start.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    calls = _calls(path)
    shared = {ConvProblem(n=1, c=3, k=k, h=8, w=8, r=3, s=3).shape_key: 2 * 8 for k in range(1, 6)}
    own = {ConvProblem(n=1, c=3, k=100 + t, h=8, w=8, r=3, s=3).shape_key: 2 * 40 for t in (1, 2)}
    assert calls == {**shared, **own}
    assert len(load_layers(path)) == 7, "one row per shape"
    # and the result is a layers file the sweep takes: 7 shapes x 2 dtypes
    cases = build_cases(None, [], ["float32", "float16"], layers=[path])
    assert len(cases) == 14 and {c.source for c in cases} == {"layers:unseen"}


def test_the_counts_reach_the_file_when_the_process_exits(tmp_path: Path, workers: Forks) -> None:
    path = tmp_path / "unseen.csv"
    got = workers.run("at-exit", cwd=tmp_path, env={ENV_VAR: str(path)})
    assert got.returncode == 0, got.stderr
    assert _calls(path) == {ConvProblem(n=4, c=16, k=32, h=14, w=14, r=1, s=1).shape_key: 9}


def test_a_failed_flush_at_exit_is_one_line_not_a_traceback(tmp_path: Path, workers: Forks) -> None:
    path = tmp_path / "unseen.csv"
    path.write_text("garbage\n1\n")
    got = workers.run("at-exit-into", str(path), cwd=tmp_path)
    assert got.returncode == 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"algosel: could not record 1 unseen problem shape(s) in {path}")
    assert path.read_text() == "garbage\n1\n"


def test_recorder_from_env(tmp_path: Path) -> None:
    assert recorder_from_env({}) is None
    assert recorder_from_env({ENV_VAR: "  "}) is None
    rec = recorder_from_env({ENV_VAR: str(tmp_path / "u.csv")})
    assert rec is not None and rec.path == (tmp_path / "u.csv").resolve()
    assert recorder_from_env({ENV_VAR: str(tmp_path / "u.csv")}) is rec, "one recorder per file in a process"
    assert recorder_for(tmp_path / "u.csv") is rec
    assert recorder_for(tmp_path / "v.csv") is not rec


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_write_its_parents_counts(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    rec = UnseenRecorder(path, flush_at_exit=False)
    rec.add(P, 5)
    pid = os.fork()
    if pid == 0:  # the child: nothing pending, so its flush writes nothing
        code = 0 if rec.pending == {} and rec.flush() is None else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not path.exists()
    rec.flush()
    assert _calls(path) == {P.shape_key: 5}


def test_sweep_dry_run_of_a_recorded_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unseen.csv"
    rec = UnseenRecorder(path, flush_at_exit=False)
    rec.add(P)
    rec.add(Q, 3)
    rec.flush()
    argv = ["sweep", "--layers", str(path), "--dtypes", "float32", "--layouts", "nchw,nhwc", "--dry-run"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == "4 cases (0 from the grid, 4 from layers files)"


def test_the_layout_a_problem_ran_in_is_recorded_and_one_shape_in_two_layouts_is_two_rows(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    rec = UnseenRecorder(path, flush_at_exit=False)
    rec.add(P, 2)
    rec.add(P.replace(layout="nhwc"), 5)
    rec.flush()
    rec.add(P.replace(layout="nhwc"), 1)  # merged into its own row
    rec.flush()
    frame = load_layers(path)
    assert list(zip(frame["layout"], frame["calls"])) == [(P.layout, 2), ("nhwc", 6)]
