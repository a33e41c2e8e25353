"""GPU tests: every candidate space on real shapes, the timer, and a tiny sweep end to end.

Skipped without CUDA; run on the GPU machine with ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch
from support import GPU_ONLY

from algosel.candidates import DEFAULT_ID
from algosel.operands import TOLERANCE, make_operands, math_mode, reference, relative_error
from algosel.problem import ConvProblem
from algosel.runtime.standins import CudaWithoutTrials
from algosel.spaces import make_space

#: The hook's routes exercised for themselves: switched at the first call, no step trial.
AT_ONCE = {"probe_calls": 0, "device_probe": CudaWithoutTrials()}

pytestmark = GPU_ONLY

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


@pytest.mark.parametrize("dtype", ["float32", "float16", "float32_strict"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", SHAPES, ids=["3x3", "depthwise", "odd", "fc", "pointwise"])
def test_legacy_algorithms_run_correctly(shape, dtype, direction, layout):
    """Every legacy (algorithm, math type) pair that builds computes the reference result; the v7 heuristic's
    first choice builds."""
    from algosel.spaces.base import CandidateError
    from algosel.spaces.cudnn_legacy import ALGOS, DTYPE_MATH, algo_enum_name

    problem = ConvProblem(**shape, dtype=dtype, layout=layout, direction=direction)
    space = make_space("legacy")
    assert space.available() is None
    with math_mode(problem):
        ops = make_operands(problem, "cuda", torch.Generator("cuda").manual_seed(1))
        ref = reference(problem, ops)
        candidates = space.enumerate(problem)
        assert len(candidates) >= len(ALGOS[direction]) * len(DTYPE_MATH[dtype])
        assert candidates[0].rank_a == 0, "the v7 heuristic listed at least one algorithm"
        built, errors = 0, {}
        for cand in candidates:
            assert algo_enum_name(direction, cand.engine_id).endswith(cand.name.split(".")[0])
            try:
                prepared = space.prepare(problem, cand)
            except CandidateError as exc:
                assert exc.status == "build_failed"
                assert cand.rank_a != 0, f"v7's first choice {cand.name} does not build: {exc.reason}"
                continue
            built += 1
            out = prepared.run(ops)
            torch.cuda.synchronize()
            errors[cand.name] = relative_error(out, ref)
            prepared.close()
    assert built >= 1
    wrong = {n: e for n, e in errors.items() if not e <= TOLERANCE[dtype]}
    assert not wrong, f"legacy algorithms off the reference: {wrong}"


def test_legacy_sweep_records_the_v7_heuristic(tmp_path):
    from algosel.measure.sweep import SweepCase, Sweeper, run_sweep
    from algosel.measure.timing import CudaEventTimer
    from algosel.records import load_records
    from algosel.records.analysis import per_problem
    from algosel.records.environment import collect_environment

    cases = [SweepCase(ConvProblem(**SHAPES[0], dtype="float16", layout="nhwc"), "test")]
    sweeper = Sweeper([make_space("legacy")], CudaEventTimer(budget_ms=2), collect_environment())
    assert run_sweep(cases, sweeper, tmp_path, progress=False).measured == 1
    frame, _ = load_records(tmp_path)
    assert set(frame["space"]) == {"legacy"} and (frame["rank_a"] == 0).sum() == 3
    table = per_problem(frame)
    assert (table["heuristic_a"] >= table["best"]).all() and table["heuristic_a"].notna().all()


def test_timer_sees_device_time_not_host_time():
    from algosel.measure.timing import CudaEventTimer

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
    from algosel.measure.sweep import SweepCase, Sweeper, run_sweep
    from algosel.measure.timing import CudaEventTimer
    from algosel.records import load_records
    from algosel.records.analysis import summarize
    from algosel.records.environment import collect_environment

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
    # Candidates far slower than the best so far (by their warm-up time: > 4x) are cut short to 1 or 3 repeats; the
    # rest get at least 5. How many are cut depends on the shapes' spread of times, so check the rule per row: a cut
    # row is well slower than its problem's best, and every problem has fully repeated rows.
    assert (ok["time_ms_median"] > 0).all() and (ok["repeats"] >= 1).all()
    best = ok.groupby("problem_key")["time_ms_median"].transform("min")
    cut = ok["repeats"] < 5
    assert (ok.loc[cut, "time_ms_median"] > 2 * best[cut]).all()
    assert (ok.groupby("problem_key")["repeats"].max() >= 5).all()
    assert set(ok["space"]) == {"cudnn", "gemm", "pytorch"}
    assert "H200" in next(iter(envs.values()))["gpu_name"] or next(iter(envs.values()))["sm_count"] > 0
    assert "heuristic_a" in summarize(frame)
    # Resuming measures nothing new.
    assert run_sweep(cases, sweeper, tmp_path, progress=False).measured == 0


def test_predict_ranks_the_live_cudnn_list_and_its_pick_runs_correctly():
    """The shipped H200 model ranks cuDNN's live candidate list; the chosen candidate computes the right result."""
    from algosel.learn.models import default_model_dir
    from algosel.runtime.api import predict

    model = default_model_dir()
    for problem in (
        ConvProblem(**SHAPES[0], dtype="float16", layout="nhwc", direction="bwd_filter"),
        ConvProblem(**SHAPES[3], dtype="float16", direction="fwd"),
    ):
        choices = predict(problem, model=model, top_k=3, live=True)
        assert choices[0].source == "live" and len(choices) == 3
        live_ids = {
            c.candidate_id for name in ("gemm", "pytorch", "cudnn") for c in make_space(name).enumerate(problem)
        }
        assert {c.candidate_id for c in choices} <= live_ids
        best = choices[0]
        space = make_space(best.space)
        cand = next(c for c in space.enumerate(problem) if c.candidate_id == best.candidate_id)
        with math_mode(problem):
            ops = make_operands(problem, "cuda", torch.Generator("cuda").manual_seed(2))
            out = space.prepare(problem, cand).run(ops)
            torch.cuda.synchronize()
            assert relative_error(out, reference(problem, ops)) <= TOLERANCE[problem.dtype]
    # Fully connected mode: the model must pick GEMM lowering (it is 30x+ faster than any engine config there).
    assert (
        predict(ConvProblem(**SHAPES[3], dtype="float16", direction="bwd_data"), model=model, live=True)[0].space
        == "gemm"
    )


