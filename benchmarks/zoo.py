"""Training steps of a zoo of real networks: the hook against PyTorch's default and benchmark mode (GPU).

    python benchmarks/zoo.py --out zoo.jsonl [--nets resnet50,fpn] [--jobs paired,benchmark,warm] [--timeout-s 240]
    python benchmarks/zoo.py --nets mynet --model my-models/h200-mynet --jobs paired --out mynet.jsonl
    python benchmarks/zoo.py --nets resnet50 --jobs paired --processes 3 --cpus 0-7 --out zoo.jsonl
    python benchmarks/zoo.py --nets squeezenet1_1 --jobs paired --aa --out zoo.jsonl
    python benchmarks/zoo.py --summarize zoo.jsonl
    python benchmarks/zoo.py --pool run1.jsonl run2.jsonl   # prediction mode pooled over the processes of files

Every job runs in a process of its own (PyTorch caches the plan it picked per shape in a process whatever the
benchmark flag, so benchmark mode needs its own), and appends one JSON line per (network, dtype) to ``--out``:

- ``paired``: PyTorch's default, the hook in prediction mode (``hook.enabled()``), in verify mode
  (``hook.enabled(verify=3)``) and, as a control, the hook with every convolution passing through and routed in
  every block (``native``, ``step_aside=False``: what the dispatch alone costs) side by side in one
  process (pass-through convolutions share PyTorch's plans), and in autocast steps benchmark mode as a fifth
  (``cudnn.benchmark`` with cuDNN's TF32 switch off: the float16 convolutions' math does not change, but PyTorch
  keys its plans by the switch, so benchmark mode tunes plans of its own in the same process, its first pass
  timed): slots of a few steps in ABBA rotation; medians of the
  slot times per mode and of their ratios to the neighbouring default slot; the host CPU time per step (of the
  same slots), and the GPU kernel time per step (torch.profiler). Before that, the
  first step of verify mode with an empty persistent cache (cold: it measures every new problem), after the
  default's own first step (PyTorch's plans are then warm). The hook is switched on around every step, as a user
  writes it.
- ``cold``: the first passes of the paired job alone (default, verify cold, prediction, benchmark mode's tuning in
  autocast), without its steady-state rotation.
- ``benchmark``: ``cudnn.benchmark = True``: its first step (tuning) and its steady step time.
- ``warm``: verify mode's first step in a new process with the persistent cache the paired job filled, against
  PyTorch's default's first step there.

Networks: torchvision's (classification, segmentation) at batch sizes people train with, a detection FPN head
(algosel.measure.suites.FPNHead) over 20 input sizes that no records hold (a new size at every step), and the
tutorial's MyNet (examples/mynet.py, batch 16 at 128x128). Each in float32 (TF32 allowed, NCHW) and float16
autocast with channels_last. ``--model`` gives the hook another selector (a model directory).

Host-bound steps differ more between processes than within one (the same configuration measured 0.967x and 1.038x
of the default in two processes): ``--processes N`` runs each job N times, each in a new process, and the summary
pools them (the median of every slot ratio of every process, with an interval that resamples processes, then slots
within them). ``--cpus 0-7`` pins each process (and the threads it starts) to those cores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compare import median_interval, paired_ratios, ratio_of_medians

#: name -> (batch, input size, kind)
NETS: dict[str, tuple[int, int, str]] = {
    "resnet50": (32, 224, "cls"),
    "resnext50_32x4d": (32, 224, "cls"),
    "efficientnet_b0": (64, 224, "cls"),
    "efficientnet_v2_s": (32, 224, "cls"),
    "mobilenet_v3_large": (64, 224, "cls"),
    "regnet_y_800mf": (64, 224, "cls"),
    "convnext_tiny": (32, 224, "cls"),
    "densenet121": (32, 224, "cls"),
    "squeezenet1_1": (64, 224, "cls"),
    "shufflenet_v2_x1_0": (64, 224, "cls"),
    "deeplabv3_resnet50": (4, 384, "seg"),
    "fcn_resnet50": (4, 384, "seg"),
    "fpn": (1, 0, "fpn"),
    "mynet": (16, 128, "example"),
}
DTYPES = ("float32", "amp")
#: 20 detection input sizes (multiples of 32 around 672x1024, a common multi-scale training range), none of them
#: among the FPN suite's 20 sizes around 800x1216 that the records hold.
FPN_SIZES = tuple((h, w) for h in (608, 640, 672, 704, 736) for w in (960, 992, 1024, 1088))
MODES = ("default", "predict", "verify", "native")
#: The paired job's fifth mode in autocast steps: benchmark mode (below, ``_tuned``).
TUNED = "tuned"
#: The model directory of ``--model`` (None: the shipped model for this GPU).
MODEL = os.environ.get("ALGOSEL_ZOO_MODEL") or None
#: Which of ``--processes`` repeated processes this is (0 in a job's first).
PROCESS = int(os.environ.get("ALGOSEL_ZOO_PROCESS", "0"))
#: A quick run of the driver on CPU (tests): small FPN sizes, one block.
SMOKE = os.environ.get("ALGOSEL_ZOO_SMOKE") == "1"
#: ``--aa``: the paired job's rotation gets the default a second time, in the slots farthest from the first's
#: (D P V N A, then reversed): what two identical modes read apart is the measurement's own floor and position bias.
AGAIN = "again"
AA = os.environ.get("ALGOSEL_ZOO_AA") == "1"
#: Verify mode looks at the device before timing a new problem (``Executor.look_first``, the default; off with
#: ``--no-look-first``); its cold cost is then counted over the passes until every signature is decided
#: (:data:`SETTLE_PASSES` at most).
LOOK_FIRST = os.environ.get("ALGOSEL_ZOO_NO_LOOK_FIRST") != "1"
#: ``--min-gain-us`` / ``--verify-k``: the hook's least gain and verify mode's shortlist (None: the hook's defaults),
#: for prediction and verify mode; rows record them.
MIN_GAIN_US = float(os.environ["ALGOSEL_ZOO_MIN_GAIN_US"]) if os.environ.get("ALGOSEL_ZOO_MIN_GAIN_US") else None
VERIFY_K = int(os.environ.get("ALGOSEL_ZOO_VERIFY_K") or 3)
#: ``--probe-calls``: calls a switch looks at the device before it is kept (None: the hook's; 0 switches at once and
#: verify mode times at the first call, without looking first), for prediction and verify mode; rows record it.
PROBE_CALLS = int(os.environ["ALGOSEL_ZOO_PROBE_CALLS"]) if os.environ.get("ALGOSEL_ZOO_PROBE_CALLS") else None
SETTLE_PASSES = 40
#: ``--budget-s``: what the first job of a run is expected to take (later ones: the longest so far).
BUDGET_FIRST_JOB_S = 60.0
#: ``--force``: the hook's model (``--model``, else the shipped one) loaded for this GPU whatever GPU it was trained
#: for (an H100 running the H200's model); rows say so (``forced_model``).
FORCE = os.environ.get("ALGOSEL_ZOO_FORCE") == "1"
#: Builders of networks beyond this file's kinds, by kind (benchmarks/zoo_gpu.py registers its own):
#: ``builder(name, batch, size, memory_format, device) -> (model, inputs)``, ``inputs`` a list of argument lists
#: (a step takes the next one in turn).
BUILDERS: dict = {}


# ----------------------------------------------------------------------------------------------- one job
def build_network(name: str, dtype: str, device: str):
    import torch

    from algosel.measure.suites import FPNHead

    batch, size, kind = NETS[name]
    torch.manual_seed(0)
    amp = dtype == "amp"
    mf = torch.channels_last if amp else torch.contiguous_format
    if kind in BUILDERS:
        model, inputs = BUILDERS[kind](name, batch, size, mf, device)
    elif kind == "fpn":
        model = FPNHead().to(device).to(memory_format=mf)
        sizes = [(h // 32, w // 32) for h, w in FPN_SIZES[:3]] if SMOKE else FPN_SIZES  # smoke: a few ms a step
        inputs = [
            [t.contiguous(memory_format=mf) for t in model.example_inputs(h, w, batch, device=device)] for h, w in sizes
        ]
    elif kind == "example":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
        from mynet import make_model

        model = make_model().to(device).to(memory_format=mf)
        batch, size = (2, 32) if SMOKE else (batch, size)
        inputs = [[torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=mf)]]
    else:
        import torchvision

        factory = getattr(torchvision.models.segmentation if kind == "seg" else torchvision.models, name)
        # no weights of any kind (the GPU machine has no network): segmentation models load their backbone's
        # ImageNet weights unless told not to
        extra = {"aux_loss": False, "weights_backbone": None} if kind == "seg" else {}
        model = factory(weights=None, **extra).to(device)
        model = model.to(memory_format=mf)
        inputs = [[torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=mf)]]
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    # a CPU run (the smoke run) autocasts to bfloat16: the CPU's float16 convolutions are reference kernels, 5x
    # slower than float32 there, and the smoke run checks the driver, not the kernels
    half = torch.float16 if device.startswith("cuda") else torch.bfloat16

    def step(i: int):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=half, enabled=amp):
            out = model(*inputs[i % len(inputs)])
        if isinstance(out, dict):
            out = out["out"]
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum(o.float().square().mean() for o in outs)
        loss.backward()
        opt.step()

    return step, len(inputs)


def mode_context(mode: str, hook):
    """The context each mode's steps run in. Prediction mode keeps its decisions in a cache of its own, so that it
    does not reuse what verify mode measured in the same run; the control passes every convolution through."""
    from algosel.runtime.native import cache_root

    sel = selector_kwargs()
    # the least gain and the probe calls apply where the hook decides (prediction and verify mode); the native mode
    # sets its own least gain and never switches
    deciding = {} if MIN_GAIN_US is None else {"min_gain_us": MIN_GAIN_US}
    if PROBE_CALLS is not None:
        deciding["probe_calls"] = PROBE_CALLS
    # a cache folder per configuration: decisions skipped under one least gain are not read under another
    config = "" if MIN_GAIN_US is None and VERIFY_K == 3 else f"-g{MIN_GAIN_US}-k{VERIFY_K}"
    config += "" if PROBE_CALLS is None else f"-probe{PROBE_CALLS}"
    if mode == "predict":
        predict_folder = cache_root() / f"zoo-predict{config}"  # made once, as verify mode's: a step pays nothing
        return lambda: hook.enabled(cache=predict_folder, **sel, **deciding)
    if mode == "verify":
        # a cache of its own per repeated process, so that each process's cold first pass is cold (the warm job
        # reads the first process's)
        folder = cache_root() / (f"zoo-verify{config}" + ("" if PROCESS == 0 else f"-p{PROCESS}"))
        return lambda: hook.enabled(verify=VERIFY_K, cache=folder, look_first=LOOK_FIRST, **sel, **deciding)
    if mode == "native":  # routed in every block (never stepping aside): what the dispatch costs
        return lambda: hook.enabled(cache=False, min_gain_us=math.inf, step_aside=False, **sel)
    if mode == TUNED:
        return _tuned
    return contextlib.nullcontext


@contextlib.contextmanager
def _tuned():
    """Benchmark mode (``cudnn.benchmark``) beside the default in one process, for autocast steps: with cuDNN's TF32
    switch off, which leaves their float16 convolutions' math as it is, but is part of the key PyTorch keeps a
    convolution's plan under, so benchmark mode tunes and keeps plans of its own instead of reusing the default's."""
    import torch

    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved


_selectors: dict = {}


def _selector(cls, path: str, force: bool = False):
    """One Selector per model directory (the hook's executors are shared per configuration, the selector's
    identity included)."""
    if path not in _selectors:
        _selectors[path] = cls.load(path, force=force)
    return _selectors[path]


def selector_kwargs(load=None) -> dict:
    """The hook's ``selector=`` for ``--model`` and ``--force`` (none: the shipped model for this GPU); in the smoke
    run, also the device seam that routes the CPU's calls as a GPU's (the hook routes CUDA tensors alone, so the
    smoke run on the CPU would otherwise exercise none of its paths). ``load(path, force=)`` loads the model
    directory (default: ``Selector.load``, once per directory in this process)."""
    seam = {"device_probe": _cpu_as_cuda()} if SMOKE else {}
    if not MODEL and not FORCE:
        return seam
    from algosel.learn.models import default_model_dir
    from algosel.learn.selector import Selector

    path = MODEL or str(default_model_dir())
    return {**seam, "selector": _selector(Selector, path, force=FORCE) if load is None else load(path, force=FORCE)}


@functools.cache
def _cpu_as_cuda():
    """One seam per process: executors of one configuration are shared only where their seams are the same."""
    from algosel.runtime.standins import CpuAsCuda

    return CpuAsCuda()


def run_steps(step, ctx, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        with ctx():
            step(i)


def wall_s(step, ctx, count: int, sync, first: int = 0) -> float:
    sync()
    t0 = time.perf_counter()
    run_steps(step, ctx, count, first)
    sync()
    return time.perf_counter() - t0


def rotate(step, ctx: dict, rounds: int, steps: int, sync, host: dict | None = None,
           slots: dict | None = None, threads: dict | None = None) -> dict[str, list[float]]:  # fmt: skip
    """ms per step of each mode's slots of ``steps`` steps, the modes in ABBA rotation for ``rounds`` rounds (see
    :func:`round_order`): the slots of one round pair up for their ratios. ``host``, if given,
    receives each slot's host ms per step (CPU time of the process, every thread, to the last step's return: the
    synchronisation after it not included), measured in the same rotation, so that drift between blocks of this
    machine does not read as a difference between modes. ``slots``, if given, holds per mode a context entered
    around each of its slots (``ctx``'s is entered around each step). ``threads``, if given, receives each slot's
    CPU ms per step of every thread by name (:func:`thread_cpu_ns`), read outside the timed region: the main
    thread's includes the synchronisation at the slot's end."""
    times: dict[str, list[float]] = {m: [] for m in ctx}
    if host is not None:
        host.update({m: [] for m in ctx})
    if threads is not None:
        threads.update({m: [] for m in ctx})
    with frozen_heap():
        for r in range(rounds):
            for m in round_order(list(ctx), r):
                # Python's cyclic collector runs when allocations cross its thresholds: collected before each slot,
                # a mode's garbage is not collected in the next mode's slot (its own collections still count in its
                # own)
                gc.collect()
                sync()
                before = thread_cpu_ns() if threads is not None else None
                with slots[m]() if slots else contextlib.nullcontext():
                    t0, c0 = time.perf_counter(), time.process_time()
                    run_steps(step, ctx[m], steps)
                    cpu_s = time.process_time() - c0
                    sync()
                    times[m].append(1e3 * (time.perf_counter() - t0) / steps)
                if host is not None:
                    host[m].append(1e3 * cpu_s / steps)
                if before is not None:
                    after = thread_cpu_ns()
                    threads[m].append({k: (after[k] - before.get(k, 0)) / 1e6 / steps for k in after})
    return times


def thread_cpu_ns() -> dict[str, int]:
    """CPU time (ns) of each thread of this process now, summed by thread name (``main``: the main thread).

    Read through each thread's CPU clock (Linux's clock id of a thread id), so that a difference in host time
    between modes can be placed: the main thread enqueueing work, autograd's threads running the backward, or
    threads of a library. Empty where the clocks cannot be read."""
    pid, out = os.getpid(), {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    for tid in tids:
        try:
            ns = time.clock_gettime_ns(((~tid) << 3) | 6)  # the kernel's per-thread CPUCLOCK_SCHED clock id
            name = "main" if tid == pid else Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended between the listing and the read
            continue
        out[name] = out.get(name, 0) + ns
    return out


def thread_deltas_ms(threads: dict[str, list[dict[str, float]]], mode: str, base: str = "default"
                     ) -> dict[str, float]:  # fmt: skip
    """Per thread name, the median over rounds of ``mode``'s slot CPU ms per step minus ``base``'s slot of the
    same round: where ``mode``'s extra host time is spent."""
    a, b = threads.get(mode) or [], threads.get(base) or []
    names = sorted({k for slot in (*a, *b) for k in slot})
    return {k: round(statistics.median(x.get(k, 0.0) - y.get(k, 0.0) for x, y in zip(a, b)), 4)
            for k in names} if a and len(a) == len(b) else {}  # fmt: skip


