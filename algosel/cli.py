"""The ``algosel`` command line: ``algosel <subcommand> --help`` for each."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from algosel.cli_boundary import CliError, run_command  # noqa: F401 - CliError: public here, as before
from algosel.problem import DTYPES, LAYOUTS
from algosel.version import __version__


class _Parser(argparse.ArgumentParser):
    """argparse with a subcommand's usage errors on one line (``algosel <command> --help`` has the usage); a
    missing or unknown command still shows the usage, which lists the commands."""

    def error(self, message: str):  # type: ignore[override]
        if " " not in self.prog:  # the top-level parser
            super().error(message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _integer(minimum: int, what: str):
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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _gpus(text: str) -> str:
    if text == "all":
        return text
    try:
        if int(text) >= 1:
            return str(int(text))
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected 'all' or a number of GPUs >= 1, got {text!r}")


#: --overwrite of a command writing a folder of outputs (the rule of algosel.files.write_output_dir).
_OVERWRITE_DIR_HELP = (
    "replace files of the names this command writes that it did not write into --out itself (a user's file, one "
    "changed since, or a model directory's own report; the folder's .algosel-outputs.json records what it wrote): "
    "without it, they are refused before any work"
)
#: --overwrite of a command writing one file.
_OVERWRITE_FILE_HELP = "replace an existing file (without it, an existing file is refused before any work)"

_COUNT = _integer(0, "an integer >= 0")
_POSITIVE = _integer(1, "an integer >= 1")


# ------------------------------------------------------------------------------------------------- sweep
def _suite_names(text: str) -> list[str]:
    from algosel.measure.suites import SUITES  # noqa: PLC0415

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
    from algosel.measure.cases import build_cases  # noqa: PLC0415
    from algosel.measure.grid import MIXES, GridSpec  # noqa: PLC0415

    if args.quick is not None:
        return _quick_cases(args)
    dtypes = _check_choices("--dtypes", _csv_list(args.dtypes), DTYPES)
    layouts = _check_choices("--layouts", _csv_list(args.layouts), LAYOUTS)
    grid_layouts = _check_choices("--grid-layouts", _csv_list(args.grid_layouts or args.layouts), LAYOUTS)
    (mix,) = _check_choices("--grid-mix", [args.grid_mix], tuple(MIXES))
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
    cases = build_cases(grid, _suite_names(suites), dtypes, layouts, grid_layouts=grid_layouts, layers=args.layers)
    return cases[: args.limit] if args.limit else cases


def _quick_cases(args):
    """``--quick MINUTES``: the new-GPU mix of :mod:`algosel.measure.quick`, its budget the sweep's."""
    from algosel.measure.quick import QuickPlan, quick_cases  # noqa: PLC0415

    if args.grid or args.layers or args.grid_mix != "networks":
        raise CliError("--quick chooses the shapes itself: leave out --grid, --grid-mix and --layers")
    plan = QuickPlan(
        minutes=args.quick,
        own_seed=args.seed + 1,
        dtypes=tuple(_check_choices("--dtypes", _csv_list(args.dtypes), DTYPES)),
        layouts=tuple(_check_choices("--layouts", _csv_list(args.quick_layouts), LAYOUTS)),
    )
    if args.time_budget_s is None:
        args.time_budget_s = plan.time_budget_s
    cases = quick_cases(plan, _suite_names(args.suites if args.suites is not None else "all"))
    return cases[: args.limit] if args.limit else cases


def _spaces(names: list[str]):
    from algosel.spaces import make_space  # noqa: PLC0415

    return [make_space(n) for n in names]


def _existing(option: str, path: str, directory: bool = False) -> Path:
    """``path``, which must exist (a dataset to resume from; with ``directory``, a folder of models); else a one-line
    error naming the option and the path."""
    if not Path(path).exists():
        raise CliError(f"{option} {path}: no such {'directory' if directory else 'file or directory'}")
    if directory and not Path(path).is_dir():
        raise CliError(f"{option} {path}: not a directory")
    return Path(path)


