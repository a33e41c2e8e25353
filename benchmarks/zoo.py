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

The parts (benchmarks/zoolib/, its ``__init__`` lists them): this file is the command line; its configuration is one
``zoolib.config.ZooConfig``, made here from the environment and the options, and handed down to the jobs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoolib import modes, nets
from zoolib.config import ZooConfig
from zoolib.drive import cpu_set, drive, run_child
from zoolib.modes import MODES, TUNED
from zoolib.nets import DTYPES, NETS
from zoolib.pooling import pooled_prediction_table, pooled_ratio
from zoolib.tables import summarize
from zoolib.timing import rotate, round_order, run_steps

#: What scripts that ``import zoo`` reach besides :func:`main` (benchmarks/archive/'s studies).
__all__ = ["DTYPES", "MODES", "NETS", "TUNED", "ZooConfig", "build_network", "cpu_set", "main", "mode_context",
           "parser", "pooled_ratio", "round_order", "rotate", "run_steps"]  # fmt: skip


def build_network(name: str, dtype: str, device: str, cfg: ZooConfig | None = None):
    """:func:`zoolib.nets.build_network` under ``cfg`` (default: the environment's configuration)."""
    return nets.build_network(ZooConfig.from_env() if cfg is None else cfg, name, dtype, device)


def mode_context(mode: str, hook, cfg: ZooConfig | None = None):
    """:func:`zoolib.modes.mode_context` under ``cfg`` (default: the environment's configuration)."""
    return modes.mode_context(ZooConfig.from_env() if cfg is None else cfg, mode, hook)


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
    p.add_argument("--slot-steps", type=int, default=3, help="paired job: steps per slot (the FPN: a pass)")
    hook_options(p)
    p.add_argument("--processes", type=int, default=1, help="run each job this many times, a new process each")
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
    p.add_argument("--resume", action="store_true", help="skip the jobs whose rows --out holds already")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no job that could end past this many seconds (with --timeout-s a job)",
    )
    for hidden in ("--job", "--net", "--dtype"):  # a job's process: benchmarks/zoolib/drive.py's run_child
        p.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def hook_options(p: argparse.ArgumentParser) -> None:
    """The options of the hook's configuration (``ZooConfig.with_args``)."""
    p.add_argument("--min-gain-us", type=float, help="the hook's least gain a call (default: the hook's)")
    p.add_argument("--verify-k", type=int, help="verify mode's shortlist (default 3)")
    p.add_argument("--probe-calls", type=int, help="calls a switch looks at the device before it is kept (0: none)")
    p.add_argument("--model", default=None, help="the hook's model directory (default: the shipped model)")
    p.add_argument("--aa", action="store_true", help="paired job: the default a second time in the rotation (A/A)")
    p.add_argument(
        "--no-look-first",
        action="store_true",
        help="verify mode times a new problem at its first call, without looking at the device first",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="load the hook's model for this GPU whatever GPU it was made for (the H200's on an H100)",
    )


def check(p: argparse.ArgumentParser, args, cfg: ZooConfig) -> None:
    """Stop with one line naming an unknown network, job or dtype, or a missing ``--pool`` file."""
    for flag, given, known in (("--nets", args.nets, cfg.nets), ("--jobs", args.jobs, cfg.jobs)):
        unknown = [x for x in given.split(",") if x not in known and not (flag == "--nets" and x == "all")]
        if unknown and not args.child:
            p.error(f"{flag}: unknown {unknown[0]} (choose from {','.join(known)})")
    unknown = sorted(set(args.dtypes.split(",")) - set(DTYPES))
    if unknown:
        p.error(f"--dtypes: unknown {','.join(unknown)} (choose from {','.join(DTYPES)})")
    missing = [f for f in args.pool or () if not Path(f).is_file()]
    if missing:
        p.error(f"--pool: no such file {missing[0]!r}")


def main(argv: list[str] | None = None, script: str = __file__, description: str = __doc__, summary=None,
         config: ZooConfig | None = None, driver=drive) -> None:  # fmt: skip
    """The command line. ``script``: what the driver's children run; ``summary``: the table printed at the end, of
    the results file; ``config``: the configuration the options apply to (default: the environment's,
    ``ZooConfig.from_env``); ``driver``: what runs the jobs (``driver(args, cfg, script, summary)``)."""
    p = parser(description)
    args = p.parse_args(argv)
    cfg = (ZooConfig.from_env() if config is None else config).with_args(args)
    check(p, args, cfg)
    if args.pool:
        print(pooled_prediction_table([Path(f) for f in args.pool]))
    elif args.summarize:
        print(summarize(Path(args.summarize)))
    elif args.child:
        sys.exit(run_child(args, cfg))
    else:
        driver(args, cfg, script, summary)


if __name__ == "__main__":
    main()
