"""The analyst's commands: ``analyze-log`` (a cuDNN log's calls priced) and ``report`` (an HTML report)."""

from __future__ import annotations

import argparse
import sys
import time

from algosel.cli.boundary import CliError
from algosel.cli.options import OVERWRITE_FILE_HELP, csv_list, integer

#: The columns of ``algosel analyze-log``'s table, in order.
LOG_COLUMNS = ["first_line", "calls", "api", "problem", "chosen", "chosen_ms", "algosel_pick", "algosel_ms",
               "best_same_api_ms", "best_ms", "lost_ms", "note"]  # fmt: skip


def cmd_analyze_log(args: argparse.Namespace) -> int:
    """``algosel analyze-log``: price the convolutions of a cuDNN API log with the records and the selectors."""
    from algosel.files import write_text  # noqa: PLC0415
    from algosel.outputs import check_output_file  # noqa: PLC0415

    if args.csv:  # before the log is read, and the seconds of importing pandas
        check_output_file(args.csv, overwrite=args.overwrite, option="--csv")
    from algosel.study.logs import LogError, analyze, conv_calls, parse_log, summary  # noqa: PLC0415

    try:
        calls = conv_calls(parse_log(args.log))
    except LogError as exc:
        raise CliError(str(exc)) from None
    if not calls:
        raise CliError(f"{args.log}: the log shows no convolution call (cudnnConvolution* or a conv graph)")
    import pandas as pd  # noqa: PLC0415

    from algosel.study.log_pricing import load_pricing, measure_unrecorded  # noqa: PLC0415

    pricing = load_pricing({"graph": args.model, "legacy": args.legacy_model}, args.data, force=args.force)
    for line in pricing.warnings:
        print(f"algosel analyze-log: {line}", file=sys.stderr)
    measured = measure_unrecorded(calls, pricing.records) if args.measure else None
    table = analyze(calls, pricing.records, pricing.selectors, measured)
    if args.csv:
        write_text(check_output_file(args.csv, overwrite=args.overwrite, option="--csv"), table.to_csv(index=False))
    with pd.option_context("display.max_colwidth", 80, "display.width", 250, "display.float_format", "{:.4f}".format):
        print(table[LOG_COLUMNS].to_string(index=False))
    print()
    print(summary(table))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``algosel report``: build the report and print where it is."""
    from algosel.study.report import build_report  # noqa: PLC0415

    t0 = time.perf_counter()
    index = build_report(
        args.data,
        args.model,
        args.out,
        selectors=args.selectors,
        worst=args.worst,
        overwrite=args.overwrite,
        force=args.force,
    )
    print(f"wrote {index} ({time.perf_counter() - t0:.1f} s)")
    return 0


def add_report_parser(sub) -> None:
    """Add ``algosel report`` to the subparsers ``sub``."""
    from algosel.study.report_data import DEFAULT_SELECTORS, DEFAULT_WORST, KNOWN_SELECTORS  # noqa: PLC0415

    p = sub.add_parser("report", help="write an HTML report with plots comparing the selectors")
    p.add_argument("--data", nargs="+", required=True, help="records: dataset directories or part files")
    p.add_argument("--model", default=None, help="model directory (default: none; the model is left out)")
    p.add_argument(
        "--out",
        required=True,
        help="directory that receives index.html and its PNG figures, written as one unit once all are made; an "
        "earlier report's files there are replaced, other files left alone",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files of the report's names (index.html, *.png) that algosel report did not write into --out "
        "(a user's, or one changed since; the folder's .algosel-outputs.json records what it wrote): without it, "
        "they are refused before any work",
    )
    p.add_argument(
        "--worst",
        type=integer(1, "a positive integer"),
        default=DEFAULT_WORST,
        help="worst problems listed per selector",
    )
    p.add_argument("--force", action="store_true", help="score a model made for another GPU or cuDNN than the records")
    p.add_argument(
        "--selectors",
        type=csv_list,
        default=None,
        help=f"comma-separated, of {', '.join(KNOWN_SELECTORS)} (default: {', '.join(DEFAULT_SELECTORS)})",
    )
    p.set_defaults(func=cmd_report)


def add_parsers(sub) -> None:
    """Add the analyst's commands to the subparsers ``sub``."""
    add_report_parser(sub)
    p = sub.add_parser("analyze-log", help="price the convolutions of a cuDNN API log (CUDNN_LOGLEVEL_DBG=3)")
    p.add_argument("log", help="the log file (plain or gzipped)")
    p.add_argument(
        "--data",
        nargs="+",
        default=None,
        help="sweep records to price the calls from (default: the records of the selectors, from their catalogues)",
    )
    p.add_argument("--model", default=None, help="engine-config selector for graph API calls (default: shipped)")
    p.add_argument("--legacy-model", default=None, help="legacy selector for legacy API calls (default: shipped)")
    p.add_argument("--measure", action="store_true", help="measure problems the records lack on this GPU")
    p.add_argument("--force", action="store_true", help="use models made for another GPU or cuDNN")
    p.add_argument("--csv", default=None, help="also write the table to this CSV file (an existing one: --overwrite)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_FILE_HELP.replace("file", "--csv file", 1))
    p.set_defaults(func=cmd_analyze_log)
