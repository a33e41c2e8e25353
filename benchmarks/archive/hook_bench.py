"""The runtime hook against PyTorch's default and cudnn.benchmark, on a GPU.

    python benchmarks/hook_bench.py --out hook_bench.json          # every job, spread over the visible GPUs

Every (case, mode) job runs in a process of its own (PyTorch caches the plan it picked per shape in a process,
whatever the benchmark flag, so modes must not share one). Modes: ``default`` (``cudnn.benchmark = False``),
``benchmark`` (``cudnn.benchmark = True``), ``algosel`` (``algosel.hook.enabled()`` with the shipped model) and,
for fc6, ``matmul`` (the same math as ``nn.Linear`` on the flattened input). Cases:

- ``fc6-<dtype>``: AlexNet's fc6 as a 6x6 conv (batch 1600, 256x6x6 -> 4096), forward + backward (input grad too);
  median of 20 steps after 3 warm-up steps;
- ``fpn``: a detection FPN head training step (lateral 1x1 and 3x3 output convs over four ResNet maps, batch 1,
  float32) with a new input size at every step over 20 sizes: the first pass over the sizes (includes benchmark
  mode's tuning or the hook's planning) and the steady rate of 3 more passes;
- ``resnet50-<float32|amp>``: a ResNet-50 training step (batch 32, 224x224, SGD), float32 or float16 autocast;
  median of 15 steps after 5 warm-up steps;
- ``<case>/paired``: side by side in one process, blocks of 5 steps alternating between the hook and its
  reference (fc6: ``nn.Linear``; ResNet-50: PyTorch's default, whose cached plans both share, as the hook passes
  every ResNet-50 conv through), 8 blocks each in ABBA order; medians of the step times, and the host time to
  enqueue a step;
- ``overhead``: host time per call of a tiny conv (launch-bound), PyTorch's call against the hooked call on the
  cuDNN and on the GEMM path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

JOBS = (
    [(f"fc6-{d}", m) for d in ("float16", "float32") for m in ("default", "benchmark", "algosel", "matmul")]
    + [("fpn", m) for m in ("default", "benchmark", "algosel")]
    + [(f"resnet50-{d}", m) for d in ("float32", "amp") for m in ("default", "benchmark", "algosel")]
    + [(c, "paired") for c in ("fc6-float16", "fc6-float32", "resnet50-float32", "resnet50-amp")]
    + [("overhead", "all")]
)


def _events_median(step, warmup: int, iters: int) -> float:
    import torch

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def _mode_context(mode: str):
    import contextlib

    import torch

    torch.backends.cudnn.benchmark = mode == "benchmark"
    if mode == "algosel":
        from algosel import hook

        return hook.enabled()
    return contextlib.nullcontext()


def run_fc6(dtype_name: str, mode: str) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    x = torch.randn(1600, 256, 6, 6, device="cuda", dtype=dtype, requires_grad=True)
    if mode == "matmul":
        layer = torch.nn.Linear(256 * 36, 4096).cuda().to(dtype)

        def step():
            layer(x.flatten(1)).sum().backward()
    else:
        layer = torch.nn.Conv2d(256, 4096, 6).cuda().to(dtype)

        def step():
            layer(x).sum().backward()

    with _mode_context(mode):
        ms = _events_median(step, 3, 20)
    return {"step_ms": ms}


def _paired(steps: dict, blocks: int = 8, per_block: int = 5) -> dict:
    """Alternate blocks of steps between the entries of ``steps`` (name -> (context factory, step)); medians."""
    import torch

    times: dict[str, list[float]] = {n: [] for n in steps}
    host: dict[str, list[float]] = {n: [] for n in steps}
    for ctx, step in steps.values():  # warm-up: plans, caches
        with ctx():
            for _ in range(3):
                step()
    torch.cuda.synchronize()
    for block in range(blocks):
        # ABBA order: neither side always runs first after the other (clocks, allocator state).
        order = list(steps.items()) if block % 2 == 0 else list(steps.items())[::-1]
        for name, (ctx, step) in order:
            with ctx():
                for _ in range(per_block):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    t0 = time.perf_counter()
                    step()
                    host[name].append(1e3 * (time.perf_counter() - t0))
                    e.record()
                    e.synchronize()
                    times[name].append(s.elapsed_time(e))
    out = {f"{n}_step_ms": statistics.median(v) for n, v in times.items()}
    out.update({f"{n}_host_ms": statistics.median(v) for n, v in host.items()})
    return out


def run_paired(case: str) -> dict:
    import contextlib

    import torch

    from algosel import hook

    torch.backends.cudnn.benchmark = False
    if case.startswith("fc6-"):
        dtype = getattr(torch, case.split("-", 1)[1])
        x = torch.randn(1600, 256, 6, 6, device="cuda", dtype=dtype, requires_grad=True)
        conv = torch.nn.Conv2d(256, 4096, 6).cuda().to(dtype)
        linear = torch.nn.Linear(256 * 36, 4096).cuda().to(dtype)
        steps = {
            "algosel": (hook.enabled, lambda: conv(x).sum().backward()),
            "matmul": (contextlib.nullcontext, lambda: linear(x.flatten(1)).sum().backward()),
        }
    else:
        step = _resnet_step(amp=case.endswith("amp"))
        steps = {"algosel": (hook.enabled, step), "default": (contextlib.nullcontext, step)}
    executor = hook.Executor()
    steps["algosel"] = (lambda: hook.enabled(executor), steps["algosel"][1])
    out = _paired(steps)
    out["stats"] = hook.stats()
    return out


def run_fpn(mode: str) -> dict:
    import torch

    from algosel.measure.suites import SUITES, FPNHead

    sizes = SUITES["fpn"].sizes
    head = FPNHead().cuda()
    opt = torch.optim.SGD(head.parameters(), lr=1e-3)
    inputs = {s: [t.normal_().requires_grad_() for t in head.example_inputs(*s, device="cuda")] for s in sizes}

    def step(size):
        opt.zero_grad(set_to_none=True)
        loss = sum(o.mean() for o in head(*inputs[size]))
        loss.backward()
        opt.step()

    with _mode_context(mode):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for s in sizes:
            step(s)
        torch.cuda.synchronize()
        first_pass_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(3):
            for s in sizes:
                step(s)
        torch.cuda.synchronize()
        steady = 3 * len(sizes) / (time.perf_counter() - t0)
    out = {"first_pass_s": first_pass_s, "steady_it_per_s": steady, "sizes": len(sizes)}
    if mode == "algosel":
        from algosel import hook

        out["stats"] = hook.stats()
    return out


def _resnet_step(amp: bool):
    """A ResNet-50 training step (batch 32, 224x224, SGD), float32 or float16 autocast."""
    import torch
    import torchvision

    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (32,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()

    return step


def run_resnet(kind: str, mode: str) -> dict:

    step = _resnet_step(amp=kind == "amp")
    with _mode_context(mode):
        ms = _events_median(step, 5, 15)
    out = {"step_ms": ms}
    if mode == "algosel":
        from algosel import hook

        out["stats"] = hook.stats()
    return out


def run_overhead() -> dict:
    import torch
    import torch.nn.functional as F

    from algosel import hook

    x = torch.randn(1, 16, 16, 16, device="cuda", dtype=torch.float16)
    w3 = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16)
    w1 = torch.randn(16, 16, 1, 1, device="cuda", dtype=torch.float16)
    n = 2000

    def per_call_us(fn) -> float:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return 1e6 * (time.perf_counter() - t0) / n

    out = {"pytorch_3x3_us": per_call_us(lambda: F.conv2d(x, w3, padding=1)),
           "pytorch_1x1_us": per_call_us(lambda: F.conv2d(x, w1))}  # fmt: skip
    with hook.enabled(hook.Executor(min_gain_us=-1e9)):  # keep the hook's own path even where gains are tiny
        out["algosel_3x3_us"] = per_call_us(lambda: F.conv2d(x, w3, padding=1))
        out["algosel_1x1_us"] = per_call_us(lambda: F.conv2d(x, w1))
        out["stats"] = hook.stats()
    return out


def run_profile(case: str) -> dict:
    """Host time the hook's own Python code takes per ResNet-50 step (cProfile of 10 hooked steps): the time inside
    ``algosel.hook.conv2d`` minus the time of PyTorch's conv call it makes."""
    import cProfile
    import pstats

    import torch
    import torchvision

    from algosel import hook

    model = torchvision.models.resnet50().cuda()
    xb = torch.randn(32, 3, 224, 224, device="cuda")
    amp = case.endswith("amp")

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            model(xb).sum().backward()

    with hook.enabled():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            step()
        prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof).stats
    hook_cum = sum(v[3] for k, v in stats.items() if k[0].endswith("hook.py") and k[2] == "conv2d")
    calls = sum(v[1] for k, v in stats.items() if k[0].endswith("hook.py") and k[2] == "conv2d")
    conv_cum = sum(
        v[3] for k, v in stats.items() if k[2] in ("<built-in method conv2d>", "<built-in method torch.conv2d>")
    )
    return {
        "hook_conv2d_ms_per_step": 100 * hook_cum,
        "pytorch_conv2d_ms_per_step": 100 * conv_cum,
        "hook_own_us_per_call": 1e6 * (hook_cum - conv_cum) / max(calls, 1),
        "calls_per_step": calls / 10,
    }


