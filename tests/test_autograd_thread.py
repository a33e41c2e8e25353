"""Tests of algosel.runtime.autograd_thread on CPU (the GPU test of the thread itself is in test_gpu.py)."""

from __future__ import annotations

import threading

import pytest
import torch
from support import run_in_a_backward

from algosel.runtime.autograd_thread import in_backward, on_autograd_thread

CPU = torch.device("cpu")


def test_the_function_runs_inside_a_backward_and_its_result_comes_back() -> None:
    seen = []

    def fn():
        seen.append((in_backward(), torch.is_grad_enabled()))
        return 42

    assert not in_backward()
    assert on_autograd_thread(fn, CPU) == 42
    assert seen == [(True, False)]  # inside autograd's backward, grad mode off


def test_its_exception_is_raised_in_the_caller() -> None:
    def fn():
        raise KeyError("no such candidate")

    with pytest.raises(KeyError, match="no such candidate"):
        on_autograd_thread(fn, CPU)
    assert on_autograd_thread(lambda: "again", CPU) == "again"  # nothing left behind


@pytest.mark.parametrize(("context", "through_autograd"), [("no_grad", True), ("inference_mode", False)])
def test_it_runs_under_no_grad_and_in_inference_mode(context, through_autograd) -> None:
    """No backward can run in inference mode (nor does a network's there): the function runs directly."""
    ctx = torch.no_grad() if context == "no_grad" else torch.inference_mode()
    with ctx:
        assert on_autograd_thread(in_backward, CPU) is through_autograd


def test_inside_a_backward_it_runs_at_once_in_that_thread() -> None:
    def both():
        return threading.get_ident(), on_autograd_thread(threading.get_ident, CPU)

    here, there = run_in_a_backward(both, CPU)
    assert here == there
