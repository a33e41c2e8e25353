"""The ``algosel`` command line: ``algosel <subcommand> --help`` for each.

One module per command group, each a thin parser over the library that does the work: :mod:`~algosel.cli.sweep`
(measuring), :mod:`~algosel.cli.records` (shapes and records), :mod:`~algosel.cli.selector` (models),
:mod:`~algosel.cli.runtime` (this machine's runtime) and :mod:`~algosel.cli.study` (the analyst's reports); every
command runs behind :mod:`~algosel.cli.boundary`, the one error boundary.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from algosel.cli import records, runtime, selector, study, sweep
from algosel.cli.boundary import CliError, run_command
from algosel.cli.options import Parser
from algosel.version import __version__

__all__ = ["CliError", "build_parser", "main", "run_command"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``algosel`` command (each sets ``func``, the function that runs it)."""
    parser = Parser(
        prog="algosel", description=f"Convolution algorithm selection for NVIDIA GPUs (algosel {__version__})."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("--version", action="version", version=f"algosel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sweep.add_parser(sub)
    records.add_parsers(sub)
    selector.add_parsers(sub)
    runtime.add_parsers(sub)
    study.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``algosel ARGV`` (default: the process's arguments); returns the exit status."""
    # OpenMP threads that wait by spinning collapse on a machine whose cores are busy: LightGBM's fit of the full
    # H200 records on 2 threads took 407 s so, 67 s with passive waiting, 60 s on one thread. libgomp reads this
    # when it is loaded, which the commands do later (LightGBM, torch); a value the user set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    return run_command(args)