def round_order(modes: list[str], r: int) -> list[str]:
    """The order of the modes' slots in round ``r``: pairs of rounds in ABBA order (a drift that is linear over a
    pair of rounds adds the same to every mode), each pair in an order of its own drawn at random (seeded by the
    pair's number; the first pair in ``modes``'s order). Over many rounds a mode then takes every place in the
    round and follows every other mode, so that what a place costs or gains (right after the default's slot, first
    after a reversal, two slots of one mode in a row) is not read as a difference between modes."""
    pair = r // 2
    order = list(modes) if pair == 0 else random.Random(pair).sample(modes, len(modes))  # noqa: S311
    return order if r % 2 == 0 else order[::-1]


@contextlib.contextmanager
def frozen_heap():
    """The objects alive now moved out of the cyclic collector's reach for the block (``gc.freeze``).

    With torch, torchvision and the selector loaded a process holds ~400,000 tracked objects, and a full collection
    walks them all: 0.2-0.3 s on these machines. Collected before every slot, that was most of a rotation's time,
    and it left the caches cold for the slot after it. Frozen, the collection before a slot looks only at what the
    steps allocated since, which is what it is there to clear; collections inside a slot behave as in any process
    (every mode's the same way)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _host_ms(step, ctx, count: int, sync) -> float:
    """Host time per step: CPU time of the process (every thread: autograd runs the backward of CUDA tensors on
    threads of its own) from the first step's start to the last step's return, the synchronisation after them not
    included."""
    sync()
    t0 = time.process_time()
    run_steps(step, ctx, count)
    host = time.process_time() - t0
    sync()
    return 1e3 * host / count


def _kernel_ms(step, ctx, n_inputs: int) -> float:
    """GPU kernel time per step (torch.profiler): the summed duration of every kernel of the steps."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_steps(step, ctx, n_inputs)
        torch.cuda.synchronize()
    total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return total_us / 1e3 / n_inputs


