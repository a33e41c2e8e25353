"""The hook is never the reason a training step fails: without a model for this GPU, with a damaged model, with a
cache it cannot write, or when routing a call fails, it warns once and runs PyTorch's own convolution. Arguments of
the wrong kind are one-line errors at once."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from algosel.problem import ConvProblem
from algosel.runtime import hook
from algosel.runtime.fallbacks import HookUnavailableWarning, warn_once
from algosel.runtime.standins import CpuAsCuda, Preferring
from algosel.testing import exact_calibration, fake_gpu


def _executor(**config) -> hook.Executor:
    """An executor that routes the CPU's calls as a GPU's (``CpuAsCuda``, unless a test gives its own device seam):
    the hook routes CUDA tensors alone, so its routing is tested on the CPU through this stand-in."""
    return hook.Executor(**{"device_probe": CPU_AS_CUDA, **config})


#: One seam for every executor, so that ``enabled()`` blocks of one configuration share their executor.
CPU_AS_CUDA = CpuAsCuda()


def _step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 8))


def _trains_as_pytorch(block, model, x) -> None:
    """The step inside ``block`` gives exactly PyTorch's loss and gradients."""
    ref_loss, ref_grads = _step(model, x)
    with block:
        loss, grads = _step(model, x)
    assert torch.equal(loss, ref_loss) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def test_on_a_gpu_without_a_model_the_step_runs_pytorchs_own_convolutions():
    """An A100 (faked: the visible GPU is what the model's environment check reads): no shipped model covers it (the
    H200's and the H100 + H200 joint model are of another family), so `enabled()` warns once, naming the GPU and
    the fix, and every convolution is PyTorch's own."""
    model, x = _net(), torch.randn(2, 3, 8, 8)
    hook.reset_stats()
    said = r"NVIDIA A100-SXM4-80GB.*make a model for this GPU with `algosel sweep --quick.*PyTorch's own"
    # the model loaded before the first call (the hook's default loads it beside the first steps: below)
    config = {"step_aside": True, "background_load": False, "device_probe": CPU_AS_CUDA}
    with fake_gpu("NVIDIA A100-SXM4-80GB", (8, 0)):
        with pytest.warns(HookUnavailableWarning, match=said):
            _trains_as_pytorch(hook.enabled(**config), model, x)  # a configuration of its own: a new executor
        assert hook.stats() == {"pytorch:no model for this machine": 5}  # forward and weight gradient, then all three
        with hook.enabled(**config) as ex:
            assert ex.unavailable and ex.route_reasons() == {"pytorch:no model for this machine": 5}


def test_calls_before_the_model_is_loaded_pass_through_unmemoised(slice_model):
    """``background_load``: the model loads on a thread of its own; a call that comes before it is ready runs
    PyTorch's own convolution and is not memoised (its next call asks again), one after it is routed and kept."""
    from algosel.runtime.decision import Passing
    from algosel.runtime.standins import FakeDevice

    ex = hook.Executor(selector=slice_model[0], background_load=True, cache=False, native=False,
                       device_probe=FakeDevice())  # fmt: skip
    p = ConvProblem(n=2, c=3, k=4, h=8, w=8, r=3, s=3, pad_h=1, pad_w=1, dtype="float32")
    key = ("signature",)
    first = ex.route(key, p, torch.device("cpu"), (False, False))
    if first.reasons == (Passing.LOADING,):  # the model was not ready yet
        assert key not in ex.routes.by_key and ex.stats() == {Passing.LOADING: 1}
    else:  # a fast machine loaded it before the call
        assert ex.routes.by_key[key] is first
    ex.model.wait()
    assert ex.model.ready() and ex.model.seconds > 0 and not ex.unavailable
    again = ex.route(key, p, torch.device("cpu"), (False, False))
    assert Passing.LOADING not in again.reasons and ex.routes.by_key[key] is again


def test_a_damaged_model_is_named_once_and_the_step_runs(shipped, tmp_path):
    from algosel.learn.models import default_model_dir

    damaged = tmp_path / "damaged"
    shutil.copytree(default_model_dir(), damaged)
    text = (damaged / "model.txt").read_bytes()
    (damaged / "model.txt").write_bytes(text[: len(text) // 2])
    model, x = _net(), torch.randn(2, 3, 8, 8)
    with pytest.warns(HookUnavailableWarning, match=r"model\.txt: \d+ bytes, the manifest records"):
        _trains_as_pytorch(hook.enabled(selector=damaged, background_load=False), model, x)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", HookUnavailableWarning)  # said once: not again for the same cause
        _trains_as_pytorch(hook.enabled(_executor(selector=damaged)), model, x)


def test_a_cache_that_cannot_be_written_costs_one_warning_and_no_decision(shipped, tmp_path):
    """The cache root is a file (no folder can be made under it): decisions are made and kept in the process."""
    import warnings

    from algosel.runtime.cache import RuntimeCache

    root = tmp_path / "not-a-folder"
    root.write_text("a file")
    cache = RuntimeCache(root, {"gpu_name": "x", "cudnn": 1})
    ex = _executor(selector=Preferring(shipped, "gemm", recorded=False), cache=cache, live=False,
                   calibration=exact_calibration())  # fmt: skip
    problem = ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6)
    with pytest.warns(RuntimeWarning, match="cannot write the runtime cache"):
        got = ex.decide(problem, torch.device("cuda"))  # a device object: the cache is read for GPUs
    assert got.candidate_id.startswith("gemm:")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ex.decide(problem.replace(n=32), torch.device("cuda")).candidate_id.startswith("gemm:")
    assert root.read_text() == "a file"


def test_a_failure_while_routing_a_call_runs_pytorchs_convolution(shipped):
    class Broken(Preferring):
        def choose(self, *args, **kwargs):
            raise RuntimeError("the model's lists are unreadable")

    hook.reset_stats()
    ex = _executor(selector=Broken(shipped, "gemm", recorded=False), live=False, cache=False)
    model, x = _net(), torch.randn(2, 3, 8, 8)
    with pytest.warns(HookUnavailableWarning, match="the hook failed on this call .*unreadable"):
        _trains_as_pytorch(hook.enabled(ex), model, x)
    assert hook.stats() == {"pytorch:the hook failed on this call": 2}  # memoised: planned once per signature


@pytest.mark.parametrize(("call", "message"), [
    (lambda: _executor(selector=42), r"^selector must be a Selector or a model directory, got 42 \(it has no "
                                         r"choose\(\)\)$"),
    (lambda: _executor(record=42), r"^record must be the path of a layers file, got 42$"),
    (lambda: hook.patch_model(42), r"^patch_model takes a torch.nn.Module, got 42$"),
])  # fmt: skip
def test_arguments_of_the_wrong_kind_are_one_line_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_warning_is_said_once_per_cause():
    with pytest.warns(HookUnavailableWarning, match="a cause of its own"):
        warn_once("a cause of its own")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_once("a cause of its own")
    assert F.conv2d is hook.original_conv2d  # nothing left switched on