def cmd_sweep(args) -> int:
    from algosel.measure.sweep import parse_shard  # noqa: PLC0415

    shard = parse_shard(args.shard)
    for dataset in args.resume_from:  # a mistyped one would measure again every case it holds
        _existing("--resume-from", dataset)
    cases = _cases_from_args(args)
    if args.dry_run:
        from_layers = sum(1 for c in cases if c.source.startswith("layers:"))
        layers = f", {from_layers} from layers files" if args.layers else ""
        line = f"{len(cases)} cases ({sum(1 for c in cases if c.source.startswith('grid'))} from the grid{layers})"
        if args.resume_from or Path(args.out).is_dir():  # what a sweep would measure: the cases none has
            from algosel.measure.sweep import done_case_keys, journal_case_keys  # noqa: PLC0415

            # --out's journals too: a killed run's finished cases, which the sweep compacts instead of measuring
            done = done_case_keys(args.out, *args.resume_from) | journal_case_keys(args.out)
            recorded = sum(1 for c in cases if c.key in done)
            line += f"; {recorded} already recorded, {len(cases) - recorded} to measure"
        print(line)
        return 0
    if args.ray is not None:
        return _sweep_on_ray(args, cases, shard)
    if args.gpus is not None:
        return _launch_per_gpu(args)
    import torch  # noqa: PLC0415

    from algosel.measure.sweep import Sweeper, run_sweep  # noqa: PLC0415
    from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415
    from algosel.records.environment import collect_environment  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("sweep needs a CUDA GPU (none is visible); `algosel summarize` works on shipped records")
    spaces = _spaces(_csv_list(args.spaces))
    for space in spaces:
        why = space.available()
        if why:
            raise CliError(f"candidate space {space.name!r} cannot run here: {why}")
    sweeper = Sweeper(
        spaces,
        CudaEventTimer(budget_ms=args.budget_ms),
        collect_environment(),
        workspace_limit_bytes=args.workspace_limit_bytes,
        seed=args.seed,
    )
    report = run_sweep(
        cases,
        sweeper,
        args.out,
        shard=shard,
        resume_from=args.resume_from,
        time_budget_s=args.time_budget_s,
        progress=not args.no_progress,
        retry_crashed=args.retry_crashed,
    )
    print(
        f"shard {args.shard}: measured {report.measured} cases, {report.skipped_done} already recorded, "
        f"{report.skipped_crashed} skipped after crashes, {report.left_for_later} left for a later run"
        + (f"; wrote {report.part}" if report.part else "")
        + (f"; stopped by {signal.Signals(report.interrupted).name}" if report.interrupted else "")
    )
    # A signal's conventional exit status (130 for SIGINT, 143 for SIGTERM), so that schedulers see the stop.
    return 128 + report.interrupted if report.interrupted else 0


def _launch_per_gpu(args) -> int:
    """One sweep process per GPU, each with its own shard and CUDA_VISIBLE_DEVICES."""
    import torch  # noqa: PLC0415

    visible = torch.cuda.device_count()
    count = visible if args.gpus == "all" else int(args.gpus)
    if count < 1 or count > visible:
        raise CliError(f"--gpus {args.gpus}: {visible} GPU(s) visible")
    argv = []  # the command line without --gpus (as `--gpus N` or `--gpus=N`)
    skip = False
    for a in args.argv:
        if skip or a.startswith("--gpus="):
            skip = False
            continue
        if a == "--gpus":
            skip = True
            continue
        argv.append(a)
    procs = []
    stopped: list[int] = []

    def forward(signum, _frame):  # a stop of this process stops every shard, each cleanly (see run_sweep)
        stopped.append(signum)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for g in range(count):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(g))
            cmd = [sys.executable, "-m", "algosel", *argv, "--shard", f"{g}/{count}"]
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait() for p in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        return 128 + stopped[0]
    # A shard killed by a signal has a negative code: report it as the shell would (128 + signal).
    return max(128 - c if c < 0 else c for c in codes)


def _sweep_on_ray(args, cases, shard) -> int:
    """The cases as tasks on a Ray cluster, one GPU a task; records written here (algosel.measure.ray_sweep)."""
    if args.gpus is not None:
        raise CliError(f"--gpus {args.gpus} and --ray: choose one (--ray schedules the cluster's GPUs itself)")
    from algosel.measure.ray_cluster import connect  # noqa: PLC0415
    from algosel.measure.ray_sweep import GpuSweeperSpec, run_ray_sweep, workers_line  # noqa: PLC0415
    from algosel.spaces import space_names  # noqa: PLC0415

    spaces = _check_choices("--spaces", _csv_list(args.spaces), space_names())
    connect(args.ray)
    spec = GpuSweeperSpec(tuple(spaces), args.budget_ms, args.workspace_limit_bytes, args.seed)
    report = run_ray_sweep(
        cases,
        spec,
        args.out,
        shard=shard,
        resume_from=args.resume_from,
        time_budget_s=args.time_budget_s,
        progress=not args.no_progress,
        retry_crashed=args.retry_crashed,
        chunk_cases=args.chunk_cases,
    )
    print(
        f"ray, shard {args.shard}: measured {report.measured} cases {workers_line(report)}, {report.skipped_done} "
        f"already recorded, {report.skipped_crashed} skipped after crashes, {report.left_for_later} left for a "
        "later run"
        + (f"; wrote {report.part}" if report.part else "")
        + (f"; stopped by {signal.Signals(report.interrupted).name}" if report.interrupted else "")
    )
    return 128 + report.interrupted if report.interrupted else 0


