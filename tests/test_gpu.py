"""GPU tests: every candidate space on real shapes, the timer, and a tiny sweep end to end.

Skipped without CUDA; run on the GPU machine with ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch

from algosel.candidates import make_space
from algosel.operands import TOLERANCE, make_operands, math_mode, reference, relative_error
from algosel.problem import ConvProblem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPES = [
    dict(n=8, c=64, k=64, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1),  # ResNet-like 3x3
    dict(n=4, c=96, k=96, h=30, w=22, r=5, s=5, pad_h=2, pad_w=2, stride_h=2, stride_w=2, groups=96),  # depthwise
    dict(n=2, c=17, k=33, h=19, w=23, r=3, s=3, dilation_h=2, dilation_w=2),  # odd, dilated
    dict(n=64, c=256, k=512, h=6, w=6, r=6, s=6),  # fully connected mode
    dict(n=4, c=128, k=64, h=14, w=14, r=1, s=1),  # pointwise
]


def _check_space(space_name: str, problem: ConvProblem) -> tuple[int, int]:
    """Run every candidate of a space once; return (correct, total)."""
    space = make_space(space_name)
    assert space.available() is None
    with math_mode(problem):
        ops = make_operands(problem, "cuda", torch.Generator("cuda").manual_seed(1))
        ref = reference(problem, ops)
        candidates = space.enumerate(problem)
        correct = 0
        for cand in candidates:
            prepared = space.prepare(problem, cand)
            out = prepared.run(ops)
            torch.cuda.synchronize()
            correct += relative_error(out, ref) <= TOLERANCE[problem.dtype]
            prepared.close()
        space.release(problem)
    return correct, len(candidates)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", SHAPES[:3], ids=["3x3", "depthwise", "odd"])
def test_cudnn_engine_configs_run_correctly(shape, dtype, direction, layout):
    problem = ConvProblem(**shape, dtype=dtype, layout=layout, direction=direction)
    space = make_space("cudnn")
    candidates = space.enumerate(problem)
    assert candidates, "cuDNN offered no engine config"
    assert any(c.rank_a == 0 for c in candidates), "mode A's first choice is among the candidates"
    assert len({c.name for c in candidates}) == len(candidates), "deduplicated by name"
    assert all(c.engine_id >= 0 for c in candidates)
    space.release(problem)
    correct, total = _check_space("cudnn", problem)
    # Most configs must be right; a wrong one is recorded by the sweeper, but not the majority.
    assert correct >= max(1, total // 2), f"{correct}/{total} engine configs matched the reference"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", SHAPES[3:], ids=["fc", "pointwise"])
def test_gemm_lowering_correct_on_gpu(shape, dtype, direction, layout):
    problem = ConvProblem(**shape, dtype=dtype, layout=layout, direction=direction)
    assert _check_space("gemm", problem) == (1, 1)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("shape", SHAPES, ids=["3x3", "depthwise", "odd", "fc", "pointwise"])
def test_pytorch_default_correct_on_gpu(shape, direction):
    problem = ConvProblem(**shape, dtype="float16", direction=direction)
    assert _check_space("pytorch", problem) == (1, 1)


def test_timer_sees_device_time_not_host_time():
    from algosel.timing import CudaEventTimer

    timer = CudaEventTimer(budget_ms=5)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    m_big = timer.measure(lambda i: a @ a, "big")
    small = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    m_small = timer.measure(lambda i: small @ small, "small")
    assert not m_big.starved and not m_small.starved
    # 137 GFLOP at < 1000 TFLOP/s takes > 0.1 ms; a 64^3 product is launch-bound and tiny on the device.
    assert m_big.median_ms > 0.1
    assert m_small.median_ms < m_big.median_ms / 10
    assert m_small.host_overhead_us > 0


def test_tiny_sweep_end_to_end(tmp_path):
    from algosel.analysis import summarize
    from algosel.environment import collect_environment
    from algosel.records import load_records
    from algosel.sweep import SweepCase, Sweeper, run_sweep
    from algosel.timing import CudaEventTimer

    cases = [
        SweepCase(ConvProblem(**SHAPES[0], dtype="float16"), "test"),
        SweepCase(ConvProblem(**SHAPES[3], dtype="float32"), "test"),
    ]
    sweeper = Sweeper(
        [make_space(n) for n in ("cudnn", "gemm", "pytorch")], CudaEventTimer(budget_ms=2), collect_environment()
    )
    report = run_sweep(cases, sweeper, tmp_path, progress=False)
    assert report.measured == 2 and report.part is not None
    frame, envs = load_records(tmp_path)
    assert set(frame["direction"]) == {"fwd", "bwd_data", "bwd_filter"}
    ok = frame[frame["status"] == "ok"]
    assert (ok["time_ms_median"] > 0).all() and (ok["repeats"] >= 5).all()
    assert set(ok["space"]) == {"cudnn", "gemm", "pytorch"}
    assert "H200" in next(iter(envs.values()))["gpu_name"] or next(iter(envs.values()))["sm_count"] > 0
    assert "heuristic_a" in summarize(frame)
    # Resuming measures nothing new.
    assert run_sweep(cases, sweeper, tmp_path, progress=False).measured == 0