HOOK_CASES = [
    # (x shape, conv kwargs, dtype, channels_last)
    ((8, 64, 28, 28), dict(out_channels=64, kernel_size=3, padding=1), torch.float16, True),
    ((8, 64, 28, 28), dict(out_channels=128, kernel_size=3, padding=1, stride=2), torch.float32, False),
    ((4, 96, 30, 22), dict(out_channels=96, kernel_size=5, padding="same", groups=96), torch.float16, False),
    ((64, 256, 6, 6), dict(out_channels=512, kernel_size=6), torch.float16, False),  # fully connected mode
    ((16, 128, 14, 14), dict(out_channels=256, kernel_size=1), torch.float32, True),  # pointwise
    ((2, 17, 19, 23), dict(out_channels=33, kernel_size=3, dilation=2, bias=False), torch.float32, False),
]


@pytest.mark.parametrize("verify", [0, 3], ids=["rule", "verify"])
@pytest.mark.parametrize(("shape", "kwargs", "dtype", "channels_last"), HOOK_CASES)
def test_hook_matches_pytorch_forward_and_backward_on_gpu(shape, kwargs, dtype, channels_last, verify, tmp_path):
    from algosel.runtime import hook

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(shape[1], **kwargs).cuda().to(dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    if channels_last:
        conv = conv.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    y_ref = conv(x)
    g = torch.randn_like(y_ref)
    grads_ref = torch.autograd.grad(y_ref, [x, *conv.parameters()], g)
    hook.reset_stats()
    with hook.enabled(hook.Executor(verify=verify, cache=tmp_path, **AT_ONCE)):
        y = conv(x)
        grads = torch.autograd.grad(y, [x, *conv.parameters()], g)
    tol = 5e-3  # TF32 is allowed for float32, as PyTorch's default
    assert relative_error(y, y_ref.double()) <= tol
    for a, b in zip(grads, grads_ref):
        assert relative_error(a, b.double()) <= tol
    assert sum(hook.stats().values()) == 3 and not any(k.startswith("fallback") for k in hook.stats()), hook.stats()


def test_hook_uses_each_path_and_autocast_on_gpu(tmp_path):
    from algosel.runtime import hook

    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 256, 28)
    ).cuda()  # the second conv is in fully connected mode
    x = torch.randn(32, 64, 28, 28, device="cuda")
    hook.reset_stats()
    with hook.enabled(hook.Executor(verify=3, cache=tmp_path, **AT_ONCE)), torch.autocast("cuda", dtype=torch.float16):
        y = model(x)
        y.float().sum().backward()
    s = hook.stats()
    assert y.dtype == torch.float16
    assert s.get("gemm", 0) == 3, s  # the fully connected conv, all three directions: measured far faster
    assert s.get("cudnn", 0) + sum(v for k, v in s.items() if k.startswith("pytorch:")) == 2, s  # first conv: no dx


