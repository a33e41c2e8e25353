"""Time MyNet's training step: PyTorch's default, cudnn.benchmark, or the algosel hook with a given model.

    python examples/mynet_step.py --mode default --dtype amp
    python examples/mynet_step.py --mode hook --model models/mynet-h200 --dtype amp

One mode per process: PyTorch caches the plan it picked for a convolution in a process whatever the benchmark
flag, so modes compared in one process would share plans. A step is forward, cross-entropy loss, backward and an
SGD update on random images and labels (batch 16, 128x128 by default); the median of ``--steps`` steps after
``--warmup`` is printed as one JSON line (with the hook's per-path call counts in hook mode). On a GPU steps are
timed with CUDA events; ``--device cpu`` runs the same step on the CPU (to check the script, not to time it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mynet import NUM_CLASSES, make_model  # noqa: E402 - the example's neighbour, found through the path above


def _hook_context(args: argparse.Namespace):
    import algosel.hook  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415

    kwargs = {}
    if args.model:
        kwargs["selector"] = Selector.load(args.model, force=args.force)
    if args.verify:
        kwargs["verify"] = args.verify
    if args.record:
        kwargs["record"] = args.record
    return algosel.hook.enabled(**kwargs)


def step_summary(times_ms: list[float]) -> dict[str, float]:
    """Median, 25th and 75th percentile of the step times. The percentiles are read within the measured range
    (``method="inclusive"``): the default ("exclusive") extrapolates beyond it on few samples, and gave a negative
    25th percentile for two steps."""
    if len(times_ms) < 2:
        return {"step_ms_median": times_ms[0], "step_ms_p25": times_ms[0], "step_ms_p75": times_ms[0]}
    p25, _, p75 = statistics.quantiles(times_ms, n=4, method="inclusive")
    return {"step_ms_median": statistics.median(times_ms), "step_ms_p25": p25, "step_ms_p75": p75}


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("default", "benchmark", "hook"), default="default")
    parser.add_argument("--model", default=None, help="model directory for the hook (default: the shipped one)")
    parser.add_argument("--force", action="store_true", help="use a model made for another GPU or cuDNN")
    parser.add_argument("--verify", type=int, default=0, help="hook: time the model's top k on each new problem")
    parser.add_argument("--record", default=None, help="hook: record the problems it met without records here")
    parser.add_argument("--dtype", choices=("float32", "amp"), default="float32", help="amp: float16 autocast")
    parser.add_argument("--batch", type=_count(1), default=16)
    parser.add_argument("--size", type=_count(16), default=128, help="image height and width (a multiple of 16)")
    parser.add_argument("--steps", type=_count(1), default=30)
    parser.add_argument("--warmup", type=_count(0), default=5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA GPU is visible; --device cpu runs the step on the CPU")
    if args.dtype == "amp" and device.type != "cuda":
        parser.error("--dtype amp is float16 autocast on a GPU; use float32 on the CPU")
    torch.backends.cudnn.benchmark = args.mode == "benchmark"
    torch.manual_seed(0)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=args.dtype == "amp")
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    target = torch.randint(0, NUM_CLASSES, (args.batch, args.size, args.size), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16, enabled=args.dtype == "amp"):
            loss = F.cross_entropy(model(x), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    context = _hook_context(args) if args.mode == "hook" else contextlib.nullcontext()
    times_ms = []
    t0 = time.perf_counter()
    with context:
        for i in range(args.warmup + args.steps):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                elapsed_ms = start.elapsed_time(end)
            else:
                t = time.perf_counter()
                step()
                elapsed_ms = 1000 * (time.perf_counter() - t)
            if i >= args.warmup:
                times_ms.append(elapsed_ms)
    result = {
        "mode": args.mode,
        "model": args.model,
        "verify": args.verify,
        "dtype": args.dtype,
        "device": str(device),
        "batch": args.batch,
        "size": args.size,
        "steps": args.steps,
        **step_summary(times_ms),
        "wall_s": round(time.perf_counter() - t0, 2),  # warm-up and timed steps, the hook's planning included
    }
    if args.mode == "hook":
        import algosel.hook  # noqa: PLC0415

        result["hook_stats"] = algosel.hook.stats()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
