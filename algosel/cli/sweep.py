"""``algosel sweep``: its parser and the cases its options ask for; the measuring is :mod:`algosel.measure`'s."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

from algosel.cli.boundary import CliError
from algosel.cli.options import (
    COUNT,
    POSITIVE,
    check_choices,
    csv_list,
    existing,
    positive_float,
    suite_names,
)
from algosel.problem import DTYPES, LAYOUTS


def gpus(text: str) -> str:
    """An argparse type: ``all`` or a number of GPUs >= 1."""
    if text == "all":
        return text
    try:
        if int(text) >= 1:
            return str(int(text))
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected 'all' or a number of GPUs >= 1, got {text!r}")


def cases_from_args(args: argparse.Namespace) -> list:
    """The sweep cases of parsed ``algosel sweep`` options (``--quick``'s mix, or layers, suites and grid)."""
    from algosel.measure.cases import build_cases  # noqa: PLC0415
    from algosel.measure.grid import MIXES, GridSpec  # noqa: PLC0415

    if args.quick is not None:
        return _quick_cases(args)
    dtypes = check_choices("--dtypes", csv_list(args.dtypes), DTYPES)
    layouts = check_choices("--layouts", csv_list(args.layouts), LAYOUTS)
    grid_layouts = check_choices("--grid-layouts", csv_list(args.grid_layouts or args.layouts), LAYOUTS)
    (mix,) = check_choices("--grid-mix", [args.grid_mix], tuple(MIXES))
    try:  # the count is checked before a shape is drawn
        grid = (
            GridSpec(
                count=args.grid,
                seed=args.seed,
                max_flops=args.max_flops,
                max_operand_bytes=args.max_operand_bytes,
                mix=mix,
            )
            if args.grid
            else None
        )
    except ValueError as exc:
        raise CliError(f"--grid {args.grid}: {exc}") from None
    # With layers files and no --suites, only the layers (a user's own network, not the 686 suite cases).
    suites = args.suites if args.suites is not None else ("none" if args.layers else "all")
    cases = build_cases(grid, suite_names(suites), dtypes, layouts, grid_layouts=grid_layouts, layers=args.layers)
    return cases[: args.limit] if args.limit else cases


def _quick_cases(args: argparse.Namespace) -> list:
    """``--quick MINUTES``: the new-GPU mix of :mod:`algosel.measure.quick`, its budget the sweep's."""
    from algosel.measure.quick import QuickPlan, quick_cases  # noqa: PLC0415

    if args.grid or args.layers or args.grid_mix != "networks":
        raise CliError("--quick chooses the shapes itself: leave out --grid, --grid-mix and --layers")
    plan = QuickPlan(
        minutes=args.quick,
        own_seed=args.seed + 1,
        dtypes=tuple(check_choices("--dtypes", csv_list(args.dtypes), DTYPES)),
        layouts=tuple(check_choices("--layouts", csv_list(args.quick_layouts), LAYOUTS)),
    )
    if args.time_budget_s is None:
        args.time_budget_s = plan.time_budget_s
    cases = quick_cases(plan, suite_names(args.suites if args.suites is not None else "all"))
    return cases[: args.limit] if args.limit else cases


def _report_line(report, shard: str, workers: str = "") -> str:
    return (
        f"shard {shard}: measured {report.measured} cases{workers}, {report.skipped_done} already recorded, "
        f"{report.skipped_crashed} skipped after crashes, {report.left_for_later} left for a later run"
        + (f"; wrote {report.part}" if report.part else "")
        + (f"; stopped by {signal.Signals(report.interrupted).name}" if report.interrupted else "")
    )


def cmd_sweep(args: argparse.Namespace, cuda_available: Callable[[], bool] | None = None) -> int:
    """``algosel sweep``: measure the cases here, on every GPU (``--gpus``) or on a Ray cluster (``--ray``).
    ``cuda_available``: whether this process sees a CUDA GPU (default: ``torch.cuda.is_available``)."""
    from algosel.measure import launch  # noqa: PLC0415
    from algosel.measure.sweep import parse_shard, run_sweep  # noqa: PLC0415

    shard = parse_shard(args.shard)
    for dataset in args.resume_from:  # a mistyped one would measure again every case it holds
        existing("--resume-from", dataset)
    cases = cases_from_args(args)
    if args.dry_run:
        print(launch.dry_run_line(cases, args.out, args.resume_from, layers=bool(args.layers)))
        return 0
    if args.ray is not None:
        return _sweep_on_ray(args, cases, shard)
    if args.gpus is not None:
        return launch.launch_per_gpu(launch.without_option(args.argv, "--gpus"), launch.gpu_count(args.gpus))
    settings = launch.SweeperSettings(
        tuple(csv_list(args.spaces)), args.budget_ms, args.workspace_limit_bytes, args.seed
    )
    report = run_sweep(cases, launch.local_sweeper(settings, cuda_available), args.out, **_run_options(args, shard))
    print(_report_line(report, args.shard))
    # A signal's conventional exit status (130 for SIGINT, 143 for SIGTERM), so that schedulers see the stop.
    return 128 + report.interrupted if report.interrupted else 0


def _run_options(args: argparse.Namespace, shard: tuple[int, int]) -> dict:
    """What a sweep of this process and one on a Ray cluster both take from the command line."""
    return {"shard": shard, "resume_from": args.resume_from, "time_budget_s": args.time_budget_s,
            "progress": not args.no_progress, "retry_crashed": args.retry_crashed}  # fmt: skip


def _sweep_on_ray(args: argparse.Namespace, cases: list, shard: tuple[int, int]) -> int:
    """The cases as tasks on a Ray cluster, one GPU a task; records written here (algosel.measure.ray_sweep)."""
    if args.gpus is not None:
        raise CliError(f"--gpus {args.gpus} and --ray: choose one (--ray schedules the cluster's GPUs itself)")
    from algosel.measure.ray_cluster import connect  # noqa: PLC0415
    from algosel.measure.ray_sweep import GpuSweeperSpec, run_ray_sweep, workers_line  # noqa: PLC0415
    from algosel.spaces import space_names  # noqa: PLC0415

    spaces = check_choices("--spaces", csv_list(args.spaces), space_names())
    connect(args.ray)
    spec = GpuSweeperSpec(tuple(spaces), args.budget_ms, args.workspace_limit_bytes, args.seed)
    report = run_ray_sweep(cases, spec, args.out, chunk_cases=args.chunk_cases, **_run_options(args, shard))
    print("ray, " + _report_line(report, args.shard, f" {workers_line(report)}"))
    return 128 + report.interrupted if report.interrupted else 0


def add_parser(sub) -> None:
    """Add ``algosel sweep`` to the subparsers ``sub``."""
    p = sub.add_parser("sweep", help="measure every candidate on a grid of shapes and network suites (GPU)")
    p.add_argument("--out", required=True, help="dataset directory to write record parts into")
    p.add_argument("--resume-from", action="append", default=[], help="dataset whose cases are skipped")
    p.add_argument("--grid", type=COUNT, default=0, help="number of grid shapes (0: none)")
    p.add_argument("--seed", type=COUNT, default=0, help="grid and operand seed (an integer >= 0)")
    p.add_argument("--max-flops", type=positive_float, default=5e10, help="largest grid problem, in FLOPs")
    p.add_argument("--max-operand-bytes", type=POSITIVE, default=256 << 20, help="largest grid problem's x + w + y")
    p.add_argument(
        "--grid-mix",
        default="networks",
        help="family shares of the grid: 'networks' (layers of CNNs; the shipped records), 'loss' (where the "
        "shipped selector loses time) or 'targeted' (where it loses and is least sure, stems among them); its cases "
        "are recorded with source grid, grid:loss or grid:targeted",
    )
    p.add_argument(
        "--suites", default=None, help="comma-separated suites, 'all' or 'none' (default: all; none with --layers)"
    )
    p.add_argument(
        "--layers", action="append", default=[], metavar="FILE.csv", help="a layers file (algosel layers); repeatable"
    )
    p.add_argument("--dtypes", default="float32,float16", help=f"comma-separated, of {', '.join(DTYPES)}")
    p.add_argument("--layouts", default="nchw", help="layouts of the suites' and layers files' problems")
    p.add_argument("--grid-layouts", default=None, help="layouts of the grid's problems (default: --layouts)")
    p.add_argument("--spaces", default="gemm,pytorch,cudnn", help="candidate spaces, measured in this order")
    p.add_argument("--shard", default="0/1", help="i/n: measure one of n disjoint shares of the cases")
    p.add_argument("--gpus", type=gpus, default=None, help="'all' or a count: one process (and shard) per GPU")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the cases as tasks on a Ray cluster, one GPU a task (host:port of its head, ray://host:port, or "
        "none: this machine's cluster, else a new one of this machine; needs pip install 'algosel[ray]')",
    )
    p.add_argument("--chunk-cases", type=POSITIVE, default=16, help="with --ray: cases a task")
    p.add_argument("--time-budget-s", type=positive_float, default=None, help="stop starting cases after this long")
    p.add_argument(
        "--quick",
        type=positive_float,
        default=None,
        metavar="MINUTES",
        help="a GPU new to algosel: the suites' layers, shapes of the shipped grid and of a grid of its own (seed "
        "--seed + 1), interleaved shape by shape in every dtype and layout, for MINUTES (docs/selector.md)",
    )
    p.add_argument(
        "--quick-layouts", default="nchw,nhwc", help="with --quick: the layouts of every shape (default: both)"
    )
    p.add_argument("--budget-ms", type=positive_float, default=10.0, help="device time per candidate for repeats")
    p.add_argument("--workspace-limit-bytes", type=COUNT, default=8 << 30)
    p.add_argument("--limit", type=COUNT, default=0, help="only the first N cases (a tiny sweep)")
    p.add_argument("--retry-crashed", action="store_true", help="try again cases that ended the process twice")
    p.add_argument("--dry-run", action="store_true", help="print the number of cases and stop")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_sweep)
