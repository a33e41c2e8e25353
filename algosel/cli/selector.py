"""The commands about selectors: ``train``, ``calibrate``, ``evaluate``, ``compile`` and ``predict``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
import warnings
from pathlib import Path

from algosel.cli.boundary import CliError
from algosel.cli.options import COUNT, OVERWRITE_DIR_HELP, POSITIVE, integer, pair, positive_float
from algosel.problem import DTYPES, LAYOUTS

#: The options of ``algosel predict`` that give one field of the problem (a --key gives them all).
PROBLEM_OPTIONS = ("n", "c", "k", "h", "w", "r", "s", "pad", "stride", "dilation", "groups", "dtype", "layout",
                   "direction")  # fmt: skip


def _check_models_option(args: argparse.Namespace) -> None:
    """Before the minutes of training: the model directory must land inside --models, and --models take it."""
    from algosel.outputs import check_writable  # noqa: PLC0415

    name = args.name
    if name is not None and (name in ("", ".", "..") or Path(name).name != name or "\\" in name):
        raise CliError(f"--name {args.name!r}: a model directory name, not a path (it is made inside --models)")
    if Path(args.models).exists() and not Path(args.models).is_dir():
        raise CliError(f"--models {args.models}: exists and is not a directory")
    check_writable(args.models, "--models")


def _training_params(args: argparse.Namespace) -> tuple[dict, object]:
    """The tuning grid and the base parameters of ``algosel train``'s options."""
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.learn.train import DEFAULT_GRID  # noqa: PLC0415

    grid = DEFAULT_GRID if not args.quick else {"objective": ["lambdarank"]}
    base = RankerParams(n_estimators=args.n_estimators, num_threads=args.threads)
    if args.params_from:  # no tuning: the hyperparameters another model's tuning chose
        from algosel.learn.artifact import tuned_params  # noqa: PLC0415

        base = tuned_params(args.params_from, base)
        grid = {"objective": [base.objective]}
    if args.num_leaves is not None:  # a setting of its own (a joint model holds several GPUs' rankings)
        base = dataclasses.replace(base, num_leaves=args.num_leaves)
        grid = {k: v for k, v in grid.items() if k != "num_leaves"}
    return grid, base


def _cache_records(args: argparse.Namespace) -> list:
    if not args.from_cache:
        return []
    from algosel.runtime.cache_training import cache_training_records  # noqa: PLC0415

    return cache_training_records(args.from_cache, args.models)


def _score_line(prefix: str, selector: str, s: dict) -> str:
    return f"  {prefix}held-out {selector:16s} geomean {s['geomean']:.3f}  within 5% {100 * s['within_5pct']:.1f}%"


def cmd_train(args: argparse.Namespace) -> int:
    """``algosel train``: tune, fit and save a selector (``--joint``: one over several GPUs, untuned)."""
    _check_models_option(args)
    grid, base = _training_params(args)
    caches = _cache_records(args)
    if args.joint:
        return _train_joint(args, base, caches)
    from algosel.learn.train import train  # noqa: PLC0415

    out, summary = train(
        args.data, models_root=args.models, grid=grid, base=base, folds=args.folds, progress=not args.no_progress,
        name=args.name, force=args.force, command="algosel " + shlex.join(args.argv), trees=args.trees,
        cache_records=caches, cache_weight=args.cache_weight, replace_shipped=args.replace_shipped,
    )  # fmt: skip
    best = next(row for row in summary["tuning"] if row.get("chosen", True))
    print(
        f"wrote {out} (trained on {summary['train_problems']} problems; final fit {summary['final_fit_seconds']} s, "
        f"{summary['total_seconds']} s in all)"
    )
    print(f"chosen by {args.folds}-fold CV: " + ", ".join(f"{k}={v}" for k, v in best.items() if k != "chosen"))
    for sel, s in summary["test_scores"].items():
        if s["geomean"] is not None:  # None: a baseline the records cannot give (mode B of legacy algorithms)
            print(_score_line("", sel, s))
    return 0