def _first_passes(step, ctx: dict, n: int, sync, out: dict) -> None:
    """The first pass of each mode, in this order: PyTorch's default (its plans are warm after it), verify mode with
    an empty persistent cache (cold: it measures the new problems worth it), prediction mode, and benchmark mode's
    tuning where it runs in this process."""
    out["default_first_pass_s"] = wall_s(step, ctx["default"], n, sync)
    ex = _executor(ctx, "verify")  # the executor of the verify mode's configuration (its own cache folder)
    before = ex.planning_s, ex.measured_problems  # counted per executor: a process's earlier dtype's too
    t0 = time.perf_counter()
    out["verify_cold_first_pass_s"] = wall_s(step, ctx["verify"], n, sync)
    out["verify_look_first"] = LOOK_FIRST
    if LOOK_FIRST:  # the timing comes after the looks: count every pass until no signature is undecided
        settle_verify(step, ctx, n, sync, out)
    out["verify_planning_s"] = ex.planning_s - before[0]
    out["verify_measured_problems"] = ex.measured_problems - before[1]
    out["verify_cold_total_s"] = time.perf_counter() - t0
    out["predict_first_pass_s"] = wall_s(step, ctx["predict"], n, sync)
    if TUNED in ctx:  # its tuning: every shape is new to its plan keys
        out["tuned_first_pass_s"] = wall_s(step, ctx[TUNED], n, sync)