# --------------------------------------------------------------------------------------------- summarize
def cmd_summarize(args) -> int:
    from algosel.records import load_records  # noqa: PLC0415
    from algosel.records.analysis import summarize  # noqa: PLC0415
    from algosel.records.environment import gpu_slug  # noqa: PLC0415

    frame, envs = load_records(*args.data)
    slugs = {e: gpu_slug(env) for e, env in envs.items()}
    # A table per GPU x cuDNN: candidates' times are comparable on one only.
    for slug in sorted(set(slugs.values())):
        mine = [e for e, s in slugs.items() if s == slug]
        if len(set(slugs.values())) > 1:
            print(f"== {slug}")
        for e in mine:
            env = envs[e]
            print(
                f"environment {env['env_id']}: {env.get('gpu_name')}, cuDNN {env.get('cudnn')}, "
                f"torch {env.get('torch')}, driver {env.get('driver')}"
            )
        print(summarize(frame[frame["env_id"].isin(mine)], worst=args.worst))
    return 0


def cmd_env(args) -> int:
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("env describes a CUDA GPU and none is visible")
    from algosel.records.environment import collect_environment  # noqa: PLC0415

    print(json.dumps(collect_environment(), indent=2))
    return 0


def cmd_grid(args) -> int:
    from algosel.measure.grid import MIXES, GridSpec, iter_grid  # noqa: PLC0415

    spec = GridSpec(
        count=args.count,
        seed=args.seed,
        max_flops=args.max_flops,
        max_operand_bytes=args.max_operand_bytes,
        mix=_check_choices("--mix", [args.mix], tuple(MIXES))[0],
        max_count=None,  # printed as drawn: no count is too large to start, and `| head` stops it
    )
    for p in iter_grid(spec):  # each shape as it is drawn: a large --count prints at once, and `| head` stops it
        print(p.shape_key)
    return 0


def cmd_suites(args) -> int:
    from algosel.measure.suites import DEFAULT_SUITES_DIR, write_suites  # noqa: PLC0415

    names = _suite_names(args.names)
    try:
        written = write_suites(args.out or DEFAULT_SUITES_DIR, names or None)
    except RuntimeError as exc:  # a suite needs torchvision and it is not installed
        raise CliError(str(exc)) from exc
    for path in written or []:
        print(path)
    return 0


def cmd_layers(args) -> int:
    from algosel.files import check_output_file  # noqa: PLC0415

    check_output_file(args.out, overwrite=args.overwrite)  # before torch and the model are imported
    from algosel.measure.layers import (  # noqa: PLC0415
        LayersError,
        default_network_name,
        load_model,
        model_layers,
        parse_input,
        write_layers,
    )

    try:
        inputs = [parse_input(text) for text in args.input]
        network = args.network if args.network is not None else default_network_name(args.model)
        frame, skipped = model_layers(load_model(args.model), inputs, network, name=args.model)
    except LayersError as exc:
        raise CliError(str(exc)) from None
    path = write_layers(frame, check_output_file(args.out, overwrite=args.overwrite))  # again: time has passed
    shapes = frame.drop_duplicates(subset=[c for c in frame.columns if c not in ("network", "layer", "size")])
    print(
        f"wrote {path}: network {network}, {len(frame)} conv calls, {len(shapes)} distinct shapes, "
        f"{len(inputs)} input size(s)"
    )
    if skipped:
        others = ", ".join(f"{name} x{count}" for name, count in sorted(skipped.items()))
        print(f"not recorded (algosel covers 2-D convolutions): {others}")
    return 0


def cmd_doctor(args) -> int:
    from algosel.runtime.doctor import main_text  # noqa: PLC0415

    for folder in args.models or []:  # a folder asked for and absent would be looked in for nothing, silently
        _existing("--models", folder, directory=True)
    print(main_text(args.models or ["models"], as_json=args.json))
    return 0


