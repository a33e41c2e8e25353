"""The ``algosel`` command line: ``algosel <subcommand> --help`` for each."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence

from algosel.problem import DTYPES, LAYOUTS


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# ------------------------------------------------------------------------------------------------- sweep
def _suite_names(text: str) -> list[str]:
    from algosel.suites import SUITES  # noqa: PLC0415

    if text in ("", "none"):
        return []
    names = list(SUITES) if text == "all" else _csv_list(text)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise CliError(f"--suites: unknown suite {unknown[0]!r}; known: {', '.join(SUITES)}")
    return names


def _check_choices(option: str, values: list[str], allowed: Sequence[str]) -> list[str]:
    for v in values:
        if v not in allowed:
            raise CliError(f"{option}: unknown value {v!r}; choose from {', '.join(allowed)}")
    return values


def _cases_from_args(args):
    from algosel.cases import build_cases  # noqa: PLC0415
    from algosel.grid import GridSpec  # noqa: PLC0415

    dtypes = _check_choices("--dtypes", _csv_list(args.dtypes), DTYPES)
    layouts = _check_choices("--layouts", _csv_list(args.layouts), LAYOUTS)
    grid_layouts = _check_choices("--grid-layouts", _csv_list(args.grid_layouts or args.layouts), LAYOUTS)
    grid = (
        GridSpec(count=args.grid, seed=args.seed, max_flops=args.max_flops, max_operand_bytes=args.max_operand_bytes)
        if args.grid
        else None
    )
    cases = build_cases(grid, _suite_names(args.suites), dtypes, layouts, grid_layouts=grid_layouts)
    return cases[: args.limit] if args.limit else cases


def _spaces(names: list[str]):
    from algosel.candidates import make_space  # noqa: PLC0415

    return [make_space(n) for n in names]


def cmd_sweep(args) -> int:
    cases = _cases_from_args(args)
    if args.dry_run:
        print(f"{len(cases)} cases ({sum(1 for c in cases if c.source == 'grid')} from the grid)")
        return 0
    if args.gpus is not None:
        return _launch_per_gpu(args)
    import torch  # noqa: PLC0415

    from algosel.environment import collect_environment  # noqa: PLC0415
    from algosel.sweep import Sweeper, parse_shard, run_sweep  # noqa: PLC0415
    from algosel.timing import CudaEventTimer  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("sweep needs a CUDA GPU (none is visible); `algosel summarize` works on shipped records")
    spaces = _spaces(_csv_list(args.spaces))
    for space in spaces:
        why = space.available()
        if why:
            raise CliError(f"candidate space {space.name!r} cannot run here: {why}")
    shard = parse_shard(args.shard)
    sweeper = Sweeper(spaces, CudaEventTimer(budget_ms=args.budget_ms), collect_environment(),
                      workspace_limit_bytes=args.workspace_limit_bytes, seed=args.seed)  # fmt: skip
    report = run_sweep(cases, sweeper, args.out, shard=shard, resume_from=args.resume_from,
                       time_budget_s=args.time_budget_s, progress=not args.no_progress)  # fmt: skip
    print(
        f"shard {args.shard}: measured {report.measured} cases, {report.skipped_done} already recorded, "
        f"{report.skipped_crashed} skipped after crashes, {report.left_for_later} left for a later run"
        + (f"; wrote {report.part}" if report.part else "")
    )
    return 0


def _launch_per_gpu(args) -> int:
    """One sweep process per GPU, each with its own shard and CUDA_VISIBLE_DEVICES."""
    import torch  # noqa: PLC0415

    visible = torch.cuda.device_count()
    count = visible if args.gpus == "all" else int(args.gpus)
    if count < 1 or count > visible:
        raise CliError(f"--gpus {args.gpus}: {visible} GPU(s) visible")
    argv = list(args.argv)
    i = argv.index("--gpus")
    del argv[i : i + 2]
    procs = []
    for g in range(count):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(g))
        procs.append(subprocess.Popen([sys.executable, "-m", "algosel", *argv, "--shard", f"{g}/{count}"], env=env))
    codes = [p.wait() for p in procs]
    return max(codes)


# --------------------------------------------------------------------------------------------- summarize
def cmd_summarize(args) -> int:
    from algosel.analysis import summarize  # noqa: PLC0415
    from algosel.records import load_records  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    for env in envs.values():
        print(f"environment {env['env_id']}: {env.get('gpu_name')}, cuDNN {env.get('cudnn')}, "
              f"torch {env.get('torch')}, driver {env.get('driver')}")  # fmt: skip
    print(summarize(frame, worst=args.worst))
    return 0


def cmd_env(args) -> int:
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("env describes a CUDA GPU and none is visible")
    from algosel.environment import collect_environment  # noqa: PLC0415

    print(json.dumps(collect_environment(), indent=2))
    return 0


def cmd_grid(args) -> int:
    from algosel.grid import GridSpec, sample_grid  # noqa: PLC0415

    spec = GridSpec(count=args.count, seed=args.seed, max_flops=args.max_flops, max_operand_bytes=args.max_operand_bytes)
    shapes = sample_grid(spec)
    for p in shapes:
        print(p.shape_key)
    return 0


def cmd_suites(args) -> int:
    from algosel.suites import DEFAULT_SUITES_DIR, write_suites  # noqa: PLC0415

    names = _suite_names(args.names)
    written = write_suites(args.out or DEFAULT_SUITES_DIR, names or None)
    for path in written or []:
        print(path)
    return 0


# ------------------------------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="algosel", description="Convolution algorithm selection for NVIDIA GPUs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sweep", help="measure every candidate on a grid of shapes and network suites (GPU)")
    p.add_argument("--out", required=True, help="dataset directory to write record parts into")
    p.add_argument("--resume-from", action="append", default=[], help="dataset whose cases are skipped")
    p.add_argument("--grid", type=int, default=0, help="number of grid shapes (0: none)")
    p.add_argument("--seed", type=int, default=0, help="grid and operand seed")
    p.add_argument("--max-flops", type=float, default=5e10, help="largest grid problem, in FLOPs")
    p.add_argument("--max-operand-bytes", type=int, default=256 << 20, help="largest grid problem's x + w + y")
    p.add_argument("--suites", default="all", help="comma-separated suites, 'all' or 'none'")
    p.add_argument("--dtypes", default="float32,float16", help=f"comma-separated, of {', '.join(DTYPES)}")
    p.add_argument("--layouts", default="nchw", help="layouts of the suites' problems")
    p.add_argument("--grid-layouts", default=None, help="layouts of the grid's problems (default: --layouts)")
    p.add_argument("--spaces", default="gemm,pytorch,cudnn", help="candidate spaces, measured in this order")
    p.add_argument("--shard", default="0/1", help="i/n: measure one of n disjoint shares of the cases")
    p.add_argument("--gpus", default=None, help="'all' or a count: one process (and shard) per GPU")
    p.add_argument("--time-budget-s", type=float, default=None, help="stop starting cases after this long")
    p.add_argument("--budget-ms", type=float, default=10.0, help="device time per candidate for repeats")
    p.add_argument("--workspace-limit-bytes", type=int, default=8 << 30)
    p.add_argument("--limit", type=int, default=0, help="only the first N cases (a tiny sweep)")
    p.add_argument("--dry-run", action="store_true", help="print the number of cases and stop")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("summarize", help="compare cuDNN's heuristics and PyTorch's default with the best")
    p.add_argument("data", nargs="+", help="dataset directories or part files")
    p.add_argument("--worst", type=int, default=10, help="worst cases listed per selector")
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("env", help="print the environment record of this GPU")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("grid", help="print the shapes of the seeded grid")
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-flops", type=float, default=5e10)
    p.add_argument("--max-operand-bytes", type=int, default=256 << 20)
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("suites", help="extract the layer shapes of real networks into CSVs (needs torchvision)")
    p.add_argument("--out", default=None, help="directory (default: the package's data/suites)")
    p.add_argument("--names", default="all")
    p.set_defaults(func=cmd_suites)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except CliError as exc:
        print(f"algosel {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # validation errors of the library name the field and value
        print(f"algosel {args.command}: error: {exc}", file=sys.stderr)
        return 2
