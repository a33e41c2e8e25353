"""What PyTorch's own backward convolution costs the host on a thread whose plan cache is cold (GPU).

    python benchmarks/plan_threads.py --net convnext_tiny --dtype amp [--layers 12]

PyTorch keeps its cuDNN plans per thread (a ``thread_local`` cache in ATen's cuDNN convolution): a training step's
backward runs on autograd's device thread, and a measurement of the same gradient on the main thread (verify mode's
timing of PyTorch's default) builds a plan of its own. This runs one step of a zoo network (PyTorch's default; every
thread that took part now has its plans), then, for each distinct convolution of the step (up to ``--layers``), the
wall time of one PyTorch call of each gradient alone (``aten.convolution_backward`` with one output asked), each
call synchronized:

- ``autograd``: the gradients through autograd's backward (the thread whose plans the step made): both asked;
- ``on_autograd``: each gradient alone run by :func:`algosel.runtime.autograd_thread.on_autograd_thread` (as verify
  mode times a gradient), its first call there;
- ``main 1st`` and ``main 2nd``: on the main thread, twice;
- ``new thread``: once on a thread started for it.

Prints a row per convolution and the totals. A cold cache's first call is what the plan costs; the second call on
the same thread is the kernel's own time plus PyTorch's host path.
"""

from __future__ import annotations

import argparse
import threading
import time

import zoo

from algosel.runtime.autograd_thread import on_autograd_thread


def _wall_ms(fn, sync) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return 1e3 * (time.perf_counter() - t0)


def _on_new_thread(fn, sync) -> float:
    out: list[float] = []
    t = threading.Thread(target=lambda: out.append(_wall_ms(fn, sync)))
    t.start()
    t.join()
    return out[0]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", default="convnext_tiny", choices=sorted(zoo.NETS))
    p.add_argument("--dtype", default="amp", choices=zoo.DTYPES)
    p.add_argument("--layers", type=int, default=12, help="distinct convolutions to measure")
    p.add_argument("--device", default="cuda", help="cuda; cpu only checks the script")
    return p.parse_args()


def step_convolutions(args: argparse.Namespace, sync) -> dict[tuple, object]:
    """One step of the network (every thread that took part now has its plans), and its distinct convolutions (up
    to ``--layers``): their geometry, each with its memory format (channels last, or None)."""
    import torch

    seen: dict[tuple, object] = {}

    def capture(module, inputs):
        if isinstance(module, torch.nn.Conv2d) and len(seen) < args.layers:
            x = inputs[0]
            mf = torch.channels_last if x.is_contiguous(memory_format=torch.channels_last) and x.dim() == 4 else None
            key = (tuple(x.shape), tuple(module.weight.shape), module.stride, module.padding, module.dilation,
                   module.groups, mf is not None)  # fmt: skip
            seen.setdefault(key, mf)

    step, _ = zoo.build_network(args.net, args.dtype, args.device)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(capture)
    step(0)
    sync()
    handle.remove()
    return seen


def measure_convolution(key: tuple, mf, device: str, dtype, sync, totals: dict[str, float]) -> None:
    """Print the rows of one convolution (each gradient alone, on every thread) and add its times to ``totals``."""
    import torch

    x_shape, w_shape, stride, padding, dilation, groups, _ = key
    fmt = mf or torch.contiguous_format
    x = torch.randn(x_shape, device=device, dtype=dtype).contiguous(memory_format=fmt).requires_grad_()
    w = torch.randn(w_shape, device=device, dtype=dtype).contiguous(memory_format=fmt).requires_grad_()
    y = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)
    g = torch.randn_like(y)

    def autograd_both(y=y, g=g, x=x, w=w):
        torch.autograd.grad(y, (x, w), g, retain_graph=True)

    t_autograd = _wall_ms(autograd_both, sync)
    for name, mask in (("bwd_data", [True, False, False]), ("bwd_filter", [False, True, False])):

        def call(mask=mask, g=g, x=x, w=w, geometry=(list(stride), list(padding), list(dilation), groups)):
            s, p, d, groups_ = geometry
            torch.ops.aten.convolution_backward(g, x.detach(), w.detach(), None, s, p, d, False, [0, 0], groups_,
                                                mask)  # fmt: skip

        there = on_autograd_thread(lambda call=call: _wall_ms(call, sync), torch.device(device))
        first, second = _wall_ms(call, sync), _wall_ms(call, sync)
        fresh = _on_new_thread(call, sync)
        label = f"x{list(x_shape)} w{list(w_shape)} s{stride[0]} g{groups}{' nhwc' if mf else ''}"
        shown = t_autograd if name == "bwd_data" else float("nan")
        print(f"{label:62s} {name:10s} {shown:9.2f} {there:11.2f} {first:9.2f} {second:9.2f} {fresh:10.2f}")
        totals["on_autograd"] += there
        totals["main 1st"] += first
        totals["main 2nd"] += second
        totals["new thread"] += fresh
    totals["autograd"] += t_autograd


def main() -> None:
    args = parse_args()
    import torch

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    seen = step_convolutions(args, sync)
    dtype = torch.float16 if args.dtype == "amp" and args.device == "cuda" else torch.float32
    print(f"{args.net} {args.dtype}: {len(seen)} convolutions; wall ms per call, synchronized")
    print(f"{'convolution':62s} {'dir':10s} {'autograd':>9s} {'on_autograd':>11s} {'main 1st':>9s} {'main 2nd':>9s} "
          f"{'new thread':>10s}")  # fmt: skip
    totals = {"autograd": 0.0, "on_autograd": 0.0, "main 1st": 0.0, "main 2nd": 0.0, "new thread": 0.0}
    for key, mf in seen.items():
        measure_convolution(key, mf, args.device, dtype, sync, totals)
    print("totals (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in totals.items()) + " (autograd: both gradients)")


if __name__ == "__main__":
    main()