def _executor(ctx, mode: str):
    """The mode's executor (shared per configuration), found by entering one block of it the first time only: an
    empty block in the middle of a step trial would be one of its blocks."""
    key = (id(ctx), mode)
    if key not in _executors:
        with ctx[mode]() as ex:
            _executors[key] = ex
    return _executors[key]


_executors: dict = {}


def undecided_count(ctx, mode: str = "verify") -> int:
    """Call signatures of the mode's executor still looking at the device or on probation, and its step trial
    while under way or due (``Executor.deciding``)."""
    return _executor(ctx, mode).deciding()


def settle_verify(step, ctx: dict, n: int, sync, out: dict) -> None:
    """Verify mode's passes after its first until every signature is decided (at most :data:`SETTLE_PASSES`), and
    the cold cost as one first pass: their time and the first pass's, less the default's steady pass for each
    pass after the first. Compared with benchmark mode's tuning as the first pass alone is without looking."""
    passes, total = 1, out["verify_cold_first_pass_s"]
    while passes < SETTLE_PASSES and undecided_count(ctx):
        total += wall_s(step, ctx["verify"], n, sync)
        passes += 1
    steady = wall_s(step, ctx["default"], n, sync)
    out["verify_cold_passes"], out["verify_cold_raw_s"], out["default_steady_pass_s"] = passes, total, steady
    out["verify_cold_first_pass_s"] = total - (passes - 1) * steady


