"""What the benchmarks that refit a shipped model's setting on records take: their shared arguments and checks.

``rank_vs_time.py`` and ``ranker_settings.py`` both read records (``--data``), start from a model's tuned
hyperparameters (``--params-from``) and cross-validate (``--folds``); a bad value ends them with one line naming it.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--data``, ``--params-from``, ``--folds`` and ``--threads``, with their defaults."""
    p.add_argument("--data", nargs="+", default=["data/sweeps/h200"])
    p.add_argument("--params-from", default="models/h200-cudnn91900", help="the model whose hyperparameters to use")
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)


def problem(prog: str, args: argparse.Namespace) -> str | None:
    """The one-line error for the first bad value of :func:`add_arguments`' arguments, or None."""
    if args.folds < 2:
        return f"{prog}: --folds must be at least 2, got {args.folds}"
    for d in args.data:
        if not Path(d).exists():
            return f"{prog}: --data {d} does not exist"
    if not (Path(args.params_from) / "manifest.json").is_file():
        return f"{prog}: --params-from {args.params_from} holds no model (no manifest.json)"
    return None
