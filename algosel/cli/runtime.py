"""The commands about the runtime on this machine: ``doctor``, ``build-ext`` and ``cache``."""

from __future__ import annotations

import argparse
from pathlib import Path

from algosel.cli.boundary import CliError
from algosel.cli.options import existing


def cmd_doctor(args: argparse.Namespace) -> int:
    """``algosel doctor``: what this machine has, which model matches it, what the hook will do."""
    from algosel.runtime.doctor import main_text  # noqa: PLC0415

    for folder in args.models or []:  # a folder asked for and absent would be looked in for nothing, silently
        existing("--models", folder, directory=True)
    print(main_text(args.models or ["models"], as_json=args.json))
    return 0


def cmd_build_ext(args: argparse.Namespace) -> int:
    """``algosel build-ext``: build the runtime's compiled path."""
    from algosel.runtime import native  # noqa: PLC0415

    try:
        path = native.build(verbose=args.verbose_build)
    except native.NativeBuildError as exc:
        raise CliError(str(exc)) from None
    print(f"built {path}")
    print(native.status())
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """``algosel cache show|clear``: the runtime's persistent decisions and plans."""
    from algosel.runtime.cache_text import clear_lines, show_lines  # noqa: PLC0415
    from algosel.runtime.native import cache_root  # noqa: PLC0415

    root = Path(args.root) if args.root else cache_root()
    for line in show_lines(root) if args.action == "show" else clear_lines(root):
        print(line)
    return 0


def add_parsers(sub) -> None:
    """Add the runtime commands to the subparsers ``sub``."""
    p = sub.add_parser("doctor", help="what this machine has, which model matches it, what the hook will do")
    p.add_argument(
        "--models", action="append", default=None, help="a directory of local models (default: ./models); repeatable"
    )
    p.add_argument("--json", action="store_true", help="the facts as JSON")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("build-ext", help="build the runtime's compiled path (GPU machine; about a minute)")
    p.add_argument("--verbose-build", action="store_true", help="show the compiler's output")
    p.set_defaults(func=cmd_build_ext)

    p = sub.add_parser("cache", help="show or clear the runtime's persistent decisions and plans")
    p.add_argument("action", choices=("show", "clear"))
    p.add_argument("--root", default=None, help="cache root (default: $ALGOSEL_CACHE_DIR or ~/.cache/algosel)")
    p.set_defaults(func=cmd_cache)
