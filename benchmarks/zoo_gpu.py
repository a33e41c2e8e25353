"""The GPU-bound zoo: training steps that keep the GPU busy, the hook against PyTorch's default and benchmark mode.

    python benchmarks/zoo_gpu.py --out $OUT/zoo_gpu.jsonl --resume --budget-s 500 [--force] [--nets N,..]
        [--jobs paired,benchmark,warm] [--dtypes float32,amp] [--rounds 8] [--slot-steps 2]
    python benchmarks/zoo_gpu.py --out $OUT/zoo_gpu.jsonl --resume --nets detector_ms30 --jobs runs
    python benchmarks/zoo_gpu.py --summarize $OUT/zoo_gpu.jsonl
    python benchmarks/zoo_gpu.py --smoke --out /tmp/z.jsonl          # CPU: every network and job, tiny sizes

The host-bound zoo (benchmarks/zoo.py) runs networks at the batch sizes whose steps an H200 finishes before the host
has enqueued them; there the device time a switch saves is hidden. This driver runs networks at a batch and
resolution that keep the GPU busy, with zoo.py's machinery (its jobs, each a process of its own, its ABBA rotation,
its rows and their table): ``paired`` (default, prediction mode, verify mode cold then warm in the rotation, the
pass-through control, and benchmark mode paired in autocast steps), ``benchmark`` (benchmark mode's tuning and
steady steps in a process of its own), ``warm`` (verify mode's first pass with the persistent cache the paired job
filled, in a new process), ``cold``. Each paired and benchmark row adds the busy fraction of every mode: GPU kernel
time per step (torch.profiler) over the step's wall time (>= 0.9: GPU-bound).

``runs`` (the multi-scale detection run): the detection head over 30 input sizes, each arm in a process of its own so
that every size is new to it (PyTorch keeps one plan per shape whatever the benchmark flag): PyTorch's default,
benchmark mode, the hook's default mode (``rule``: ``hook.enabled()``), the rule without timing (``predict``:
``hook.enabled(verify=False)``), verify mode with an empty cache, and verify mode again in a new process with the
cache the cold one filled (in the paired job, ``predict`` is ``hook.enabled()``: the hook's default mode, the rule).
Each runs ``RUN_EPOCHS`` passes over the sizes; the whole run's time, tuning included, is
what the arms are compared by.

Networks: EfficientNet-B0, MobileNetV3-L, ConvNeXt-T, ResNet-50, DenseNet-121, RegNetY-1.6GF (torchvision),
DeepLabV3-R50 at 512x512, a U-Net and a super-resolution network written in files of their own
(examples/networks/unet.py, srnet.py), and the detection head (algosel.measure.suites.FPNHead) over 30 sizes none
of the records or zoo.py's FPN hold. In float32 (TF32 allowed, NCHW) and float16 autocast with channels_last.

On a GPU without a model of its own (an H100) pass ``--force``: the H200's model is loaded as this GPU's, and
every row says so (``forced_model``) and names its card (``gpu``); timings of different cards are never compared.
Jobs whose rows ``--out`` already holds are skipped with ``--resume``; ``--budget-s`` starts no job that could run
past it, so the zoo runs in several calls of a few minutes, each going on where the last stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo  # noqa: E402
from zoolib.config import ZooConfig  # noqa: E402
from zoolib.drive import drive  # noqa: E402
from zoolib.modes import TUNED, selector_kwargs  # noqa: E402
from zoolib.nets import build_network  # noqa: E402
from zoolib.pooling import pooled_ratio  # noqa: E402
from zoolib.tables import summarize_rows  # noqa: E402
from zoolib.timing import device_sync, wall_s  # noqa: E402

#: name -> (batch, input size, kind): a batch and resolution that keep an H100 or H200 busy (the busy fraction
#: each row records says whether they did).
GPU_NETS: dict[str, tuple[int, int, str]] = {
    "efficientnet_b0": (256, 224, "cls"),
    "mobilenet_v3_large": (256, 224, "cls"),
    "convnext_tiny": (128, 224, "cls"),
    "resnet50": (128, 224, "cls"),
    "densenet121": (128, 224, "cls"),
    "regnet_y_1_6gf": (128, 224, "cls"),
    "deeplabv3_resnet50": (8, 512, "seg"),
    "unet": (16, 256, "file"),
    "srnet": (32, 96, "file"),
    # three networks no test or doc named when the runtime's rule was built (checks on networks it was not tuned on)
    "mobilenet_v2": (256, 224, "cls"),
    "regnet_x_800mf": (128, 224, "cls"),
    "wide_resnet50_2": (64, 224, "cls"),
    "detector_ms30": (8, 0, "multiscale"),
    "regnet_x_3_2gf_ms9": (64, 0, "multiscale_cls"),
}
#: The detection head's 30 input sizes (multiples of 32): none among the FPN suite's sizes around 800x1216 that the
#: records hold, nor zoo.py's 20 (widths 960-1088).
MS_SIZES = tuple((h, w) for h in (512, 544, 576, 608, 640, 672) for w in (800, 832, 864, 896, 928))
#: The 9 input sizes of a classification network trained at several resolutions (grouped convolutions: RegNetX's).
CLS_SIZES = (160, 176, 192, 208, 224, 240, 256, 272, 288)
#: Passes over the sizes of one multi-scale run (the first meets every size new).
RUN_EPOCHS = 3
#: The arms of the multi-scale run, a process each, in this order (the warm arm reads the cold arm's cache).
RUN_ARMS = ("default", "benchmark", "rule", "predict", "verify", "verify_warm")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "networks"
#: The smoke run's input sizes of the networks from files (a few milliseconds a step on a CPU).
SMOKE_SIZES = {"unet": 16, "srnet": 8}


# ------------------------------------------------------------------------------------------------ networks
def from_file(name: str, batch: int, size: int, mf, device: str, smoke: bool = False):
    """A network of examples/networks/<name>.py (its ``make_model``), on ``batch`` random images of ``size`` (the
    smoke run: 2 of :data:`SMOKE_SIZES`)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(f"zoo_gpu_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.make_model().to(device).to(memory_format=mf)
    batch, size = (2, SMOKE_SIZES.get(name, 16)) if smoke else (batch, size)
    return model, [[torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=mf)]]


