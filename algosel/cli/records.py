"""The commands about shapes and records: ``summarize``, ``env``, ``grid``, ``suites`` and ``layers``."""

from __future__ import annotations

import argparse
import json

from algosel.cli.boundary import CliError
from algosel.cli.options import COUNT, OVERWRITE_FILE_HELP, POSITIVE, check_choices, positive_float, suite_names


def cmd_summarize(args: argparse.Namespace) -> int:
    """``algosel summarize``: heuristics and PyTorch's default against the best, per GPU of the records."""
    from algosel.records import load_records  # noqa: PLC0415
    from algosel.records.analysis import summarize_per_gpu  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    print(summarize_per_gpu(frame, envs, worst=args.worst))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    """``algosel env``: this GPU's environment record."""
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("env describes a CUDA GPU and none is visible")
    from algosel.records.environment import collect_environment  # noqa: PLC0415

    print(json.dumps(collect_environment(), indent=2))
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    """``algosel grid``: the seeded grid's shapes, one a line."""
    from algosel.measure.grid import MIXES, GridSpec, iter_grid  # noqa: PLC0415

    spec = GridSpec(
        count=args.count,
        seed=args.seed,
        max_flops=args.max_flops,
        max_operand_bytes=args.max_operand_bytes,
        mix=check_choices("--mix", [args.mix], tuple(MIXES))[0],
        max_count=None,  # printed as drawn: no count is too large to start, and `| head` stops it
    )
    for p in iter_grid(spec):  # each shape as it is drawn: a large --count prints at once, and `| head` stops it
        print(p.shape_key)
    return 0


def cmd_suites(args: argparse.Namespace) -> int:
    """``algosel suites``: the real networks' layer tables, written as CSVs."""
    from algosel.measure.suites import DEFAULT_SUITES_DIR, write_suites  # noqa: PLC0415

    names = suite_names(args.names)
    try:
        written = write_suites(args.out or DEFAULT_SUITES_DIR, names or None)
    except RuntimeError as exc:  # a suite needs torchvision and it is not installed
        raise CliError(str(exc)) from exc
    for path in written or []:
        print(path)
    return 0


def cmd_layers(args: argparse.Namespace) -> int:
    """``algosel layers``: a model's conv layers as a layers file."""
    from algosel.outputs import check_output_file  # noqa: PLC0415

    check_output_file(args.out, overwrite=args.overwrite)  # before torch and the model are imported
    from algosel.measure.layers import write_model_layers  # noqa: PLC0415

    for line in write_model_layers(args.model, args.input, args.network, args.out, overwrite=args.overwrite):
        print(line)
    return 0


def add_parsers(sub) -> None:
    """Add the records commands to the subparsers ``sub``."""
    p = sub.add_parser("summarize", help="compare cuDNN's heuristics and PyTorch's default with the best")
    p.add_argument("data", nargs="+", help="dataset directories or part files")
    p.add_argument("--worst", type=COUNT, default=10, help="worst cases listed per selector")
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("env", help="print the environment record of this GPU")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("grid", help="print the shapes of the seeded grid")
    p.add_argument("--count", type=COUNT, default=400)
    p.add_argument("--seed", type=COUNT, default=0, help="an integer >= 0")
    p.add_argument("--max-flops", type=positive_float, default=5e10)
    p.add_argument("--max-operand-bytes", type=POSITIVE, default=256 << 20)
    p.add_argument(
        "--mix", default="networks", help="family shares: 'networks', 'loss' or 'targeted' (algosel sweep --grid-mix)"
    )
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("layers", help="write the conv layers of any model as a layers file (CPU, meta tensors)")
    p.add_argument("--model", required=True, help="package.module:callable or path/to/file.py:callable")
    p.add_argument(
        "--input",
        action="append",
        required=True,
        help="input shape, e.g. 32,3,224,224 (tensors of one call separated by ';'); repeatable: one block each",
    )
    p.add_argument("--out", required=True, help="the layers CSV to write (an existing file takes --overwrite)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_FILE_HELP)
    p.add_argument("--network", default=None, help="network name (default: the file's stem or the callable's name)")
    p.set_defaults(func=cmd_layers)

    p = sub.add_parser("suites", help="extract the layer shapes of real networks into CSVs (needs torchvision)")
    p.add_argument("--out", default=None, help="directory (default: the package's data/suites)")
    p.add_argument("--names", default="all")
    p.set_defaults(func=cmd_suites)
