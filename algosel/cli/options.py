"""What the command groups share: the parser class, argparse types and help texts of the ``algosel`` commands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from algosel.cli.boundary import CliError


class Parser(argparse.ArgumentParser):
    """argparse with a subcommand's usage errors on one line (``algosel <command> --help`` has the usage); a
    missing or unknown command still shows the usage, which lists the commands."""

    def error(self, message: str):  # type: ignore[override]
        if " " not in self.prog:  # the top-level parser
            super().error(message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def csv_list(text: str) -> list[str]:
    """The non-empty items of a comma-separated option."""
    return [t.strip() for t in text.split(",") if t.strip()]


def integer(minimum: int, what: str):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def pair(text: str) -> list[int]:
    """An argparse type: ``v`` or ``h,w``."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'h,w', got {text!r}") from None
    if len(values) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected an integer or 'h,w', got {text!r}")
    return values


def check_choices(option: str, values: list[str], allowed: Sequence[str]) -> list[str]:
    """``values``, each of which must be one of ``allowed``; else a one-line error naming the option."""
    for v in values:
        if v not in allowed:
            raise CliError(f"{option}: unknown value {v!r}; choose from {', '.join(allowed)}")
    return values


def existing(option: str, path: str, directory: bool = False) -> Path:
    """``path``, which must exist (a dataset to resume from; with ``directory``, a folder of models); else a one-line
    error naming the option and the path."""
    if not Path(path).exists():
        raise CliError(f"{option} {path}: no such {'directory' if directory else 'file or directory'}")
    if directory and not Path(path).is_dir():
        raise CliError(f"{option} {path}: not a directory")
    return Path(path)


def suite_names(text: str) -> list[str]:
    """The suites of ``--suites``/``--names``: comma-separated, ``all`` or ``none``."""
    from algosel.measure.suites import SUITES  # noqa: PLC0415

    if text in ("", "none"):
        return []
    names = list(SUITES) if text == "all" else csv_list(text)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise CliError(f"--suites: unknown suite {unknown[0]!r}; known: {', '.join(SUITES)}")
    return names


#: --overwrite of a command writing a folder of outputs (the rule of algosel.outputs.write_output_dir).
OVERWRITE_DIR_HELP = (
    "replace files of the names this command writes that it did not write into --out itself (a user's file, one "
    "changed since, or a model directory's own report; the folder's .algosel-outputs.json records what it wrote): "
    "without it, they are refused before any work"
)
#: --overwrite of a command writing one file.
OVERWRITE_FILE_HELP = "replace an existing file (without it, an existing file is refused before any work)"

COUNT = integer(0, "an integer >= 0")
POSITIVE = integer(1, "an integer >= 1")
