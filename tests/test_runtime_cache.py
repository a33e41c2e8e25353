"""The runtime's persistent cache: shared across instances and processes, safe against damage and foreign files,
and careful with serialized plans; `algosel cache` and `algosel build-ext` on a CPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from algosel.candidates import DEFAULT_ID, DecisionSource
from algosel.cli import main
from algosel.runtime.cache import RuntimeCache, cache_folders
from algosel.runtime.decision import Decision

ENV = {"gpu_name": "NVIDIA H200", "cudnn": 91900, "torch": "2.11.0", "cudnn_frontend": "1.32.0", "model": "abc"}
KEY = "n8_c64_k64_h14_w14_r3_s3_p1x1_u1x1_d1x1_g1_float16_nhwc_fwd"


def _decision(key=KEY, cid="cudnn:eng0_k2=1", source="measured"):
    return Decision(key, cid, source, "", {cid: 0.01, DEFAULT_ID: 0.02})


def test_a_decision_is_read_by_a_new_instance(tmp_path):
    RuntimeCache(tmp_path, ENV).put(_decision())
    got = RuntimeCache(tmp_path, ENV).get(KEY)
    assert got == _decision()
    assert RuntimeCache(tmp_path, dict(ENV, cudnn=90100)).get(KEY) is None  # another environment: another folder


@pytest.mark.parametrize("source", list(DecisionSource))
def test_a_decision_source_is_written_as_its_plain_value(tmp_path, source):
    """The vocabulary is a type in the code and the same strings on disk: a cache written before it reads the same."""
    cache = RuntimeCache(tmp_path, ENV)
    cache.put(_decision(source=source))
    assert f'"source": "{source.value}"' in cache.decisions_path.read_text()
    got = RuntimeCache(tmp_path, ENV).get(KEY)
    assert got.source == source and str(source) == source.value


def test_decisions_appended_by_another_process_are_seen_on_a_miss(tmp_path):
    mine = RuntimeCache(tmp_path, ENV)
    mine.put(_decision())
    code = (
        "import sys; from algosel.runtime.cache import RuntimeCache; from algosel.runtime.decision import Decision\n"
        f"c = RuntimeCache(sys.argv[1], {ENV!r})\n"
        "for i in range(50):\n"
        "    c.put(Decision(f'other{i}', 'gemm:fc', 'measured', '', {}))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert mine.get("other49") is not None
    lines = mine.decisions_path.read_text().splitlines()
    assert len(lines) == 1 + 1 + 150  # one header, no line lost or torn by concurrent appends
    assert len(mine.decisions()) == 51


def test_a_damaged_line_is_skipped_with_one_warning(tmp_path):
    cache = RuntimeCache(tmp_path, ENV)
    cache.put(_decision())
    with cache.decisions_path.open("a") as fh:
        fh.write('{"problem": "cut in ha\n')
        fh.write('{"problem": "also", "nonsense": 1}\n')
    fresh = RuntimeCache(tmp_path, ENV)
    with pytest.warns(RuntimeWarning, match="skipped 2 damaged line"):
        assert fresh.get(KEY) == _decision()


def test_a_foreign_file_is_set_aside_and_rebuilt(tmp_path):
    cache = RuntimeCache(tmp_path, ENV)
    cache.folder.mkdir(parents=True)
    cache.decisions_path.write_text("this is not a cache\n")
    with pytest.warns(RuntimeWarning, match="set aside"):
        assert cache.get(KEY) is None
    assert cache.decisions_path.with_suffix(".jsonl.bad").is_file()
    cache.put(_decision())
    assert RuntimeCache(tmp_path, ENV).get(KEY) == _decision()


def test_plans_round_trip_with_their_tensor_uids(tmp_path):
    os.chmod(tmp_path, 0o700)
    cache = RuntimeCache(tmp_path, ENV)
    cache.put_plan(KEY, "cudnn:eng0", (3, 1, 2), b"blob bytes")
    assert RuntimeCache(tmp_path, ENV).get_plan(KEY, "cudnn:eng0") == ((3, 1, 2), b"blob bytes")
    assert cache.get_plan(KEY, "cudnn:other") is None


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_plans_are_not_loaded_from_a_folder_others_can_write(tmp_path):
    os.chmod(tmp_path, 0o700)
    RuntimeCache(tmp_path, ENV).put_plan(KEY, "cudnn:eng0", (1, 2, 3), b"blob")
    os.chmod(tmp_path / "runtime", 0o777)
    cache = RuntimeCache(tmp_path, ENV)
    with pytest.warns(RuntimeWarning, match="writable by its group or by others"):
        assert cache.get_plan(KEY, "cudnn:eng0") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get_plan(KEY, "cudnn:eng0") is None  # warned once


def test_cache_command_shows_and_clears(tmp_path, capsys):
    RuntimeCache(tmp_path, ENV).put(_decision())
    RuntimeCache(tmp_path, ENV).put(_decision("k2", DEFAULT_ID, "records"))
    assert main(["cache", "show", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 decisions" in out and "NVIDIA H200" in out and "pytorch (pass-through)" in out
    assert main(["cache", "clear", "--root", str(tmp_path)]) == 0
    assert cache_folders(tmp_path) == []
    assert main(["cache", "show", "--root", str(tmp_path)]) == 0
    assert "no runtime decisions" in capsys.readouterr().out


def test_build_ext_says_why_it_cannot_build_here(capsys):
    import torch

    if torch.version.cuda:
        pytest.skip("a CUDA build of torch: the extension may build here")
    assert main(["build-ext"]) == 2
    err = capsys.readouterr().err
    assert "CPU build" in err and len(err.strip().splitlines()) == 1


def test_predict_measure_needs_a_gpu_and_a_count():
    import torch

    import algosel

    shape = dict(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    with pytest.raises(ValueError, match="non-negative integer"):
        algosel.predict(**shape, measure=-1)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            algosel.predict(**shape, measure=2)
    assert all(c.measured_time_ms is None for c in algosel.predict(**shape, top_k=2))


def test_predict_measure_times_pytorchs_default_first_and_sorts_by_measured_time():
    """The measured shortlist checks every candidate against the first one measured: PyTorch's default goes first,
    wherever the model ranked it; the answer is sorted by measured time, untimed last."""
    import algosel

    seen = []

    class Measurer:
        def measure_candidates(self, problem, pairs, source, deadline_s=None):
            seen.extend(c.candidate_id for _, c in pairs)
            rows = []
            for i, cid in enumerate(seen):  # the default 0.4 ms, the next one fails, the others 0.1 ms a place
                failed = i == 1 and cid != DEFAULT_ID
                rows.append({"candidate_id": cid, "status": "run_failed" if failed else "ok",
                             "time_ms_median": 0.4 if cid == DEFAULT_ID else 0.1 * i})  # fmt: skip
            return rows

    shape = dict(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
    got = algosel.predict(**shape, measure=4, top_k=5, live=False, measurer=Measurer())
    assert seen[0] == DEFAULT_ID and len(seen) == len(set(seen)) >= 4
    assert {c.candidate_id for c in got} == set(seen)
    timed = [c.measured_time_ms for c in got if c.measured_time_ms is not None]
    assert timed == sorted(timed) and len(timed) == len(seen) - 1
    assert got[-1].candidate_id == seen[1] and got[-1].measured_time_ms is None  # the failed one: last, untimed
