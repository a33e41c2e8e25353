"""Bad inputs, third pass, of the hook: where cuDNN is not involved, the hook is exactly PyTorch.

The hook exists for cuDNN: a convolution on the CPU or on ``device='meta'`` is PyTorch's own call, untouched, with
the hook on (issue 52, case 2: a CPU convolution whose kernel covers the whole input was routed to a GEMM lowering
and its output differed from PyTorch's; on ``meta`` the hook raised). Outputs and gradients are compared bit for bit
(``torch.equal``), through ``enabled()``, ``enable()`` and ``patch_model``; and ``enabled()``'s arguments of the wrong
value are one-line errors before any call (case 5).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from algosel.candidates import DEFAULT_ID
from algosel.runtime import hook

#: The issue's case: a fully connected mode (kernel = input), which the GEMM lowering takes on a GPU.
FULLY_CONNECTED = ((64, 256, 6, 6), (512, 256, 6, 6))
#: A 1x1 (pointwise) conv in channels_last, a 3x3 with padding and stride, a grouped one: each a GEMM or cuDNN case.
SHAPES = [FULLY_CONNECTED, ((8, 32, 14, 14), (64, 32, 1, 1)), ((4, 16, 15, 13), (24, 16, 3, 3)),
          ((2, 32, 9, 9), (32, 8, 3, 3))]  # fmt: skip
CONV_ARGS = [{}, {}, {"padding": 1, "stride": 2}, {"padding": 1, "groups": 4}]


def _inputs(x_shape, w_shape, device: str, channels_last: bool = False):
    torch.manual_seed(0)
    x = torch.randn(x_shape, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w, b = torch.randn(w_shape, device=device), torch.randn(w_shape[0], device=device)
    return [t.requires_grad_() for t in (x, w, b)]


def _forward_backward(inputs, kwargs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y = F.conv2d(*leaves, **kwargs)
    y.backward(torch.ones_like(y))
    return y.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_a_cpu_convolution_under_the_hook_is_pytorchs_bit_for_bit(case: int) -> None:
    (x_shape, w_shape), kwargs = SHAPES[case], CONV_ARGS[case]
    inputs = _inputs(x_shape, w_shape, "cpu", channels_last=case == 1)
    ref_y, ref_grads = _forward_backward(inputs, kwargs)
    hook.reset_stats()
    with hook.enabled() as ex:
        y, grads = _forward_backward(inputs, kwargs)
    assert torch.equal(y, ref_y) and y.stride() == ref_y.stride()
    assert all(torch.equal(g, r) for g, r in zip(grads, ref_grads))
    assert set(ex.stats()) == {"pytorch:not a cuDNN device"}, ex.stats()


def test_five_sgd_steps_on_the_cpu_under_enable_give_pytorchs_parameters() -> None:
    def train(hooked: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(256, 512, 6), torch.nn.Flatten(), torch.nn.Linear(512, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, target = torch.randn(64, 256, 6, 6), torch.randint(0, 10, (64,))
        if hooked:
            hook.enable()
        try:
            for _ in range(5):
                opt.zero_grad()
                F.cross_entropy(model(x), target).backward()
                opt.step()
        finally:
            hook.disable()
        return [p.detach() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(train(True), train(False)))


def test_patch_model_on_the_cpu_is_pytorchs_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 8))
    x = torch.randn(2, 3, 8, 8)
    ref = model(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    hook.patch_model(model)
    y = model(x)
    y.sum().backward()
    assert torch.equal(y, ref) and all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), ref_grads))


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_a_meta_convolution_under_the_hook_is_pytorchs(case: int) -> None:
    """On ``meta`` (no data: the hook used to raise inside autocast's query) the output and the gradients have
    PyTorch's shapes, strides and dtypes."""
    (x_shape, w_shape), kwargs = SHAPES[case], CONV_ARGS[case]
    inputs = _inputs(x_shape, w_shape, "meta", channels_last=case == 1)
    ref_y, ref_grads = _forward_backward(inputs, kwargs)
    with hook.enabled():
        y, grads = _forward_backward(inputs, kwargs)
    assert y.device.type == "meta"
    assert (y.shape, y.stride(), y.dtype) == (ref_y.shape, ref_y.stride(), ref_y.dtype)
    assert [(g.shape, g.stride(), g.dtype) for g in grads] == [(g.shape, g.stride(), g.dtype) for g in ref_grads]


@pytest.mark.parametrize(("config", "message"), [
    ({"max_workspace_bytes": -5}, r"^max_workspace_bytes must be a non-negative integer \(bytes\), got -5$"),
    ({"max_workspace_bytes": 1.5}, r"^max_workspace_bytes must be a non-negative integer \(bytes\), got 1\.5$"),
    ({"min_gain_us": -1.0}, r"^min_gain_us must be a number of microseconds >= 0, got -1\.0$"),
    ({"min_gain_us": "5"}, r"^min_gain_us must be a number of microseconds >= 0, got '5'$"),
])  # fmt: skip
def test_enabled_refuses_a_bad_value_before_any_call(config, message) -> None:
    with pytest.raises(ValueError, match=message), hook.enabled(**config):
        pytest.fail("the block ran")


def test_a_cache_line_of_other_bytes_than_utf8_is_a_damaged_line_not_an_error(tmp_path) -> None:
    """The hook's persistent cache read a ``decisions.jsonl`` holding non-UTF-8 bytes with a UnicodeDecodeError: now
    that line is skipped as damaged (warned once, naming the file) and the sound lines are read."""
    import json

    from algosel.runtime.cache import RuntimeCache
    from algosel.runtime.decision import Decision

    env = {"gpu_name": "NVIDIA H200", "cudnn": 91900}
    cache = RuntimeCache(tmp_path, env)
    cache.put(Decision("p1", "gemm:fc", "predicted"))
    with cache.decisions_path.open("ab") as fh:
        fh.write(b'{"problem": "\xff\xfe", "candidate_id": "x"}\n')
    cache.put(Decision("p2", DEFAULT_ID, "predicted"))
    reader = RuntimeCache(tmp_path, env)
    with pytest.warns(
        RuntimeWarning, match=rf"skipped 1 damaged line\(s\) of the runtime cache {cache.decisions_path}"
    ):
        got = sorted(d.problem for d in reader.decisions())
    assert got == ["p1", "p2"] and reader.summary()["damaged_lines"] == 1
    assert json.loads(cache.decisions_path.read_bytes().splitlines()[0])["environment"] == env


def test_a_compiled_cpu_convolution_under_the_hook_is_pytorchs_bit_for_bit() -> None:
    """Under ``torch.compile`` the hook's custom op is what a conv traces to: on the CPU it traces PyTorch's own call
    (its backward was routed to a GEMM lowering before)."""
    (x_shape, w_shape), kwargs = SHAPES[0], CONV_ARGS[0]
    inputs = _inputs(x_shape, w_shape, "cpu")
    ref_y, ref_grads = _forward_backward(inputs, kwargs)

    def conv(x, w, b):
        return F.conv2d(x, w, b, **kwargs)

    compiled = torch.compile(conv, backend="aot_eager")  # no C++ compiler needed
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    with hook.enabled():
        y = compiled(*leaves)
        y.backward(torch.ones_like(y))
    assert torch.equal(y.detach(), ref_y) and all(torch.equal(t.grad, g) for t, g in zip(leaves, ref_grads))