# -------------------------------------------------------------------------------------------- selector
def cmd_train(args) -> int:
    from algosel.files import check_writable  # noqa: PLC0415

    # Before the minutes of training: the model directory must land inside --models, and --models take it.
    name = args.name
    if name is not None and (name in ("", ".", "..") or Path(name).name != name or "\\" in name):
        raise CliError(f"--name {args.name!r}: a model directory name, not a path (it is made inside --models)")
    if Path(args.models).exists() and not Path(args.models).is_dir():
        raise CliError(f"--models {args.models}: exists and is not a directory")
    check_writable(args.models, "--models")
    from algosel.learn.ranker import RankerParams  # noqa: PLC0415
    from algosel.learn.train import DEFAULT_GRID, train  # noqa: PLC0415

    grid = DEFAULT_GRID if not args.quick else {"objective": ["lambdarank"]}
    base = RankerParams(n_estimators=args.n_estimators, num_threads=args.threads)
    if args.params_from:  # no tuning: the hyperparameters another model's tuning chose
        from algosel.learn.artifact import tuned_params  # noqa: PLC0415

        base = tuned_params(args.params_from, base)
        grid = {"objective": [base.objective]}
    if args.num_leaves is not None:  # a setting of its own (a joint model holds several GPUs' rankings)
        base = dataclasses.replace(base, num_leaves=args.num_leaves)
        grid = {k: v for k, v in grid.items() if k != "num_leaves"}
    caches = _cache_records(args)
    if args.joint:
        return _train_joint(args, base, caches)
    out, summary = train(
        args.data,
        models_root=args.models,
        grid=grid,
        base=base,
        folds=args.folds,
        progress=not args.no_progress,
        name=args.name,
        force=args.force,
        command="algosel " + shlex.join(args.argv),
        trees=args.trees,
        cache_records=caches,
        cache_weight=args.cache_weight,
        replace_shipped=args.replace_shipped,
    )
    best = next(row for row in summary["tuning"] if row.get("chosen", True))
    print(
        f"wrote {out} (trained on {summary['train_problems']} problems; final fit {summary['final_fit_seconds']} s, "
        f"{summary['total_seconds']} s in all)"
    )
    print(f"chosen by {args.folds}-fold CV: " + ", ".join(f"{k}={v}" for k, v in best.items() if k != "chosen"))
    for sel, s in summary["test_scores"].items():
        if s["geomean"] is None:  # a baseline the records cannot give (mode B of legacy algorithms)
            continue
        print(f"  held-out {sel:16s} geomean {s['geomean']:.3f}  within 5% {100 * s['within_5pct']:.1f}%")
    return 0


def _cache_records(args) -> list:
    """The records of every runtime cache folder of ``--from-cache`` (a cache root: its folders), each read with
    the model that filled it (found by its records' fingerprint under ``--models`` or among the shipped ones)."""
    if not args.from_cache:
        return []
    from algosel.learn.models import model_by_fingerprint  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415
    from algosel.runtime.cache import cache_folders, folder_environment  # noqa: PLC0415
    from algosel.runtime.measured import records_from_cache  # noqa: PLC0415

    folders = []
    for given in args.from_cache:
        env, why = folder_environment(given)
        if env is not None:
            folders.append((given, env))
            continue
        inner = [(f, folder_environment(f)[0]) for f in cache_folders(given)]
        inner = [(f, e) for f, e in inner if e is not None]
        if not inner:
            raise CliError(f"--from-cache {given}: not a runtime cache folder, nor a cache root holding one ({why})")
        folders += inner
    frames = []
    for folder, env in folders:
        model = model_by_fingerprint(str(env.get("model")), [args.models, None])
        if model is None:
            raise CliError(
                f"--from-cache {folder}: filled with the model of data fingerprint {env.get('model')}, which is "
                f"neither under --models {args.models} nor shipped (its candidate lists give the timed candidates' "
                "heuristic ranks): put that model under --models"
            )
        frames.append(records_from_cache(folder, Selector.load(model, force=True)))
    if not any(len(f) for f in frames):
        raise CliError(f"--from-cache {' '.join(args.from_cache)}: no measured decision (verify mode's) to learn from")
    return frames


def _train_joint(args, base, caches) -> int:
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
                within = 100 * s["within_5pct"]
                print(f"  {slug} held-out {sel:16s} geomean {s['geomean']:.3f}  within 5% {within:.1f}%")
    return 0