def run_job(case: str, mode: str) -> dict:
    if mode == "paired":
        return run_paired(case)
    if mode == "profile":
        return run_profile(case)
    if case.startswith("fc6-"):
        return run_fc6(case.split("-", 1)[1], mode)
    if case == "fpn":
        return run_fpn(mode)
    if case.startswith("resnet50-"):
        return run_resnet(case.split("-", 1)[1], mode)
    if case == "overhead":
        return run_overhead()
    raise ValueError(f"unknown case {case!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", nargs=2, metavar=("CASE", "MODE"), help="run one job in this process")
    parser.add_argument("--out", default="hook_bench.json")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to spread jobs over (default: all visible)")
    args = parser.parse_args()
    if args.job:
        print("RESULT " + json.dumps(run_job(*args.job)), flush=True)
        return
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    # Children get one GPU each, named as this process sees them (respecting its own CUDA_VISIBLE_DEVICES).
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    free = (visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())])[:gpus]

    def launch(job):
        gpu = free.pop()
        try:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--job", *job], env=env, capture_output=True, text=True,
                                  timeout=400, check=False)  # fmt: skip
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {"error": proc.stderr[-2000:]}
            result["wall_s"] = round(time.perf_counter() - t0, 1)
            result = {"case": job[0], "mode": job[1], **result}
            print(json.dumps(result), flush=True)  # as each job ends, so a cut-short run still reports
            return result
        finally:
            free.append(gpu)

    with ThreadPoolExecutor(max_workers=gpus) as pool:
        results = list(pool.map(launch, JOBS))
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    Path(args.out).write_text(json.dumps({"environment": env, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