def job_cold(name: str, dtype: str, device: str = "cuda") -> dict:
    """The first passes alone (as the paired job measures them, without its steady-state rotation)."""
    import torch

    from algosel.runtime import hook

    step, n = build_network(name, dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    modes = ("default", "verify", "predict", *((TUNED,) if dtype == "amp" else ()))
    ctx = {m: mode_context(m, hook) for m in modes}
    out: dict = {"net": name, "dtype": dtype, "job": "cold", "batch": NETS[name][0], "inputs": n}
    if MODEL:
        out["model"] = MODEL
    _first_passes(step, ctx, n, sync, out)
    return out


def job_paired(name: str, dtype: str, device: str = "cuda", rounds: int = 30, slot_steps: int = 3) -> dict:
    import torch

    from algosel.runtime import hook

    step, n = build_network(name, dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    modes = (*MODES, TUNED) if dtype == "amp" else MODES
    modes = (*modes, AGAIN) if AA else modes
    ctx = {m: mode_context(m, hook) for m in modes}
    rounds = 2 if SMOKE else rounds
    out: dict = {"net": name, "dtype": dtype, "job": "paired", "batch": NETS[name][0], "inputs": n}
    if MODEL:
        out["model"] = MODEL
    _first_passes(step, ctx, n, sync, out)
    for m in modes:
        run_steps(step, ctx[m], 2)
    # prediction mode's probation and step trial run their course before the timed rotation, as verify mode's did
    # in its settle passes (a steady state, not the blocks that decide it)
    settle_passes = 0
    for _ in range(SETTLE_PASSES):
        if not undecided_count(ctx, "predict"):
            break
        run_steps(step, ctx["predict"], n)
        settle_passes += 1
    # steps until the hook's default mode had decided everything (its model loads beside the steps, its decisions
    # are made beside them): the first pass, the two warm-up steps, the settle passes
    out["predict_settled_after_steps"] = n + 2 + settle_passes * n
    out["predict_model_load_s"] = round(_executor(ctx, "predict").model.seconds, 3)
    # Slots of a few steps (a pass over the inputs for the FPN) in rotation (D P V N, N V P D, then pairs of rounds
    # in orders drawn at random), each timed to its end: host-bound steps of this machine vary by 30% from block to
    # block, far more than between neighbours, and single steps by 10-15% (a slot of 3 averages that down).
    steps = n if n > 1 else max(1, slot_steps)
    out["slot_steps"] = steps
    host: dict[str, list[float]] = {}
    threads: dict[str, list[dict[str, float]]] = {}
    times = rotate(step, ctx, rounds, steps, sync, host, threads=threads)
    for m in modes:
        out[f"{m}_step_ms"] = statistics.median(times[m])
        out[f"{m}_steps_ms"] = [round(t, 3) for t in times[m]]
    for m in modes[1:]:
        # the median of the ratios of neighbouring steps, and the ratio of the medians
        out[f"{m}_vs_default"] = float(statistics.median(paired_ratios(times[m], times["default"])))
        out[f"{m}_vs_default_of_medians"] = out[f"{m}_step_ms"] / out["default_step_ms"]
    for m in modes:
        out[f"{m}_host_ms"] = statistics.median(host[m])
        out[f"{m}_hosts_ms"] = [round(t, 3) for t in host[m]]
        out[f"{m}_threads_ms"] = {k: round(statistics.median(s.get(k, 0.0) for s in threads[m]), 4)
                                  for k in sorted({k for s in threads[m] for k in s})}  # fmt: skip
        if m != "default":
            out[f"{m}_threads_vs_default_ms"] = thread_deltas_ms(threads, m)
        if device == "cuda":
            out[f"{m}_kernel_ms"] = _kernel_ms(step, ctx[m], n)
            # the share of the step the GPU runs kernels: >= 0.9 is a GPU-bound step
            out[f"{m}_busy_fraction"] = out[f"{m}_kernel_ms"] / out[f"{m}_step_ms"]
    for m in ("verify", "predict"):
        # calls of one more pass by route (empty where the executor steps aside), and its routes by reason
        hook.reset_stats()
        run_steps(step, ctx[m], n)
        out[f"{m}_stats"] = hook.stats()
        ex = _executor(ctx, m)
        out[f"{m}_routes"], out[f"{m}_blocks_aside"] = ex.route_reasons(), ex.blocks_aside
        # probation's pooled looks at the device: forward calls, busy ones, backward calls, busy ones
        looks = ex.looks
        out[f"{m}_looks"] = [looks.calls, looks.busy, looks.back_calls, looks.back_busy]
        # the step trial's verdict and its median ratio of block spans, switched / PyTorch's
        out[f"{m}_trial"] = [ex.trial_verdict, None if math.isnan(ex.trial_ratio) else round(ex.trial_ratio, 4)]
    cache = _executor(ctx, "verify").runtime_cache()
    if cache is not None:  # what verify mode's timing found, per problem: each candidate's ms
        out["verify_measured"] = {d.problem: {c: round(t, 4) for c, t in d.times_ms.items()}
                                  for d in cache.decisions() if d.source == "measured"}  # fmt: skip
    return out


def job_benchmark(name: str, dtype: str, device: str = "cuda", blocks: int = 4, per_block: int = 5) -> dict:
    import torch

    torch.backends.cudnn.benchmark = True
    step, n = build_network(name, dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ctx = contextlib.nullcontext
    out: dict = {"net": name, "dtype": dtype, "job": "benchmark", "batch": NETS[name][0], "inputs": n}
    out["benchmark_first_pass_s"] = wall_s(step, ctx, n, sync)
    run_steps(step, ctx, 2)
    per_block = max(per_block, n)
    out["benchmark_step_ms"] = statistics.median(
        1e3 * wall_s(step, ctx, per_block, sync) / per_block for _ in range(blocks)
    )
    # Host and kernel time as the paired job measures them: the step time of this separate process is compared
    # with the paired job's across processes (host-bound steps differ by up to 15% between processes), its kernel
    # time much less so.
    out["benchmark_host_ms"] = _host_ms(step, ctx, per_block, sync)
    if device == "cuda":
        out["benchmark_kernel_ms"] = _kernel_ms(step, ctx, n)
        out["benchmark_busy_fraction"] = out["benchmark_kernel_ms"] / out["benchmark_step_ms"]
    return out


def job_warm(name: str, dtype: str, device: str = "cuda") -> dict:
    import torch

    from algosel.runtime import hook

    step, n = build_network(name, dtype, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out: dict = {"net": name, "dtype": dtype, "job": "warm", "batch": NETS[name][0], "inputs": n}
    out["default_first_pass_s"] = wall_s(step, mode_context("default", hook), n, sync)
    verify = mode_context("verify", hook)
    with verify() as ex:
        before = ex.measured_problems  # the executor is the process's: an earlier dtype's count is in it
    out["verify_warm_first_pass_s"] = wall_s(step, verify, n, sync)
    with verify() as ex:
        # more than 0: the cache was not warm for these problems (the paired job that fills it ran elsewhere)
        out["verify_warm_measured_problems"] = ex.measured_problems - before
    return out


JOBS = {"paired": job_paired, "cold": job_cold, "benchmark": job_benchmark, "warm": job_warm}


# ----------------------------------------------------------------------------------------------- driving
def cpu_set(text: str) -> set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _model_name() -> str | None:
    """The name of the model the hook loads in this process (``--model``, else the shipped one for this GPU)."""
    if MODEL:
        return Path(MODEL).name
    try:
        from algosel.learn.models import default_model_dir

        return default_model_dir().name
    except Exception:  # noqa: BLE001 - a row without the name rather than no row
        return None


def _child(args) -> int:
    if args.cpus:
        os.sched_setaffinity(0, cpu_set(args.cpus))  # before torch starts its threads: they inherit it
    for dtype in args.dtype.split(","):
        try:
            kwargs = {"rounds": args.rounds, "slot_steps": args.slot_steps} if args.job == "paired" else {}
            result = JOBS[args.job](args.net, dtype, args.device, **kwargs)
            result["process"] = PROCESS
            if FORCE:
                result["forced_model"] = True
            if model_name := _model_name():
                result["model_name"] = model_name  # the model the hook ranked with (H100: the joint model)
            if device_name := _device_name(args.device):
                result["gpu"] = device_name  # timings of different cards are never compared
            if MIN_GAIN_US is not None or VERIFY_K != 3 or PROBE_CALLS is not None:
                result["hook_config"] = {"min_gain_us": MIN_GAIN_US, "verify_k": VERIFY_K}
                if PROBE_CALLS is not None:
                    result["hook_config"]["probe_calls"] = PROBE_CALLS
            result["compiled_path"] = compiled_path_status()
        except Exception as exc:  # noqa: BLE001 - a failed dtype is a result row; the next one still runs
            import traceback

            result = {"net": args.net, "dtype": dtype, "job": args.job,
                      "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}"}  # fmt: skip
        print("RESULT " + json.dumps(result, default=float), flush=True)
    return 0


def _device_name(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name()


def compiled_path_status() -> str:
    from algosel.runtime import native

    return native.status()


def missing_compiled_path(device: str) -> str | None:
    """Why a run on ``device`` would measure the hook without its compiled path (a CUDA device where the extension
    is not built or does not load: every hooked call would take the Python path), else None."""
    if not device.startswith("cuda"):
        return None
    status = compiled_path_status()
    if status.startswith("built") and "does not load" not in status:
        return None
    return f"the compiled path: {status}"


def run_order(nets: list[str], jobs: list[str], processes: int) -> list[tuple[str, str, int]]:
    """(job, network, process) in the order they run: network by network, the jobs of each process one after
    another, their order reversed every second process (A B, B A, ...) so that jobs compared across processes
    (verify mode's warm steps in the paired job against benchmark mode's in its own) share the machine's drift.
    With ``warm`` among the jobs the order stays: a warm job reads the cache its process's paired job filled."""
    runs = []
    for net in nets:
        for k in range(processes):
            order = jobs if k % 2 == 0 or any(j.endswith("warm") for j in jobs) else jobs[::-1]
            runs += [(job, net, k) for job in order]
    return runs


def done_rows(out: Path) -> set[tuple[str, str, str, int]]:
    """(job, network, dtype, process) of the rows of ``out`` that hold a result (not an error): what ``--resume``
    does not run again."""
    if not out.is_file():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["job"], r["net"], r["dtype"], r.get("process", 0)) for r in rows if "error" not in r}


def drive(args, script: str = __file__, summary=None) -> None:
    """Run the jobs, a process each (``script --child``), appending their rows to ``--out``; then print the table.
    ``--resume``: jobs whose rows are there already are not run again. ``--budget-s``: a job is started only where
    the time left holds the longest job of this run so far (the first: ``BUDGET_FIRST_JOB_S``), and is stopped when
    the budget is spent (an error row, which ``--resume`` runs again); a later call with ``--resume`` goes on."""
    missing = None if args.python_path else missing_compiled_path(args.device)
    if missing:
        raise SystemExit(f"zoo.py: {missing}; build it (algosel build-ext) or pass --python-path to measure without it")
    nets = list(NETS) if args.nets == "all" else args.nets.split(",")
    jobs = args.jobs.split(",")
    out = Path(args.out)
    done = done_rows(out) if args.resume else set()
    started, job_times_s = time.perf_counter(), []
    for job, net, process in run_order(nets, jobs, args.processes):
        dtypes = args.dtypes.split(",") if job != "benchmark" or net != "fpn" else ("float32",)
        dtypes = [d for d in dtypes if (job, net, d, process) not in done]
        if not dtypes:
            continue
        timeout_s = args.timeout_s
        if args.budget_s:
            left_s = args.budget_s - (time.perf_counter() - started)
            if left_s < min(max(job_times_s, default=BUDGET_FIRST_JOB_S), timeout_s):
                print(f"budget: {args.budget_s:g} s would be passed; stopping before {job} {net} (run again with "
                      f"--resume to go on)", flush=True)  # fmt: skip
                break
            timeout_s = min(timeout_s, left_s)
        # One process per (job, network): the dtypes share it (their shapes differ, so do PyTorch's plans).
        cmd = [sys.executable, script, "--child", "--job", job, "--net", net, "--dtype", ",".join(dtypes),
               "--device", args.device, "--rounds", str(args.rounds),
               "--slot-steps", str(args.slot_steps),
               *(["--cpus", args.cpus] if args.cpus else [])]  # fmt: skip
        env = dict(
            os.environ,
            ALGOSEL_ZOO_PROCESS=str(process),
            **({"ALGOSEL_ZOO_MODEL": args.model} if args.model else {}),
            **({"ALGOSEL_ZOO_AA": "1"} if args.aa else {}),
            **({"ALGOSEL_ZOO_NO_LOOK_FIRST": "1"} if args.no_look_first else {}),
            **({"ALGOSEL_ZOO_MIN_GAIN_US": str(args.min_gain_us)} if args.min_gain_us is not None else {}),
            **({"ALGOSEL_ZOO_VERIFY_K": str(args.verify_k)} if args.verify_k is not None else {}),
            **({"ALGOSEL_ZOO_PROBE_CALLS": str(args.probe_calls)} if args.probe_calls is not None else {}),
            **({"ALGOSEL_ZOO_FORCE": "1"} if args.force else {}),
        )
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
            rows = [json.loads(ln[7:]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            done = {r["dtype"] for r in rows}
            rows += [{"net": net, "dtype": d, "job": job, "error": proc.stderr[-1500:] or "no result"}
                     for d in dtypes if d not in done]  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            out_text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            rows = [json.loads(ln[7:]) for ln in out_text.splitlines() if ln.startswith("RESULT ")]
            done = {r["dtype"] for r in rows}
            rows += [{"net": net, "dtype": d, "job": job, "error": f"timed out after {timeout_s:.0f} s"}
                     for d in dtypes if d not in done]  # fmt: skip
        job_s = round(time.perf_counter() - t0, 1)
        job_times_s.append(job_s)
        for row in rows:
            row["job_s"] = job_s
            with out.open("a") as fh:
                fh.write(json.dumps(row, default=float) + "\n")
            keys = ("default_step_ms", "predict_vs_default", "verify_vs_default", "native_vs_default",
                    "benchmark_step_ms", "error")  # fmt: skip
            brief = {k: row[k] for k in keys if k in row}
            print(f"{job:9s} {net:20s} {row['dtype']:7s} {job_s:6.1f}s {json.dumps(brief, default=float)[:300]}",
                  flush=True)  # fmt: skip
    print((summary or summarize)(out))


def _slot_ratios(row: dict, mode: str, base: str = "default"):
    """The ratios of ``mode``'s slots to their neighbouring ``base`` slots in one paired row (None: not
    recorded)."""
    return paired_ratios(row.get(f"{mode}_steps_ms"), row.get(f"{base}_steps_ms"))


def pooled_ratio(rows: list[dict], mode: str, resamples: int = 2000, base: str = "default"
                 ) -> tuple[float, float, float] | None:  # fmt: skip
    """The median slot ratio of ``mode`` to ``base`` over the paired rows of one (network, dtype), each from a
    process of its own, with a 95% bootstrap interval that resamples the processes and then the slots within each
    (host-bound steps vary more between processes than within one); None where fewer than 4 slots were recorded."""
    per_process = [r for r in (_slot_ratios(row, mode, base) for row in rows) if r is not None]
    if sum(len(r) for r in per_process) < 4:
        return None
    return median_interval(per_process, resamples)


def cross_process_ratio(a_ms: list[float], b_ms: list[float], resamples: int = 2000
                        ) -> tuple[float, float, float] | None:  # fmt: skip
    """The median of ``a_ms`` over the median of ``b_ms``, each a value per process (a step or kernel time of two
    configurations that cannot share a process), with a 95% bootstrap interval that resamples the processes of each
    side; None where either side is empty. With one process on a side the interval holds only the other side's
    spread: host-bound steps vary by up to 15% between processes, so read it with the processes counted."""
    if not len(a_ms) or not len(b_ms):
        return None
    return ratio_of_medians(a_ms, b_ms, resamples)


def config_label(row: dict) -> str:
    """``, least gain 5 us, verify k 3`` for a row made with ``--min-gain-us``, ``--verify-k`` or ``--probe-calls``
    (``, probe calls 0`` then), else ``""``."""
    config = row.get("hook_config")
    if not config:
        return ""
    gain = "" if config.get("min_gain_us") is None else f", least gain {config['min_gain_us']:g} us"
    probe = "" if config.get("probe_calls") is None else f", probe calls {config['probe_calls']}"
    return f"{gain}, verify k {config.get('verify_k', 3)}{probe}"


def own_process_lines(rows: list[dict]) -> list[str]:
    """Per (network, dtype) where both ran: verify mode's warm steps (paired job) against benchmark mode's steady
    steps (benchmark job, a process of its own), in wall time and in kernel time per step, and verify mode's cold
    first pass against benchmark mode's tuning (its first pass), pooled over the processes
    (:func:`cross_process_ratio`)."""
    by: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in rows:
        if "error" not in r and r.get("job") in ("paired", "benchmark") and not r.get("model"):
            # paired rows per hook configuration, each against every benchmark row of its (network, dtype)
            job = r["job"] + (config_label(r) if r["job"] == "paired" else "")
            by.setdefault((r["net"], r["dtype"]), {}).setdefault(job, []).append(r)
    lines = []
    for (net, dtype), jobs in sorted(by.items()):
        bench = jobs.get("benchmark", [])
        for job, paired in sorted(jobs.items()):
            if job != "benchmark" and bench:
                lines.append(_own_process_line(net, dtype + job[len("paired") :], paired, bench))
    return lines


def _own_process_line(net: str, dtype: str, paired: list[dict], bench: list[dict]) -> str:
    parts = []
    for what, a_key, b_key in (
        ("steps", "verify_step_ms", "benchmark_step_ms"),
        ("kernels", "verify_kernel_ms", "benchmark_kernel_ms"),
        ("cold / tuning", "verify_cold_first_pass_s", "benchmark_first_pass_s"),
    ):
        got = cross_process_ratio([r[a_key] for r in paired if r.get(a_key)], [r[b_key] for r in bench if r.get(b_key)])
        if got is not None:
            parts.append(f"{what} {got[0]:.3f} ({got[1]:.3f}-{got[2]:.3f})")
    return (f"verify mode (warm) / benchmark mode in processes of their own ({net}, {dtype}; "
            f"{len(paired)} + {len(bench)} processes): " + ", ".join(parts))  # fmt: skip


def summarize(path: Path) -> str:
    """The zoo table from a results file (hook modes as ratios to the default's neighbouring slots; host and kernel
    time per step for default / prediction / verify / pass-through control; verify warm against benchmark mode's
    steady step, and verify's cold first pass against benchmark mode's tuning, where both were run)."""
    return summarize_rows([json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()])


def summarize_rows(rows: list[dict]) -> str:
    """:func:`summarize` of rows already read."""
    by: dict[tuple[str, str], dict] = {}
    paired: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "error" not in r:
            # verify mode timing at a signature's first call (--no-look-first, and every row from before looking
            # first was the default, which has no verify_look_first) is another configuration: a row of its own;
            # benchmark mode's own processes run no verify mode and join the row of their configuration
            first_call = r.get("job") != "benchmark" and not r.get("verify_look_first")
            key = (r["net"], r["dtype"] + (", timing at first call" if first_call else "") + config_label(r))
            by.setdefault(key, {}).update({k: v for k, v in r.items() if k not in ("job",)})
            if r.get("job") == "paired":
                paired.setdefault(key, []).append(r)
    for key, group in paired.items():  # the hook's modes against the default: pooled over the processes
        for m in (*MODES[1:], TUNED, AGAIN):
            pooled = pooled_ratio(group, m)
            if pooled is not None:
                by[key][f"{m}_vs_default"], by[key][f"{m}_interval"] = pooled[0], pooled[1:]
        pooled = pooled_ratio(group, "verify", base=TUNED)  # verify mode against benchmark mode, paired
        if pooled is not None:
            by[key]["verify_vs_tuned"], by[key]["verify_vs_tuned_interval"] = pooled[0], pooled[1:]
        by[key]["processes"] = len(group)
    head = ("| network | dtype | default ms | predict ms (x default, 95% interval) | verify ms (x default, ...) | "
            "control ms (x default, ...) | benchmark mode, paired (x default, ...) | verify / benchmark mode, paired | "
            "benchmark ms (own process) | verify / benchmark | host ms D/P/V/C/T/B | "
            "kernel ms D/P/V/C/T/B | verify cold 1st pass s | benchmark 1st pass s | cold / tuning | "
            "verify warm 1st pass s | benchmark mode 1st pass s, paired | cold / tuning, paired | "
            "1st pass s D/P |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios: dict[str, list[float]] = {m: [] for m in (*MODES[1:], TUNED)}
    cold_ratios: list[float] = []
    for (net, dtype), r in sorted(by.items()):

        def f(k, d=2, r=r):
            v = r.get(k)
            return "" if v is None else f"{v:.{d}f}"

        def ratio(a, b, r=r):
            return f"{r[a] / r[b]:.3f}" if r.get(a) and r.get(b) else ""

        for m, values in ratios.items():
            if f"{m}_vs_default" in r:
                values.append(r[f"{m}_vs_default"])
        hosts = "/".join(f(f"{m}_host_ms", 1) for m in (*MODES, TUNED, "benchmark"))
        kernels = "/".join(f(f"{m}_kernel_ms", 1) for m in (*MODES, TUNED, "benchmark"))

        def interval(m, r=r):
            lo_hi = r.get(f"{m}_interval")
            return f", {lo_hi[0]:.3f}-{lo_hi[1]:.3f}" if lo_hi else ""

        modes = " | ".join(f"{f(f'{m}_step_ms')} ({f(f'{m}_vs_default', 3)}{interval(m)})" for m in MODES[1:])
        tuned = f"{f('tuned_step_ms')} ({f('tuned_vs_default', 3)}{interval(TUNED)})" if "tuned_step_ms" in r else ""
        verify_tuned = f"{f('verify_vs_tuned', 3)}{interval('verify_vs_tuned')}" if "verify_vs_tuned" in r else ""
        name = net if r.get("processes", 1) == 1 else f"{net} (x{r['processes']} processes)"
        warm = f("verify_warm_first_pass_s")
        if r.get("verify_warm_measured_problems"):  # the cache was not warm: the pass is not a warm one
            warm += f" (not warm: {r['verify_warm_measured_problems']} timed)"
        lines.append(
            f"| {name} | {dtype} | {f('default_step_ms')} | {modes} | {tuned} | {verify_tuned} | "
            f"{f('benchmark_step_ms')} | "
            f"{ratio('verify_step_ms', 'benchmark_step_ms')} | {hosts} | {kernels} | {f('verify_cold_first_pass_s')} | "
            f"{f('benchmark_first_pass_s')} | {ratio('verify_cold_first_pass_s', 'benchmark_first_pass_s')} | "
            f"{warm} | {f('tuned_first_pass_s')} | "
            f"{ratio('verify_cold_first_pass_s', 'tuned_first_pass_s')} | "
            f"{f('default_first_pass_s')}/{f('predict_first_pass_s')} |"
        )
        for tuning in ("tuned_first_pass_s", "benchmark_first_pass_s"):  # paired where both ran
            if r.get("verify_cold_first_pass_s") and r.get(tuning):
                cold_ratios.append(r["verify_cold_first_pass_s"] / r[tuning])
                break
    errors = [r for r in rows if "error" in r]
    from algosel.records.analysis import geomean as gm

    lines.append("")
    lines.append(f"geomean step time / default over {len(ratios['predict'])} (network, dtype): prediction mode "
                 f"{gm(ratios['predict']):.3f}, verify mode {gm(ratios['verify']):.3f}, pass-through control "
                 f"{gm(ratios['native']):.3f}; {len(errors)} job(s) failed")  # fmt: skip
    if ratios[TUNED]:
        lines.append(f"benchmark mode paired (autocast), over {len(ratios[TUNED])}: {gm(ratios[TUNED]):.3f}")
    if cold_ratios:
        lines.append(f"verify mode's cold first pass / benchmark mode's tuning (paired where both ran in one "
                     f"process), over {len(cold_ratios)}: geomean {gm(cold_ratios):.3f}, "
                     f"largest {max(cold_ratios):.3f}")  # fmt: skip
    for (net, dtype), r in sorted(by.items()):
        if f"{AGAIN}_vs_default" in r:
            lo, hi = r.get(f"{AGAIN}_interval") or (math.nan, math.nan)
            lines.append(f"A/A, the default against itself ({net}, {dtype}): {r[f'{AGAIN}_vs_default']:.3f} "
                         f"({lo:.3f}-{hi:.3f})")  # fmt: skip
    lines.extend(own_process_lines(rows))
    lines.extend(thread_lines(paired))
    for r in errors:
        lines.append(f"  failed: {r['job']} {r['net']} {r['dtype']}: {r['error'][-300:]}")
    return "\n".join(lines)


def pooled_prediction_table(paths: list[Path]) -> str:
    """Markdown: prediction mode against the default and against the default's second slot (``--aa``), and the
    control against the default, pooled per (network, dtype) over the paired rows of every file (each a process of
    its own; rows made with another model than the shipped one are left out), with 95% intervals
    (:func:`pooled_ratio`); then the geomeans. Prediction mode's routes do not depend on verify mode's settings, so
    rows that time at the first call pool with rows that look first."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("job") == "paired" and "error" not in r and not r.get("model") and not r.get("hook_config"):
                groups.setdefault((r["net"], r["dtype"]), []).append(r)
    lines = ["| network | dtype | processes | prediction / default | A/A | prediction / A/A slot | control / default |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    ratios: dict[str, list[float]] = {"default": [], AGAIN: []}
    for (net, dtype), group in sorted(groups.items()):
        cells = []
        for mode, base in (("predict", "default"), (AGAIN, "default"), ("predict", AGAIN), ("native", "default")):
            v = pooled_ratio(group, mode, base=base)
            cells.append("" if v is None else f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f})")
            if mode == "predict" and v is not None:
                ratios[base].append(v[0])
        lines.append(f"| {net} | {dtype} | {len(group)} | " + " | ".join(cells) + " |")
    from algosel.records.analysis import geomean as gm

    lines.append("")
    lines.append(f"geomean prediction / default over {len(ratios['default'])}: {gm(ratios['default']):.3f}; "
                 f"prediction / A/A slot over {len(ratios[AGAIN])}: {gm(ratios[AGAIN]):.3f}")  # fmt: skip
    return "\n".join(lines)


def thread_lines(paired: dict[tuple[str, str], list[dict]], top: int = 3) -> list[str]:
    """Per (network, dtype) and hook mode, the main thread's CPU time per step against the default's and the
    ``top - 1`` other threads' that differ most (the mean over processes of each process's median paired
    difference, ms), where the rows recorded it."""
    lines = []
    for (net, dtype), group in sorted(paired.items()):
        parts = []
        for m in (*MODES[1:], AGAIN):
            per_process = [r[f"{m}_threads_vs_default_ms"] for r in group if r.get(f"{m}_threads_vs_default_ms")]
            if not per_process:
                continue
            names = {k for d in per_process for k in d}
            mean = {k: sum(d.get(k, 0.0) for d in per_process) / len(per_process) for k in names}
            # the main thread (which enqueues the step) always, then the threads that differ most
            others = sorted(((k, v) for k, v in mean.items() if k != "main"), key=lambda kv: -abs(kv[1]))
            biggest = [("main", mean.get("main", 0.0)), *others[: top - 1]]
            parts.append(f"{m} " + ", ".join(f"{k} {v:+.3f}" for k, v in biggest))
        if parts:
            lines.append(f"CPU ms per step against the default's, by thread ({net}, {dtype}): " + "; ".join(parts))
    return lines


def parser(description: str = __doc__) -> argparse.ArgumentParser:
    """The driver's options (benchmarks/zoo_gpu.py takes the same)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="zoo.jsonl")
    p.add_argument("--nets", default="all")
    p.add_argument("--jobs", default="paired,benchmark")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="float32 (TF32, NCHW), amp (float16 autocast, NHWC)")
    p.add_argument("--timeout-s", type=float, default=240)
    p.add_argument("--rounds", type=int, default=30, help="paired job: rotations of the modes' slots")
    p.add_argument("--min-gain-us", type=float, help="the hook's least gain a call (default: the hook's)")
    p.add_argument("--verify-k", type=int, help="verify mode's shortlist (default 3)")
    p.add_argument("--probe-calls", type=int, help="calls a switch looks at the device before it is kept (0: none)")
    p.add_argument("--slot-steps", type=int, default=3, help="paired job: steps per slot (the FPN: a pass)")
    p.add_argument("--model", default=None, help="the hook's model directory (default: the shipped model)")
    p.add_argument("--processes", type=int, default=1, help="run each job this many times, a new process each")
    p.add_argument("--aa", action="store_true", help="paired job: the default a second time in the rotation (A/A)")
    p.add_argument(
        "--no-look-first",
        action="store_true",
        help="verify mode times a new problem at its first call, without looking at the device first",
    )
    p.add_argument(
        "--python-path",
        action="store_true",
        help="run on a GPU even where the compiled path is not built (the hook's Python path is measured)",
    )
    p.add_argument("--cpus", default=None, help="pin every job's process to these cores (e.g. 0-7)")
    p.add_argument("--summarize", default=None, help="print the table of a results file and stop")
    p.add_argument(
        "--pool",
        nargs="+",
        default=None,
        metavar="FILE",
        help="print prediction mode's table pooled over these results files' paired rows and stop",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="load the hook's model for this GPU whatever GPU it was made for (the H200's on an H100)",
    )
    p.add_argument("--resume", action="store_true", help="skip the jobs whose rows --out holds already")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no job that could end past this many seconds (with --timeout-s a job)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", default=None, help=argparse.SUPPRESS)
    p.add_argument("--net", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None, script: str = __file__, description: str = __doc__, summary=None) -> None:
    """The driver (``script``: what its children run; ``summary``: the table printed at the end, of the results
    file)."""
    p = parser(description)
    args = p.parse_args(argv)
    for flag, given, known in (("--nets", args.nets, NETS), ("--jobs", args.jobs, JOBS)):
        unknown = [x for x in given.split(",") if x not in known and not (flag == "--nets" and x == "all")]
        if unknown and not args.child:
            p.error(f"{flag}: unknown {unknown[0]} (choose from {','.join(known)})")
    unknown = sorted(set(args.dtypes.split(",")) - set(DTYPES))
    if unknown:
        p.error(f"--dtypes: unknown {','.join(unknown)} (choose from {','.join(DTYPES)})")
    if args.pool:
        missing = [f for f in args.pool if not Path(f).is_file()]
        if missing:
            p.error(f"--pool: no such file {missing[0]!r}")
        print(pooled_prediction_table([Path(f) for f in args.pool]))
    elif args.summarize:
        print(summarize(Path(args.summarize)))
    elif args.child:
        sys.exit(_child(args))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        drive(args, script, summary)


if __name__ == "__main__":
    main()
