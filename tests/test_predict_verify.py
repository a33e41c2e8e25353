"""``algosel.predict(verify=k)`` for any framework: on a device that can time, the model's top k and PyTorch's default
timed once per problem and environment, kept in the hook's persistent cache (which the hook reads too); offline the
model's answer as without it. On the CPU through the seams: a fake device that can time, a scripted measurer, a
cache object keyed by a stand-in environment."""

from __future__ import annotations

import math

import pytest

import algosel
from algosel.candidates import DEFAULT_ID
from algosel.cli import main
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.standins import FakeDevice, ScriptedMeasurer

ENV = {"gpu_name": "NVIDIA H200", "cudnn": 91900, "torch": "2.11.0", "cudnn_frontend": "1.32.0", "model": "abc"}
SHAPE = dict(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, dtype="float16", layout="nhwc")
CAN_TIME = FakeDevice(can_time=True)


def _times(cid: str) -> tuple[float, float] | None:
    """The default 0.40 ms, GEMM lowerings fail, every engine config a time of its own under the default's."""
    if cid == DEFAULT_ID:
        return 0.40, 20.0
    if cid.startswith("gemm:"):
        return None
    return 0.1 + (sum(map(ord, cid)) % 97) / 400, 22.0


def test_offline_verify_answers_as_the_model_alone_and_times_nothing(tmp_path):
    measurer = ScriptedMeasurer(_times)
    got = algosel.predict(**SHAPE, verify=3, top_k=3, live=False, measurer=measurer,
                          device_probe=FakeDevice(can_time=False), cache=RuntimeCache(tmp_path, ENV))  # fmt: skip
    assert got == algosel.predict(**SHAPE, top_k=3, live=False)
    assert measurer.timed == [] and all(c.measured_time_ms is None for c in got)


def test_verify_times_the_top_k_and_the_default_once_per_problem_and_environment(tmp_path):
    model_top = [c.candidate_id for c in algosel.predict(**SHAPE, top_k=5, live=False)]
    measurer = ScriptedMeasurer(_times)
    got = algosel.predict(**SHAPE, verify=3, top_k=5, live=False, measurer=measurer, device_probe=CAN_TIME,
                          cache=RuntimeCache(tmp_path, ENV))  # fmt: skip
    (asked,) = measurer.asked
    assert asked[0] == DEFAULT_ID  # the reference the others are checked against
    assert set(asked) == {*model_top[:3], DEFAULT_ID}
    timed = [c for c in got if c.measured_time_ms is not None]
    assert [c.measured_time_ms for c in timed] == sorted(c.measured_time_ms for c in timed)
    assert got[0].source == "measured" and got[0].measured_time_ms == min(_times(c)[0] for c in asked if _times(c))
    # a failed candidate: after the timed ones, without a time; then the rest of the model's top_k, untimed
    failed = [c for c in model_top[:3] if _times(c) is None]
    assert [c.candidate_id for c in got[len(timed) :]] == [*failed, *model_top[3:5]][: 5 - len(timed)]
    # a new process (a new cache object on the same folder): nothing timed again, the same answer
    again = ScriptedMeasurer(_times)
    assert algosel.predict(**SHAPE, verify=3, top_k=5, live=False, measurer=again, device_probe=CAN_TIME,
                           cache=RuntimeCache(tmp_path, ENV)) == got  # fmt: skip
    assert again.timed == []
    # another environment (another cuDNN): a folder of its own, timed there
    other = ScriptedMeasurer(_times)
    algosel.predict(**SHAPE, verify=3, live=False, measurer=other, device_probe=CAN_TIME,
                    cache=RuntimeCache(tmp_path, dict(ENV, cudnn=91000)))  # fmt: skip
    assert len(other.timed) == 1


