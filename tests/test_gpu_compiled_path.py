"""GPU tests of the runtime's compiled path: cuDNN plans run in C++ forward and backward, the C++ dispatch table
runs planned calls (PyTorch's, cuDNN's and GEMM routes) with the results of Python's, leaves tensor subclasses to
Python and is F.conv2d in the hook's thread only; cached decisions and plans need no planning; double backward.

Skipped without CUDA. The compiled path must be built first (``algosel build-ext``); its tests fail, rather than
skip, where ``ALGOSEL_REQUIRE_NATIVE=1`` says it should be there.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support import AT_ONCE, GPU_ONLY, close, cudnn_model, directions, prefer

from algosel.runtime.standins import Preferring

pytestmark = GPU_ONLY


def _step(model, x):
    y = model(x)
    g = torch.ones_like(y)
    grads = torch.autograd.grad(y, [x, *model.parameters()], g)
    return y, grads


def test_the_compiled_path_runs_cudnn_plans_forward_and_backward(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = cudnn_model()
    y_ref, g_ref = _step(model, x)
    ex = hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path)
    hook.reset_stats()
    with hook.enabled(ex):
        y, grads = _step(model, x)
    kinds = {r.kind for r in ex.route_list()}
    assert kinds == {"compiled"}, kinds
    assert close(y, y_ref) and all(close(a, b) for a, b in zip(grads, g_ref))
    assert hook.stats().get("cudnn", 0) >= 5, hook.stats()  # 2 forwards, 1 dx (the first conv's x needs one), 2 dw


class PassingThrough(Preferring):
    """Every candidate predicted as fast as PyTorch's default: every convolution passes through."""

    def __init__(self, sel, space: str):
        super().__init__(sel, space, recorded=False, host_costs=False)

    def predicted_time_ms(self, problem, candidate_ids, rows=None):
        return dict.fromkeys(candidate_ids, 1.0)


def test_the_dispatch_table_runs_planned_calls_in_cpp_with_pytorchs_results(shipped, ext, tmp_path, monkeypatch):
    from algosel.runtime import hook

    torch.manual_seed(0)
    # Strict float32 (no TF32), so that any algorithm PyTorch picks gives float32's result within rounding.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    x = torch.randn(4, 16, 20, 20, device="cuda", requires_grad=True)
    w = torch.randn(32, 16, 3, 3, device="cuda", requires_grad=True)
    b = torch.randn(32, device="cuda")
    ref = F.conv2d(x, w, b, 1, 1)
    (ref_gx,) = torch.autograd.grad(ref.sum(), x)
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    hook.reset_stats()
    with hook.enabled(ex):
        outs = [F.conv2d(x, w, b, 1, 1) for _ in range(3)]  # the first plans, the next two run in C++
        y = F.conv2d(x, w, b, (1, 1), [1, 1])  # another spelling of the same signature
        with torch.autocast("cuda", dtype=torch.float16):
            half = F.conv2d(x, w, b, 1, 1)  # autocast is part of the signature: planned apart
    assert ex.dispatch.fast_run is not None and len(ex.dispatch_table()) == 2, len(ex.dispatch_table())
    slots = [s for r in ex.route_list() for _, s in r.slots]
    assert sorted(slots) == [0, 1]  # one slot each, the two spellings sharing theirs
    assert sum(ex.dispatch_table().calls(s) for s in slots) == 3  # calls 2, 3 and 4 ran in C++
    # The first call ran PyTorch's conv2d from Python, the next three from C++: the same plan, the same bits.
    assert all(torch.equal(o, outs[0]) for o in outs) and torch.equal(y, outs[0])
    assert close(outs[0], ref, 1e-5)
    assert half.dtype == torch.float16 and close(half, ref, 1e-2)
    (gx,) = torch.autograd.grad(outs[-1].sum(), x)
    assert close(gx, ref_gx, 1e-5)
    stats = hook.stats()
    assert sum(stats.values()) == 15 and all(k.startswith("pytorch:") for k in stats), stats  # 5 calls x 3 dirs


