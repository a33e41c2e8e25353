"""GPU tests of the runtime in whole networks: CUDA graph capture and replay, torch.compile, and the torchvision
networks that once crashed under the hook.

Skipped without CUDA. The compiled path must be built first (``algosel build-ext``); its tests fail, rather than
skip, where ``ALGOSEL_REQUIRE_NATIVE=1`` says it should be there.
"""

from __future__ import annotations

import pytest
import torch
from support import AT_ONCE, GPU_ONLY, close, cudnn_model, directions, prefer

pytestmark = GPU_ONLY


def test_cuda_graph_replay_gives_the_eager_results(shipped, tmp_path):
    from algosel.runtime import hook

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 16, 28))
    model = model.cuda().half()
    x = torch.randn(16, 32, 28, 28, device="cuda", dtype=torch.float16)
    ex = hook.Executor(**AT_ONCE, selector=prefer(shipped, "gemm"), cache=tmp_path)
    with hook.enabled(ex):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):  # warm-up plans every convolution outside the capture
                eager = model(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        expected = model(x)
    assert "gemm" in {ex.plans.get(p).path for r in ex.route_list() for p in directions(ex, r)}
    assert close(captured, expected) and eager.shape == captured.shape


def test_torch_compile_keeps_the_convolutions_in_the_graph_on_gpu(shipped, tmp_path):
    from algosel.runtime import hook

    model, x = cudnn_model()
    ref = model(x)
    torch._dynamo.reset()
    hook.enable(hook.Executor(**AT_ONCE, selector=prefer(shipped, "cudnn"), cache=tmp_path))
    try:
        explained = torch._dynamo.explain(model)(x)
        compiled = torch.compile(model)
        y = compiled(x)
    finally:
        hook.disable()
        torch._dynamo.reset()
    assert explained.graph_break_count == 0, explained.break_reasons
    assert close(y, ref)


@pytest.mark.parametrize(
    ("name", "amp"), [("efficientnet_b0", False), ("efficientnet_v2_s", False), ("squeezenet1_1", True)]
)
def test_networks_that_crashed_under_the_hook_train(shipped, name, amp, tmp_path):
    """An in-place activation after a hooked conv raised `Output 0 of _Conv2dFunctionBackward is a view`; every
    space is forced in turn so that the Python Function, the GEMM and the compiled paths all run."""
    torchvision = pytest.importorskip("torchvision")
    from algosel.runtime import hook

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).cuda()
    x = torch.randn(4, 3, 128, 128, device="cuda")
    if amp:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)

    def step():
        torch.manual_seed(1)  # the same dropout masks in every step
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = model(x).float().square().mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss_ref, grads_ref = step()
    for space in ("gemm", "cudnn"):
        hook.reset_stats()
        with hook.enabled(hook.Executor(**AT_ONCE, selector=prefer(shipped, space), cache=tmp_path / space)):
            loss, grads = step()
        assert torch.isfinite(loss) and abs(float(loss) - float(loss_ref)) <= 2e-2 * abs(float(loss_ref)) + 1e-6
        assert len(grads) == len(grads_ref)
        assert not any(k.startswith("fallback") for k in hook.stats()), hook.stats()