def test_a_larger_k_times_only_what_is_new_with_the_default_again_as_the_reference(tmp_path):
    model_top = [c.candidate_id for c in algosel.predict(**SHAPE, top_k=4, live=False)]
    cache = RuntimeCache(tmp_path, ENV)
    algosel.predict(**SHAPE, verify=2, live=False, measurer=ScriptedMeasurer(_times), device_probe=CAN_TIME,
                    cache=cache)  # fmt: skip
    more = ScriptedMeasurer(_times)
    got = algosel.predict(**SHAPE, verify=4, top_k=5, live=False, measurer=more, device_probe=CAN_TIME, cache=cache)
    # (the model ranks PyTorch's default among the others: here in its top 4)
    assert more.asked == [[DEFAULT_ID, *(c for c in model_top[2:4] if c != DEFAULT_ID)]]
    timed = sum(_times(c) is not None for c in {*model_top, DEFAULT_ID})
    assert sum(c.measured_time_ms is not None for c in got) == timed
    decision = RuntimeCache(tmp_path, ENV).get(algosel.ConvProblem(**SHAPE).key)
    assert decision.by == "predict" and decision.source == "measured"
    assert set(decision.times_ms) == {*model_top, DEFAULT_ID}
    assert all(math.isinf(decision.times_ms[c]) for c in model_top if c.startswith("gemm:"))


def test_the_hook_runs_what_predict_measured_without_timing_it_again(tmp_path):
    """One cache, two users: the executor's verify mode takes predict's measurement of the problem as its own."""
    import torch

    from algosel.runtime.executor import Executor
    from algosel.runtime.standins import Preferring

    cache = RuntimeCache(tmp_path, ENV)
    measurer = ScriptedMeasurer(_times)
    got = algosel.predict(**SHAPE, verify=3, live=False, measurer=measurer, device_probe=CAN_TIME, cache=cache)
    hook_measurer = ScriptedMeasurer(_times)
    ex = Executor(selector=Preferring(algosel.runtime.api.shared_selector(), recorded=False), verify=3,
                  cache=cache, measurer=hook_measurer, device_probe=CAN_TIME, native=False)  # fmt: skip
    decision = ex.decide(algosel.ConvProblem(**SHAPE), torch.device("cpu"))
    assert hook_measurer.timed == []
    assert decision.source == "measured" and decision.candidate_id == got[0].candidate_id  # a gain that pays


def test_cache_show_lists_the_hook_s_decisions_and_predict_s_measurements(tmp_path, capsys):
    from algosel.runtime.decision import Decision

    cache = RuntimeCache(tmp_path, ENV)
    cache.put(Decision("k1", "cudnn:eng0", "measured", "", {"cudnn:eng0": 0.01, DEFAULT_ID: 0.02}))
    algosel.predict(**SHAPE, verify=2, live=False, measurer=ScriptedMeasurer(_times), device_probe=CAN_TIME,
                    cache=cache)  # fmt: skip
    assert main(["cache", "show", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 decisions of the hook {'measured': 1}, 1 problems measured by predict(verify=k)" in out


def test_the_legacy_space_times_its_algorithms_without_pytorch_s_default(tmp_path):
    measurer = ScriptedMeasurer(lambda cid: (0.3, 10.0))
    got = algosel.predict(**SHAPE, space="legacy", verify=2, live=False, measurer=measurer, device_probe=CAN_TIME,
                          cache=RuntimeCache(tmp_path, ENV))  # fmt: skip
    (asked,) = measurer.asked
    assert len(asked) == 2 and all(c.startswith("legacy:") for c in asked)
    assert got[0].measured_time_ms == 0.3 and got[0].cudnn_algo


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"verify": -1}, "predict(verify=...) must be a non-negative integer (candidates to time), got -1"),
    ({"verify": 2.5}, "got 2.5"),
    ({"verify": 2, "measure": 2}, "takes verify= or measure=, not both"),
])  # fmt: skip
def test_a_bad_verify_is_one_error_naming_it(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        algosel.predict(**SHAPE, **kwargs)