def cmd_evaluate(args) -> int:
    from algosel.study.evaluation_out import check_out  # noqa: PLC0415 - light

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
        args.model,
        args.data,
        args.out,
        lono=not args.no_lono,
        progress=not args.no_progress,
        force=args.force,
        layers=args.layers,
        compare_model=args.compare_model,
        overwrite=args.overwrite,
        replace_shipped=args.replace_shipped,
    )
    print(text)
    return 0


def cmd_predict(args) -> int:
    from algosel.problem import ConvProblem  # noqa: PLC0415

    given = [f"--{f.replace('_', '-')}" for f in _PROBLEM_OPTIONS if getattr(args, f) is not None]
    if args.key:
        if given:  # the key gives every field: another value would be silently ignored
            raise CliError(f"--key gives the whole problem; {given[0]} conflicts with it (give one or the other)")
        problem = ConvProblem.from_key(args.key)
    else:
        fields = {f: getattr(args, f) for f in ("n", "c", "k", "h", "w", "r", "s")}
        missing = [f for f, v in fields.items() if v is None]
        if missing:
            raise CliError(f"give --key or all of --n --c --k --h --w --r --s (missing: --{missing[0]})")
        pad, stride, dilation = args.pad or [0], args.stride or [1], args.dilation or [1]
        problem = ConvProblem(
            **fields,
            pad_h=pad[0],
            pad_w=pad[-1],
            stride_h=stride[0],
            stride_w=stride[-1],
            dilation_h=dilation[0],
            dilation_w=dilation[-1],
            groups=1 if args.groups is None else args.groups,
            dtype=args.dtype or "float32",
            layout=args.layout or "nchw",
            direction=args.direction or "fwd",
        )
    # The problem is checked above, before the seconds of importing the model's libraries.
    from algosel.learn.selector import ExtrapolationWarning  # noqa: PLC0415
    from algosel.runtime.api import predict  # noqa: PLC0415

    with warnings.catch_warnings():
        # Said below, on one line, instead of as a Python warning.
        warnings.simplefilter("ignore", ExtrapolationWarning)
        choices = predict(
            problem,
            model=args.model,
            max_workspace_bytes=args.max_workspace_bytes,
            deterministic=args.deterministic,
            top_k=args.top_k,
            live=False if args.offline else None,
            force=args.force,
            space=args.space,
        )
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


#: The options of ``algosel predict`` that give one field of the problem (a --key gives them all).
_PROBLEM_OPTIONS = ("n", "c", "k", "h", "w", "r", "s", "pad", "stride", "dilation", "groups", "dtype", "layout",
                    "direction")  # fmt: skip


# ------------------------------------------------------------------------------------------------ runtime
def cmd_build_ext(args) -> int:
    from algosel.runtime import native  # noqa: PLC0415

    try:
        path = native.build(verbose=args.verbose_build)
    except native.NativeBuildError as exc:
        raise CliError(str(exc)) from None
    print(f"built {path}")
    print(native.status())
    return 0


def cmd_compile(args) -> int:
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


def cmd_cache(args) -> int:
    from algosel.runtime.cache import RuntimeCache, cache_folders, clear_folder, folder_environment  # noqa: PLC0415
    from algosel.runtime.native import cache_root  # noqa: PLC0415

    root = Path(args.root) if args.root else cache_root()
    folders = cache_folders(root)
    if args.action == "show":
        if not folders:
            print(f"no runtime decisions under {root / 'runtime'}")
            return 0
        for folder in folders:
            env, why = folder_environment(folder)
            if env is None:
                print(f"{folder}: not a runtime cache folder ({why})")
                continue
            cache = RuntimeCache(root, env)
            with warnings.catch_warnings():  # damaged lines are said on the folder's line, naming the file
                warnings.simplefilter("ignore", RuntimeWarning)
                s = cache.summary()
            hook_decisions = s["decisions"] - s["predict_measured"]
            damaged = f"; {s['damaged_lines']} damaged line(s) of {cache.decisions_path} skipped" if s[
                "damaged_lines"] else ""  # fmt: skip
            print(f"{s['folder']}: {hook_decisions} decisions of the hook {s['by_source']}, "
                  f"{s['predict_measured']} problems measured by predict(verify=k), {s['plans']} plans "
                  f"({s['plan_bytes']} bytes); {env.get('gpu_name')}, cuDNN {env.get('cudnn')}, "
                  f"torch {env.get('torch')}, model {env.get('model')}{damaged}")  # fmt: skip
        return 0
    # Only what the cache can prove it wrote goes (runtime.cache.clear_folder): never a folder someone else put there.
    removed, left = 0, []
    for folder in folders:
        lines = clear_folder(folder)
        removed += not lines
        left += lines
    for line in left:
        print(line)
    print(f"removed {removed} runtime cache folder(s) under {root / 'runtime'}; {len(left)} item(s) left")
    return 0