def _train_joint(args: argparse.Namespace, base, caches: list) -> int:
    """``algosel train --joint``: one model over every GPU of the records (algosel.learn.joint), no tuning."""
    from algosel.learn.joint import train_joint  # noqa: PLC0415

    if not args.params_from:
        raise CliError("--joint does not tune (a cross-validation would mix GPUs): give --params-from MODEL")
    command = "algosel " + shlex.join(args.argv)
    out, summary = train_joint(
        args.data, base, models_root=args.models, name=args.name, force=args.force, command=command,
        cache_records=caches, cache_weight=args.cache_weight, replace_shipped=args.replace_shipped,
    )  # fmt: skip
    print(f"wrote {out} (joint model of {', '.join(summary['records_per_gpu'])}; {summary['total_seconds']} s)")
    for slug, scores in summary["test_scores_per_gpu"].items():
        for sel, s in scores.items():
            if s["geomean"] is not None:
                print(_score_line(f"{slug} ", sel, s))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``algosel calibrate``: fit a saved model's calibration and write it into its folder."""
    from algosel.learn.calibration import CALIBRATION_FILE, format_coverage  # noqa: PLC0415
    from algosel.learn.recalibrate import calibrate_saved_model  # noqa: PLC0415

    calibration = calibrate_saved_model(args.model, args.data or None, replace_shipped=args.replace_shipped)
    print(f"wrote {Path(args.model) / CALIBRATION_FILE} (recorded in its manifest)")
    print(format_coverage(calibration))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``algosel evaluate``: the model's picks against cuDNN's heuristics on held-out shapes, as report files."""
    from algosel.study.evaluation_files import check_out  # noqa: PLC0415 - light

    # before the seconds of importing the evaluation
    check_out(args.out, args.model, overwrite=args.overwrite, replace_shipped=args.replace_shipped)
    from algosel.study.evaluation import run_evaluation  # noqa: PLC0415

    if args.compare_model and not args.layers:
        raise CliError("--compare-model compares the models on your layers: give --layers FILE.csv too")
    if args.layers:  # validate the layers files before the (long) evaluation starts
        from algosel.measure.layers import load_layers  # noqa: PLC0415

        for path in args.layers:
            load_layers(path)
    text = run_evaluation(
        args.model, args.data, args.out, lono=not args.no_lono, progress=not args.no_progress, force=args.force,
        layers=args.layers, compare_model=args.compare_model, overwrite=args.overwrite,
        replace_shipped=args.replace_shipped,
    )  # fmt: skip
    print(text)
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    """``algosel compile``: the model's trees as native code of this CPU, cached."""
    from algosel.learn.compiled import CompileError, CompileOptions, compile_selector  # noqa: PLC0415
    from algosel.learn.models import default_model_dir  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415

    model = args.model or default_model_dir()
    selector = Selector.load(model, force=True)  # a model of another GPU compiles as well: the trees are the CPU's
    root = Path(args.root) / "compiled" if args.root else None
    started = time.perf_counter()
    try:
        entries = compile_selector(selector, CompileOptions(root=root))
    except CompileError as exc:
        raise CliError(f"{model}: {exc}") from None
    for name, path in entries.items():
        print(f"{name}: {path}")
    seconds = time.perf_counter() - started
    print(f"compiled the trees of {model} in {seconds:.1f} s; every process that loads the model takes them")
    return 0


def problem_from_args(args: argparse.Namespace):
    """The :class:`~algosel.problem.ConvProblem` of ``algosel predict``'s ``--key`` or field options."""
    from algosel.problem import ConvProblem  # noqa: PLC0415

    given = [f"--{f.replace('_', '-')}" for f in PROBLEM_OPTIONS if getattr(args, f) is not None]
    if args.key:
        if given:  # the key gives every field: another value would be silently ignored
            raise CliError(f"--key gives the whole problem; {given[0]} conflicts with it (give one or the other)")
        return ConvProblem.from_key(args.key)
    fields = {f: getattr(args, f) for f in ("n", "c", "k", "h", "w", "r", "s")}
    missing = [f for f, v in fields.items() if v is None]
    if missing:
        raise CliError(f"give --key or all of --n --c --k --h --w --r --s (missing: --{missing[0]})")
    pad, stride, dilation = args.pad or [0], args.stride or [1], args.dilation or [1]
    return ConvProblem(
        **fields, pad_h=pad[0], pad_w=pad[-1], stride_h=stride[0], stride_w=stride[-1], dilation_h=dilation[0],
        dilation_w=dilation[-1], groups=1 if args.groups is None else args.groups, dtype=args.dtype or "float32",
        layout=args.layout or "nchw", direction=args.direction or "fwd",
    )  # fmt: skip