def test_hook_passes_bad_input_to_pytorch_on_gpu():
    from algosel.runtime import hook

    x, w = torch.randn(1, 4, 5, 5, device="cuda"), torch.randn(6, 4, 3, 3)
    with pytest.raises(RuntimeError) as expected:
        hook.original_conv2d(x, w)
    with hook.enabled(), pytest.raises(RuntimeError) as got:
        torch.nn.functional.conv2d(x, w)
    assert str(got.value) == str(expected.value)


def test_predict_legacy_live_names_an_algorithm_that_runs_correctly():
    from algosel.runtime.api import predict
    from algosel.spaces.cudnn_legacy import CudnnLegacySpace

    problem = ConvProblem(**SHAPES[0], dtype="float16", direction="bwd_data")
    choices = predict(problem, space="legacy", live=True, top_k=3)
    assert choices[0].source == "live" and choices[0].cudnn_algo.startswith("CUDNN_CONVOLUTION_BWD_DATA_ALGO_")
    assert choices[0].cudnn_math_type in ("CUDNN_TENSOR_OP_MATH", "CUDNN_DEFAULT_MATH", "CUDNN_FMA_MATH")
    space = CudnnLegacySpace()
    cand = next(c for c in space.enumerate(problem) if c.candidate_id == choices[0].candidate_id)
    with math_mode(problem):
        ops = make_operands(problem, "cuda", torch.Generator("cuda").manual_seed(2))
        ref = reference(problem, ops)
        prepared = space.prepare(problem, cand)
        out = prepared.run(ops)
        torch.cuda.synchronize()
    assert relative_error(out, ref) <= TOLERANCE["float16"]


def test_analyze_log_measures_problems_the_records_lack(capsys):
    from pathlib import Path

    from algosel.cli import main

    log = Path(__file__).parent / "fixtures" / "cudnn_logs" / "pytorch-unrecorded.log.gz"
    assert main(["analyze-log", str(log), "--measure"]) == 0
    out = capsys.readouterr().out
    assert "6 convolution calls" in out and "6 calls priced from records" in out


def _backward_thread() -> int:
    """The thread that computes a CUDA tensor's backward in a plain training step."""
    import threading

    from support import run_in_a_backward

    return run_in_a_backward(threading.get_ident, torch.device("cuda"))


def test_on_autograd_thread_runs_where_a_networks_backward_runs():
    import threading

    from algosel.runtime.autograd_thread import on_autograd_thread

    backward = _backward_thread()
    assert backward != threading.get_ident()  # autograd's device thread, not this one
    assert on_autograd_thread(threading.get_ident, torch.device("cuda")) == backward


def test_verify_mode_times_gradients_on_the_backwards_thread(tmp_path):
    """PyTorch's cuDNN plans are per thread: its default's timing of a gradient must build the plans the network's
    backward then uses (algosel.runtime.autograd_thread)."""
    import threading

    from algosel.runtime.executor import Executor
    from algosel.runtime.policy import DEFAULT_POLICY
    from algosel.runtime.verify import runtime_measurer

    sweeper, seen = runtime_measurer(DEFAULT_POLICY), {}

    class Recording:
        def measure_candidates(self, problem, *args, **kwargs):
            seen[problem.direction] = threading.get_ident()
            return sweeper.measure_candidates(problem, *args, **kwargs)

    ex = Executor(verify=3, cache=tmp_path, measurer=Recording())
    problem = ConvProblem(n=8, c=64, k=64, h=28, w=28, r=3, s=3, pad_h=1, pad_w=1)
    for p in problem.directions():
        times, _ = ex.verifier.time_candidates(p, [], torch.device("cuda"))
        assert times[DEFAULT_ID] > 0
    backward = _backward_thread()
    assert seen == {"fwd": threading.get_ident(), "bwd_data": backward, "bwd_filter": backward}