def multiscale_head(name: str, batch: int, size: int, mf, device: str, smoke: bool = False):
    """The detection head over :data:`MS_SIZES` (a step takes the next size; the smoke run: three of them at a 32nd
    of their size, batch 1)."""
    from algosel.measure.suites import FPNHead

    model = FPNHead().to(device).to(memory_format=mf)
    sizes = [(h // 32, w // 32) for h, w in MS_SIZES[:3]] if smoke else MS_SIZES
    batch = 1 if smoke else batch
    inputs = [[t.contiguous(memory_format=mf) for t in model.example_inputs(h, w, batch, device=device)]
              for h, w in sizes]  # fmt: skip
    return model, inputs


def multiscale_cls(name: str, batch: int, size: int, mf, device: str, smoke: bool = False):
    """A torchvision classifier (the name less its ``_msN`` suffix) over :data:`CLS_SIZES` (a step takes the next)."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name.rsplit("_ms", 1)[0])(weights=None).to(device).to(memory_format=mf)
    sizes, batch = ((32, 48, 64), 2) if smoke else (CLS_SIZES, batch)
    return model, [[torch.randn(batch, 3, s, s, device=device).contiguous(memory_format=mf)] for s in sizes]


def small_cls(kind: str):
    """torchvision's networks at a tiny batch and size (the smoke run on a CPU)."""

    def build(name: str, batch: int, size: int, mf, device: str):
        import torch
        import torchvision

        factory = getattr(torchvision.models.segmentation if kind == "seg" else torchvision.models, name)
        extra = {"aux_loss": False, "weights_backbone": None} if kind == "seg" else {}
        model = factory(weights=None, **extra).to(device).to(memory_format=mf)
        return model, [[torch.randn(2, 3, 64, 64, device=device).contiguous(memory_format=mf)]]

    return build


def gpu_config(cfg: ZooConfig) -> ZooConfig:
    """``cfg`` with this zoo's networks, their builders and the multi-scale run's arms among its jobs (zoo.py's
    jobs run them; the driver's children make it again from the environment)."""
    builders = {kind: functools.partial(build, smoke=cfg.smoke) for kind, build in
                (("file", from_file), ("multiscale", multiscale_head), ("multiscale_cls", multiscale_cls))}  # fmt: skip
    if cfg.smoke:  # the torchvision networks at batch 2 on 64x64 (BatchNorm needs more than one value per channel)
        builders.update({"cls": small_cls("cls"), "seg": small_cls("seg")})
    jobs = {**cfg.jobs, **{f"run_{arm}": functools.partial(job_run, arm=arm) for arm in RUN_ARMS}}
    return dataclasses.replace(cfg, nets=GPU_NETS, builders={**cfg.builders, **builders}, jobs=jobs)


# ------------------------------------------------------------------------------------------ multi-scale runs
def run_context(cfg: ZooConfig, arm: str, hook):
    """The context a run's steps take: the hook's mode with a cache of the run's own (the cold arm's empty unless
    a run before it filled it: its row then counts what it timed), or benchmark mode."""
    import contextlib

    import torch

    from algosel.runtime.native import cache_root

    if arm == "benchmark":
        torch.backends.cudnn.benchmark = True
        return contextlib.nullcontext
    sel = selector_kwargs(cfg)
    if arm == "rule":  # the hook's default mode
        return lambda: hook.enabled(cache=cache_root() / "zoo-run-rule", **sel)
    if arm == "predict":  # the rule without timing
        return lambda: hook.enabled(verify=False, cache=cache_root() / "zoo-run-predict", **sel)
    if arm in ("verify", "verify_warm"):
        return lambda: hook.enabled(verify=cfg.verify_k, cache=cache_root() / "zoo-run-verify", **sel)
    return contextlib.nullcontext


def job_run(cfg: ZooConfig, name: str, dtype: str, device: str = "cuda", *, arm: str, epochs: int = RUN_EPOCHS
            ) -> dict:  # fmt: skip
    """One arm of a multi-scale run in this process: ``epochs`` passes over the network's input sizes, each pass
    timed (s); the whole run's time, the first pass (every size new) and the steady passes after it."""
    from algosel.runtime import hook

    step, n = build_network(cfg, name, dtype, device)
    sync = device_sync(device)
    ctx = run_context(cfg, arm, hook)
    ex = None
    if arm.startswith("verify") or arm == "rule":
        with ctx() as ex:
            before = ex.measured_problems  # the executor is the process's: an earlier dtype's count is in it
    t0 = time.perf_counter()
    passes, host, stats = [], [], []
    for _ in range(epochs):
        hook.reset_stats()
        cpu0 = time.thread_time()  # the step's thread: its host time (a worker deciding beside it is not counted)
        passes.append(wall_s(step, ctx, n, sync, first=0))
        host.append(time.thread_time() - cpu0)
        stats.append(hook.stats())
    out = {"net": name, "dtype": dtype, "job": f"run_{arm}", "arm": arm, "batch": cfg.nets[name][0], "inputs": n,
           "passes_s": [round(p, 4) for p in passes], "run_s": time.perf_counter() - t0, "first_pass_s": passes[0],
           "steady_pass_s": statistics.median(passes[1:]) if len(passes) > 1 else None,
           "host_passes_s": [round(h, 4) for h in host], "pass_stats": stats}  # fmt: skip
    if ex is not None:
        out["measured_problems"] = ex.measured_problems - before  # 0 in the warm arm where the cache was warm
        out["routes"] = ex.route_reasons()
        out["model_load_s"] = round(ex.model.seconds, 3)
        out["blocks_aside"], out["trial"] = ex.blocks_aside, [ex.trial_verdict, ex.trial_ratio]
    return out


def run_lines(rows: list[dict]) -> list[str]:
    """Markdown: each multi-scale run's arms, the whole run (s) and its ratio to the default's and to benchmark
    mode's (processes of their own: one run each, no interval), the first pass and a steady pass."""
    runs: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        if "error" not in r and str(r.get("job", "")).startswith("run_"):
            runs.setdefault((r["net"], r["dtype"]), {})[r["arm"]] = r
    if not runs:
        return []
    lines = ["", "| network | dtype | arm | whole run s | x default | x benchmark mode | first pass s | steady pass s "
             "| problems timed | card |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (net, dtype), arms in sorted(runs.items()):
        base, bench = arms.get("default", {}).get("run_s"), arms.get("benchmark", {}).get("run_s")
        for arm in RUN_ARMS:
            r = arms.get(arm)
            if r is None:
                continue
            x_default = f"{r['run_s'] / base:.3f}" if base else ""
            x_bench = f"{r['run_s'] / bench:.3f}" if bench else ""
            steady = "" if r.get("steady_pass_s") is None else f"{r['steady_pass_s']:.3f}"
            card = card_of(r)
            timed = r.get("measured_problems", "")
            lines.append(f"| {net} | {dtype} | {arm} | {r['run_s']:.2f} | {x_default} | {x_bench} | "
                         f"{r['first_pass_s']:.2f} | {steady} | {timed} | {card} |")  # fmt: skip
    return lines


# --------------------------------------------------------------------------------------------------- table
def card_of(row: dict) -> str:
    """The card a row ran on and, where it is not the card's own model, the model the hook ranked with."""
    if row.get("forced_model"):
        return row.get("gpu", "") + " (H200 model forced)"
    name = row.get("model_name") or ""
    return row.get("gpu", "") + (f" ({name})" if name.startswith("joint") else "")


def busy_lines(rows: list[dict]) -> list[str]:
    """Markdown: per paired row, the GPU-bound view: step ms of the default, its busy fraction, the hook's modes and
    benchmark mode paired (x default, 95% interval over slots), verify mode against benchmark mode (paired) and the
    share of benchmark mode's gain it captures (where that gain is 3% or more), host and kernel ms per step (default /
    prediction / verify), the cold first pass against benchmark mode's tuning, and the card."""
    lines = ["| network | dtype | batch | default ms | busy | prediction x | verify x | benchmark mode x (paired) "
             "| verify / benchmark mode | gain captured | host ms D/P/V | kernel ms D/P/V | verify cold s | tuning s "
             "| cold / tuning | card |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in sorted((r for r in rows if r.get("job") == "paired" and "error" not in r),
                    key=lambda r: (r["net"], r["dtype"], r.get("process", 0))):  # fmt: skip
        got = {m: pooled_ratio([r], m) for m in ("predict", "verify", TUNED)}
        got["verify / tuned"] = pooled_ratio([r], "verify", base=TUNED)

        def cell(key: str, got=got) -> str:
            v = got[key]
            return "" if v is None else f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f})"

        def triple(key: str, r=r) -> str:
            return "/".join("" if r.get(f"{m}_{key}") is None else f"{r[f'{m}_{key}']:.1f}"
                            for m in ("default", "predict", "verify"))  # fmt: skip

        captured = ""
        if got[TUNED] is not None and got["verify"] is not None and got[TUNED][0] <= 0.97:
            captured = f"{(1 - got['verify'][0]) / (1 - got[TUNED][0]):.2f}"
        busy, cold, tuning = r.get("default_busy_fraction"), r["verify_cold_first_pass_s"], r.get("tuned_first_pass_s")
        card = card_of(r)
        lines.append(
            f"| {r['net']} | {r['dtype']} | {r['batch']} | {r['default_step_ms']:.2f} | "
            f"{'' if busy is None else f'{busy:.2f}'} | {cell('predict')} | {cell('verify')} | {cell(TUNED)} | "
            f"{cell('verify / tuned')} | {captured} | {triple('host_ms')} | {triple('kernel_ms')} | {cold:.2f} | "
            f"{'' if tuning is None else f'{tuning:.2f}'} | {'' if not tuning else f'{cold / tuning:.3f}'} | {card} |"
        )
    return lines


def summarize(path: Path) -> str:
    """The GPU-bound table, the multi-scale runs, then zoo.py's full table of the same rows."""
    import json

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    zoo_rows = [r for r in rows if not str(r.get("job", "")).startswith("run_")]
    return "\n".join([*busy_lines(zoo_rows), *run_lines(rows), "", summarize_rows(zoo_rows)])


def main(argv: list[str] | None = None, driver=drive) -> None:
    """benchmarks/zoo.py's command line over this zoo (:func:`gpu_config`); ``driver``: what runs the jobs (zoo.py's
    ``main``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = ZooConfig.from_env()
    if "--smoke" in argv:  # every job on the CPU at tiny sizes (the configuration tells the children so)
        argv.remove("--smoke")
        cfg = dataclasses.replace(cfg, smoke=True)
        argv = ["--device", "cpu", "--rounds", "2", "--slot-steps", "1", *argv]
    # GPU-bound steps are long: fewer rounds and slots of 2 steps resolve what 30 rounds of 3 do on host-bound ones,
    # and a paired process of two dtypes (benchmark mode's tuning in each) may take minutes (given flags win)
    argv = ["--rounds", "8", "--slot-steps", "2", "--timeout-s", "420", *argv]
    if "--jobs" in argv:  # "runs": the multi-scale run's arms, a process each
        i = argv.index("--jobs") + 1
        argv[i] = ",".join(j for job in argv[i].split(",")
                           for j in ([f"run_{a}" for a in RUN_ARMS] if job == "runs" else [job]))  # fmt: skip
    if "--summarize" in argv:
        print(summarize(Path(argv[argv.index("--summarize") + 1])))
        return
    zoo.main(argv, script=__file__, description=__doc__, summary=summarize, config=gpu_config(cfg), driver=driver)


if __name__ == "__main__":
    main()