def cmd_predict(args: argparse.Namespace) -> int:
    """``algosel predict``: the model's ranking of the candidates for one convolution."""
    problem = problem_from_args(args)  # checked before the seconds of importing the model's libraries
    from algosel.learn.selector import ExtrapolationWarning  # noqa: PLC0415
    from algosel.runtime.api import predict  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # said below, on one line, instead
        choices = predict(
            problem, model=args.model, max_workspace_bytes=args.max_workspace_bytes, deterministic=args.deterministic,
            top_k=args.top_k, live=False if args.offline else None, force=args.force, space=args.space,
        )  # fmt: skip
    if choices and choices[0].extrapolated:
        print(f"algosel predict: warning: extrapolated: {choices[0].extrapolation}", file=sys.stderr)
    if args.json:
        print(json.dumps({"problem": problem.key, "choices": [c.__dict__ for c in choices]}, indent=2))
        return 0
    print(problem.key)
    if choices and choices[0].extrapolated:
        print(f"  extrapolated: {choices[0].extrapolation}")
    for i, c in enumerate(choices, 1):
        ws = "?" if c.workspace_bytes is None else c.workspace_bytes
        algo = f"  {c.cudnn_algo} ({c.engine_id}) with {c.cudnn_math_type}" if c.cudnn_algo else ""
        t = "" if c.predicted_time_ms is None else f"  predicted {c.predicted_time_ms:.4g} ms"
        print(f"  {i}. {c.candidate_id}  score {c.score:.3f}{t}  workspace {ws} bytes  ({c.source}){algo}")
    return 0


def _add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="tune and fit a selector on sweep records; save it under models/")
    p.add_argument("data", nargs="+", help="dataset directories or part files")
    p.add_argument("--models", default="models", help="directory that receives <gpu>-cudnn<version>/")
    p.add_argument(
        "--name", default=None, help="model directory name inside --models (default: from the records' environment)"
    )
    p.add_argument("--folds", type=integer(2, "an integer >= 2"), default=3, help="cross-validation folds for tuning")
    p.add_argument("--n-estimators", type=POSITIVE, default=300)
    p.add_argument("--threads", type=POSITIVE, default=2, help="LightGBM threads (one on small records)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing model directory of that name (its own files only; a folder holding others is "
        "refused)",
    )
    p.add_argument(
        "--replace-shipped",
        action="store_true",
        help="with --force, replace a model shipped with algosel too (never replaced otherwise)",
    )
    _add_training_choices(p)
    p.set_defaults(func=cmd_train)


def _add_training_choices(p: argparse.ArgumentParser) -> None:
    """``algosel train``'s options that choose the hyperparameters and the records beside the sweep's."""
    p.add_argument("--quick", action="store_true", help="skip tuning: LambdaRank with default parameters")
    p.add_argument(
        "--params-from",
        default=None,
        metavar="MODEL",
        help="skip tuning: the hyperparameters of this model (e.g. the shipped one); overrides --n-estimators",
    )
    p.add_argument(
        "--num-leaves",
        type=integer(2, "an integer >= 2"),
        default=None,
        help="leaves per tree, instead of tuning's or --params-from's (the joint model's 255: docs/selector.md)",
    )
    p.add_argument(
        "--joint",
        action="store_true",
        help="one model over the records of every GPU given (of one cuDNN), with hardware features; needs "
        '--params-from (docs/selector.md, "A GPU of your own")',
    )
    p.add_argument(
        "--trees",
        choices=("lightgbm", "compiled"),
        default="lightgbm",
        help="the prediction path tuning holds to the 1 ms first-prediction budget: 'compiled' where the model's "
        "users run `algosel compile` (a larger setting fits)",
    )
    p.add_argument(
        "--from-cache",
        nargs="+",
        action="extend",
        default=[],
        metavar="CACHE_DIR",
        help="also learn from the runtime cache's measured decisions (verify mode's timings): a cache folder "
        "(`algosel cache show` lists them) or a cache root; the model is a new directory, never replaced",
    )
    p.add_argument(
        "--cache-weight",
        type=positive_float,
        default=1.0,
        help="training weight of a cache's row against a sweep's (default 1)",
    )
    p.add_argument("--no-progress", action="store_true")