# ------------------------------------------------------------------------------------------- analyze-log
def cmd_analyze_log(args) -> int:
    if args.csv:  # before the log is read, and the seconds of importing pandas
        from algosel.files import check_output_file  # noqa: PLC0415

        check_output_file(args.csv, overwrite=args.overwrite, option="--csv")
    from algosel.study.logs import LogError, analyze, conv_calls, parse_log, summary  # noqa: PLC0415

    try:
        calls = conv_calls(parse_log(args.log))
    except LogError as exc:
        raise CliError(str(exc)) from None
    if not calls:
        raise CliError(f"{args.log}: the log shows no convolution call (cudnnConvolution* or a conv graph)")
    import pandas as pd  # noqa: PLC0415

    from algosel.learn.artifact import SelectorError  # noqa: PLC0415
    from algosel.learn.models import check_space, default_model_dir  # noqa: PLC0415
    from algosel.learn.selector import Selector  # noqa: PLC0415
    from algosel.records import load_records  # noqa: PLC0415

    selectors, dirs = {}, {}
    for api, space, path in (("graph", "cudnn", args.model), ("legacy", "legacy", args.legacy_model)):
        try:
            dirs[api] = path or default_model_dir(space=space)
            selectors[api] = Selector.load(dirs[api], force=args.force)
            option = "--model" if api == "graph" else "--legacy-model"
            check_space(selectors[api], dirs[api], space, f"{option}'s calls ({api} API)")
        except SelectorError as exc:
            if path:  # the model asked for: a wrong one is an error, not an empty column
                raise
            print(f"algosel analyze-log: no {space} selector ({exc}); its column stays empty", file=sys.stderr)
    if args.data is not None:
        records, envs = load_records(*args.data)
        if len(records):  # picks priced on another GPU's records mean nothing: refused as `algosel evaluate` does
            from algosel.learn.models import check_records_environment  # noqa: PLC0415
            from algosel.records.store import one_environment  # noqa: PLC0415

            records_env = one_environment(records, envs, "a log's pricing")[1]
            for api, space, path in (("graph", "cudnn", args.model), ("legacy", "legacy", args.legacy_model)):
                if api not in selectors:
                    continue
                try:
                    other = check_records_environment(selectors[api], dirs[api], records_env, args.force)
                    if other:
                        print(f"algosel analyze-log: warning: {dirs[api]} priced on records of another environment "
                              f"(--force): {', '.join(other)}", file=sys.stderr)  # fmt: skip
                except SelectorError as exc:
                    if path:  # the model asked for
                        raise
                    del selectors[api]  # the default one: left out, as a model that does not load
                    print(f"algosel analyze-log: no {space} selector ({exc}); its column stays empty", file=sys.stderr)
    else:  # the records the selectors were trained on, which every model carries in its catalogue
        frames = [sel.catalogue.frame for sel in selectors.values()]
        records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    measured = _measure_unrecorded(calls, records) if args.measure else None
    table = analyze(calls, records, selectors, measured)
    if args.csv:
        from algosel.files import check_output_file, write_text  # noqa: PLC0415

        write_text(check_output_file(args.csv, overwrite=args.overwrite, option="--csv"), table.to_csv(index=False))
    cols = ["first_line", "calls", "api", "problem", "chosen", "chosen_ms", "algosel_pick", "algosel_ms",
            "best_same_api_ms", "best_ms", "lost_ms", "note"]  # fmt: skip
    with pd.option_context("display.max_colwidth", 80, "display.width", 250, "display.float_format", "{:.4f}".format):
        print(table[cols].to_string(index=False))
    print()
    print(summary(table))
    return 0