def test_the_dispatch_table_leaves_tensor_subclasses_to_python(shipped, ext, tmp_path):
    from algosel.runtime import hook

    seen = []

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(2, 8, 10, 10, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(ex):
        F.conv2d(x, w)
        F.conv2d(x, w)  # held by the table now
        out = F.conv2d(x.as_subclass(Traced), w)
    assert isinstance(out, Traced) and seen  # its __torch_function__ ran: the call went through Python


def test_the_dispatch_table_runs_compiled_routes(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = cudnn_model()
    y_ref, g_ref = _step(model, x)
    ex = hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(ex):
        _step(model, x)
        hook.reset_stats()
        y, grads = _step(model, x)  # every call from the table
    held = [(r.kind, ex.dispatch_table().calls(s)) for r in ex.route_list() for _, s in r.slots]
    assert held and all(kind == "compiled" and calls == 1 for kind, calls in held), held
    assert close(y, y_ref) and all(close(a, b) for a, b in zip(grads, g_ref))
    assert hook.stats().get("cudnn", 0) >= 5, hook.stats()


def test_f_conv2d_is_the_compiled_dispatch_while_the_hook_is_on_in_this_thread_only(shipped, ext, tmp_path):
    import threading

    from algosel.runtime import hook

    x, w = torch.randn(2, 8, 12, 12, device="cuda"), torch.randn(8, 8, 3, 3, device="cuda")
    ex = hook.Executor(**AT_ONCE, selector=PassingThrough(shipped, "cudnn"), cache=tmp_path)
    other = {}

    def elsewhere():  # a thread outside the block: F.conv2d is patched process-wide, but routes nothing here
        hook.reset_stats()
        other["y"] = F.conv2d(x, w, padding=1)
        other["stats"] = hook.stats()

    with hook.enabled(ex):
        assert F.conv2d is ext.conv2d
        F.conv2d(x, w, padding=1)
        hook.reset_stats()
        y = F.conv2d(x, w, None, padding=1)  # keywords too
        held, from_table = hook.stats(), ex.dispatch_table().calls(0)
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    assert F.conv2d is torch.conv2d
    assert sum(held.values()) == 1 and from_table == 1, held
    assert other["stats"] == {} and torch.equal(other["y"], y)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_dispatch_table_runs_gemm_routes_as_gemm_conv_does(shipped, ext, tmp_path, layout):
    from algosel.runtime import hook
    from algosel.runtime.call import call_problem
    from algosel.spaces.gemm import gemm_conv

    torch.manual_seed(0)
    cases = [(torch.randn(16, 64, 6, 6), torch.randn(96, 64, 6, 6))]  # fully connected mode
    if layout == "nhwc":
        cases.append((torch.randn(8, 64, 14, 14), torch.randn(32, 64, 1, 1)))  # 1x1, one product in NHWC
    ex = hook.Executor(**AT_ONCE, selector=prefer(shipped, "gemm"), cache=tmp_path)
    for x_cpu, w_cpu in cases:
        x, w, b = x_cpu.cuda().half(), w_cpu.cuda().half(), torch.randn(w_cpu.shape[0], device="cuda").half()
        if layout == "nhwc":
            x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        for t in (x, w, b):
            t.requires_grad_()
        with hook.enabled(ex):
            first = F.conv2d(x, w, b)
            again = F.conv2d(x, w, b)  # from the table
        problem, _ = call_problem(x, w, 1, 0, 1, 1, torch.float16)
        expected = gemm_conv(problem, x, w, b)
        assert torch.equal(first, expected) and torch.equal(again, expected)
        assert again.stride() == expected.stride()
        dy = torch.randn_like(expected)
        grads = torch.autograd.grad(again, (x, w, b), dy)
        grads_ref = torch.autograd.grad(F.conv2d(x, w, b), (x, w, b), dy)
        assert all(g.shape == r.shape and close(g, r) for g, r in zip(grads, grads_ref))
        with hook.enabled(ex):
            y = F.conv2d(x, w, b)
        assert torch.equal(torch.relu_(y), torch.relu(expected))  # an in-place op on the output is allowed
    held = [(r.kind, ex.dispatch_table().calls(s)) for r in ex.route_list() for _, s in r.slots]
    assert len(held) == len(cases) and all(kind == "gemm" and calls == 2 for kind, calls in held), held


def test_cached_decisions_and_plans_need_no_planning_in_a_new_executor(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = cudnn_model()
    first = hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(first):
        _step(model, x)
    second = hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path)
    with hook.enabled(second):
        y, grads = _step(model, x)
    plans = [second.plans.get(p) for r in second.route_list() for p in directions(second, r)]
    assert plans and all(p.runner is None and p.native_id >= 0 for p in plans if p.path == "cudnn")
    y_ref, g_ref = _step(model, x)
    assert close(y, y_ref) and all(close(a, b) for a, b in zip(grads, g_ref))


def test_double_backward_through_the_compiled_path(shipped, ext, tmp_path):
    from algosel.runtime import hook

    model, x = cudnn_model(torch.float32, channels_last=False)

    def second(m):
        (gx,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), list(m.parameters()))

    ref = second(model)
    with hook.enabled(hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path)):
        got = second(model)
    assert all(close(a, b, 1e-2) for a, b in zip(got, ref))


def test_double_backward_through_the_compiled_gemm_route(shipped, ext, tmp_path, monkeypatch):
    from algosel.runtime import hook

    # float32 GEMM routes need cuBLAS's TF32 switch as the records measured them (TF32, as the convolutions' default)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.Tanh(), torch.nn.Conv2d(32, 8, 7)).cuda()
    model = model.to(memory_format=torch.channels_last)  # 1x1 in NHWC, then fully connected mode
    x = torch.randn(4, 16, 7, 7, device="cuda").contiguous(memory_format=torch.channels_last).requires_grad_()

    def second(m):
        (gx,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), list(m.parameters()))

    ref = second(model)
    ex = hook.Executor(**AT_ONCE, selector=prefer(shipped, "gemm"), cache=tmp_path)
    with hook.enabled(ex):
        second(model)  # plans
        got = second(model)  # from the table
    assert {r.kind for r in ex.route_list()} == {"gemm"}
    assert all(close(a, b, 1e-2) for a, b in zip(got, ref))