def _add_calibrate_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit a model's calibration of its predicted times (calibration.json, which the runtime's rule reads) on "
        "the records it was trained on",
    )
    p.add_argument("--model", required=True, help="model directory (written into: calibration.json, its manifest)")
    p.add_argument(
        "--data",
        nargs="+",
        action="extend",
        default=[],
        help="the records the model was trained on (default: those its manifest names)",
    )
    p.add_argument(
        "--replace-shipped",
        action="store_true",
        help="let --model be a model shipped with algosel (never written into otherwise)",
    )
    p.set_defaults(func=cmd_calibrate)


def add_parsers(sub) -> None:
    """Add the selector commands to the subparsers ``sub``."""
    _add_train_parser(sub)
    _add_calibrate_parser(sub)
    p = sub.add_parser("evaluate", help="compare the model's picks with cuDNN's heuristics on held-out shapes")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--data", nargs="+", required=True, help="the records the model was trained and tested on")
    p.add_argument(
        "--out",
        default=None,
        help="directory for the report files (default: reports/<model name>), written as one unit once all is "
        "computed; an earlier run's files there are replaced, other files left alone",
    )
    p.add_argument("--no-lono", action="store_true", help="skip leave-one-network-out (it retrains per network)")
    p.add_argument("--force", action="store_true", help="score a model made for another GPU or cuDNN than the records")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_DIR_HELP)
    p.add_argument(
        "--replace-shipped",
        action="store_true",
        help="let --out be a shipped model's directory (how its committed report is made; never written otherwise)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--layers", action="append", default=[], metavar="FILE.csv", help="also judge the model on these layers"
    )
    p.add_argument("--compare-model", default=None, help="a second model judged on the layers (e.g. the shipped one)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "compile", help="compile a model's trees to native code of this CPU, cached (pip install 'algosel[compiled]')"
    )
    p.add_argument("--model", default=None, help="model directory (default: the shipped one for this GPU)")
    p.add_argument("--root", default=None, help="cache root (default: $ALGOSEL_CACHE_DIR or ~/.cache/algosel)")
    p.set_defaults(func=cmd_compile)

    _add_predict_parser(sub)


def _add_predict_parser(sub) -> None:
    p = sub.add_parser("predict", help="rank the candidates for one convolution")
    p.add_argument("--key", help="a problem key (as printed by `algosel grid`, plus _dtype_layout_direction)")
    # No defaults here: a field given with --key is refused, so "given" must be told from "defaulted".
    for f in ("n", "c", "k", "h", "w", "r", "s"):
        p.add_argument(f"--{f}", type=int)
    p.add_argument("--pad", type=pair, default=None, help="p or ph,pw (default 0)")
    p.add_argument("--stride", type=pair, default=None, help="u or uh,uw (default 1)")
    p.add_argument("--dilation", type=pair, default=None, help="d or dh,dw (default 1)")
    p.add_argument("--groups", type=int, default=None, help="(default 1)")
    p.add_argument("--dtype", default=None, help=f"one of {', '.join(DTYPES)} (default float32)")
    p.add_argument("--layout", default=None, help=f"one of {', '.join(LAYOUTS)} (default nchw)")
    p.add_argument("--direction", default=None, help="fwd, bwd_data or bwd_filter (default fwd)")
    p.add_argument("--model", default=None, help="model directory (default: the shipped one for this GPU)")
    p.add_argument("--max-workspace-bytes", type=COUNT, default=None)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--top-k", type=POSITIVE, default=3)
    p.add_argument("--offline", action="store_true", help="never enumerate cuDNN live, even with a GPU")
    p.add_argument("--force", action="store_true", help="use a model made for another GPU or cuDNN")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--space",
        default="cudnn",
        choices=("cudnn", "legacy"),
        help="cudnn: engine configs, GEMM lowering, PyTorch's default; legacy: CUDNN_CONVOLUTION_*_ALGO",
    )
    p.set_defaults(func=cmd_predict)