def _measure_unrecorded(calls, records):
    """Sweep, on this GPU, the problems of ``calls`` the records lack (legacy calls: the legacy space)."""
    import torch  # noqa: PLC0415

    from algosel.measure.sweep import Sweeper  # noqa: PLC0415
    from algosel.measure.timing import CudaEventTimer  # noqa: PLC0415
    from algosel.records.environment import collect_environment  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise CliError("--measure needs a CUDA GPU (none is visible)")
    known = set(records["problem_key"]) if len(records) else set()
    env = collect_environment()
    rows = []
    for api, names in (("legacy", ["legacy"]), ("graph", ["gemm", "pytorch", "cudnn"])):
        problems = {c.problem for c in calls if c.api == api and c.problem and c.problem.key not in known}
        if problems:
            sweeper = Sweeper(_spaces(names), CudaEventTimer(), env)
            for p in sorted(problems, key=lambda q: q.key):
                rows += sweeper.measure_problem(p, source="log")
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame(rows)


def _pair(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'h,w', got {text!r}") from None
    if len(values) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected an integer or 'h,w', got {text!r}")
    return values


# ------------------------------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="algosel", description=f"Convolution algorithm selection for NVIDIA GPUs (algosel {__version__})."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("--version", action="version", version=f"algosel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sweep", help="measure every candidate on a grid of shapes and network suites (GPU)")
    p.add_argument("--out", required=True, help="dataset directory to write record parts into")
    p.add_argument("--resume-from", action="append", default=[], help="dataset whose cases are skipped")
    p.add_argument("--grid", type=_COUNT, default=0, help="number of grid shapes (0: none)")
    p.add_argument("--seed", type=_COUNT, default=0, help="grid and operand seed (an integer >= 0)")
    p.add_argument("--max-flops", type=_positive_float, default=5e10, help="largest grid problem, in FLOPs")
    p.add_argument("--max-operand-bytes", type=_POSITIVE, default=256 << 20, help="largest grid problem's x + w + y")
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
    p.add_argument("--gpus", type=_gpus, default=None, help="'all' or a count: one process (and shard) per GPU")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the cases as tasks on a Ray cluster, one GPU a task (host:port of its head, ray://host:port, or "
        "none: this machine's cluster, else a new one of this machine; needs pip install 'algosel[ray]')",
    )
    p.add_argument("--chunk-cases", type=_POSITIVE, default=16, help="with --ray: cases a task")
    p.add_argument("--time-budget-s", type=_positive_float, default=None, help="stop starting cases after this long")
    p.add_argument(
        "--quick",
        type=_positive_float,
        default=None,
        metavar="MINUTES",
        help="a GPU new to algosel: the suites' layers, shapes of the shipped grid and of a grid of its own (seed "
        "--seed + 1), interleaved shape by shape in every dtype and layout, for MINUTES (docs/selector.md)",
    )
    p.add_argument(
        "--quick-layouts", default="nchw,nhwc", help="with --quick: the layouts of every shape (default: both)"
    )
    p.add_argument("--budget-ms", type=_positive_float, default=10.0, help="device time per candidate for repeats")
    p.add_argument("--workspace-limit-bytes", type=_COUNT, default=8 << 30)
    p.add_argument("--limit", type=_COUNT, default=0, help="only the first N cases (a tiny sweep)")
    p.add_argument("--retry-crashed", action="store_true", help="try again cases that ended the process twice")
    p.add_argument("--dry-run", action="store_true", help="print the number of cases and stop")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("summarize", help="compare cuDNN's heuristics and PyTorch's default with the best")
    p.add_argument("data", nargs="+", help="dataset directories or part files")
    p.add_argument("--worst", type=_COUNT, default=10, help="worst cases listed per selector")
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("env", help="print the environment record of this GPU")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("grid", help="print the shapes of the seeded grid")
    p.add_argument("--count", type=_COUNT, default=400)
    p.add_argument("--seed", type=_COUNT, default=0, help="an integer >= 0")
    p.add_argument("--max-flops", type=_positive_float, default=5e10)
    p.add_argument("--max-operand-bytes", type=_POSITIVE, default=256 << 20)
    p.add_argument(
        "--mix", default="networks", help="family shares: 'networks', 'loss' or 'targeted' (algosel sweep --grid-mix)"
    )
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("train", help="tune and fit a selector on sweep records; save it under models/")
    p.add_argument("data", nargs="+", help="dataset directories or part files")
    p.add_argument("--models", default="models", help="directory that receives <gpu>-cudnn<version>/")
    p.add_argument(
        "--name", default=None, help="model directory name inside --models (default: from the records' environment)"
    )
    p.add_argument("--folds", type=_integer(2, "an integer >= 2"), default=3, help="cross-validation folds for tuning")
    p.add_argument("--n-estimators", type=_POSITIVE, default=300)
    p.add_argument("--threads", type=_POSITIVE, default=2, help="LightGBM threads (one on small records)")
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
    p.add_argument("--quick", action="store_true", help="skip tuning: LambdaRank with default parameters")
    p.add_argument(
        "--params-from",
        default=None,
        metavar="MODEL",
        help="skip tuning: the hyperparameters of this model (e.g. the shipped one); overrides --n-estimators",
    )
    p.add_argument(
        "--num-leaves",
        type=_integer(2, "an integer >= 2"),
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
        type=_positive_float,
        default=1.0,
        help="training weight of a cache's row against a sweep's (default 1)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)

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
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_DIR_HELP)
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

    p = sub.add_parser("predict", help="rank the candidates for one convolution")
    p.add_argument("--key", help="a problem key (as printed by `algosel grid`, plus _dtype_layout_direction)")
    # No defaults here: a field given with --key is refused, so "given" must be told from "defaulted".
    for f in ("n", "c", "k", "h", "w", "r", "s"):
        p.add_argument(f"--{f}", type=int)
    p.add_argument("--pad", type=_pair, default=None, help="p or ph,pw (default 0)")
    p.add_argument("--stride", type=_pair, default=None, help="u or uh,uw (default 1)")
    p.add_argument("--dilation", type=_pair, default=None, help="d or dh,dw (default 1)")
    p.add_argument("--groups", type=int, default=None, help="(default 1)")
    p.add_argument("--dtype", default=None, help=f"one of {', '.join(DTYPES)} (default float32)")
    p.add_argument("--layout", default=None, help=f"one of {', '.join(LAYOUTS)} (default nchw)")
    p.add_argument("--direction", default=None, help="fwd, bwd_data or bwd_filter (default fwd)")
    p.add_argument("--model", default=None, help="model directory (default: the shipped one for this GPU)")
    p.add_argument("--max-workspace-bytes", type=_COUNT, default=None)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--top-k", type=_POSITIVE, default=3)
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
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_FILE_HELP.replace("file", "--csv file", 1))
    p.set_defaults(func=cmd_analyze_log)

    p = sub.add_parser("layers", help="write the conv layers of any model as a layers file (CPU, meta tensors)")
    p.add_argument("--model", required=True, help="package.module:callable or path/to/file.py:callable")
    p.add_argument(
        "--input",
        action="append",
        required=True,
        help="input shape, e.g. 32,3,224,224 (tensors of one call separated by ';'); repeatable: one block each",
    )
    p.add_argument("--out", required=True, help="the layers CSV to write (an existing file takes --overwrite)")
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_FILE_HELP)
    p.add_argument("--network", default=None, help="network name (default: the file's stem or the callable's name)")
    p.set_defaults(func=cmd_layers)

    p = sub.add_parser("doctor", help="what this machine has, which model matches it, what the hook will do")
    p.add_argument(
        "--models", action="append", default=None, help="a directory of local models (default: ./models); repeatable"
    )
    p.add_argument("--json", action="store_true", help="the facts as JSON")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("suites", help="extract the layer shapes of real networks into CSVs (needs torchvision)")
    p.add_argument("--out", default=None, help="directory (default: the package's data/suites)")
    p.add_argument("--names", default="all")
    p.set_defaults(func=cmd_suites)

    p = sub.add_parser("build-ext", help="build the runtime's compiled path (GPU machine; about a minute)")
    p.add_argument("--verbose-build", action="store_true", help="show the compiler's output")
    p.set_defaults(func=cmd_build_ext)

    p = sub.add_parser(
        "compile", help="compile a model's trees to native code of this CPU, cached (pip install 'algosel[compiled]')"
    )
    p.add_argument("--model", default=None, help="model directory (default: the shipped one for this GPU)")
    p.add_argument("--root", default=None, help="cache root (default: $ALGOSEL_CACHE_DIR or ~/.cache/algosel)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("cache", help="show or clear the runtime's persistent decisions and plans")
    p.add_argument("action", choices=("show", "clear"))
    p.add_argument("--root", default=None, help="cache root (default: $ALGOSEL_CACHE_DIR or ~/.cache/algosel)")
    p.set_defaults(func=cmd_cache)

    from algosel.study.report import add_parser as add_report_parser  # noqa: PLC0415

    add_report_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
