"""Host cost per call of each way the runtime can run a convolution, and what planning one costs (GPU).

    python benchmarks/runtime_costs.py --out runtime_costs.json [--build-ext]

Per problem (a launch-bound tiny conv and two mid-size ones), measured with the stream blocked by a spin kernel so
that the host's time per call is measured alone (the GPU never waits for the host, and the host never waits for
the GPU): PyTorch's own ``F.conv2d``; a cuDNN plan through the frontend's Python API (mapping form, ordered form);
the compiled path (``algosel/runtime/_ext``) running one plan, and its autograd route forward and forward +
backward against PyTorch's. Also: how long enumerating cuDNN's lists, building one plan and serializing it take,
whether the compiled path's results match PyTorch's, and whether an engine config can be rebuilt from its name.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from host_timing import host_us_per_call, paired_extra_us

from algosel.operands import conv_args, make_operands, relative_error
from algosel.problem import ConvProblem
from algosel.spaces import get_space

PROBLEMS = {
    "tiny-3x3-fp16-nhwc": ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, dtype="float16",
                                      layout="nhwc"),
    "resnet-3x3-fp32": ConvProblem(n=32, c=64, k=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, dtype="float32"),
    "pointwise-fp16-nhwc": ConvProblem(n=32, c=256, k=64, h=56, w=56, r=1, s=1, dtype="float16", layout="nhwc"),
    "fc-6x6-fp16": ConvProblem(n=64, c=256, k=512, h=6, w=6, r=6, s=6, dtype="float16"),
}  # fmt: skip


def Predicting(sel, faster: str | None = None):  # noqa: N802 - reads as the selector it makes
    """The shipped selector as it sees a problem its records lack, the candidates whose ids start with ``faster``
    (a space, ``"cudnn"``, or an engine, ``"cudnn:eng45_"``) predicted ten times faster than PyTorch's default and
    ranked first, so that the route measured is the one the executor takes (``faster=None``: nothing pays, every
    convolution passes through)."""
    from algosel.runtime.standins import Preferring

    return Preferring(sel, faster or "nothing:", 0.1, recorded=False, host_costs=False)


def run(args) -> dict:
    from algosel.runtime import native

    result: dict = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                    "gpu": torch.cuda.get_device_name(), "problems": {}}  # fmt: skip
    if args.build_ext:
        t0 = time.perf_counter()
        try:
            result["ext_path"] = str(native.build(verbose=False))
        except Exception as exc:  # noqa: BLE001 - report it and measure the Python paths anyway
            result["ext_build_error"] = f"{type(exc).__name__}: {exc}"[-3000:]
            print(result["ext_build_error"], flush=True)
        result["ext_build_s"] = round(time.perf_counter() - t0, 1)
    ext = native.load()
    result["ext"] = native.status()
    if ext is None:  # the hook's variants would all take the Python path, which is not what they are named for
        raise SystemExit(f"runtime_costs.py: the compiled path is not there ({result['ext']}); pass --build-ext")
    space = get_space("cudnn")

    def save() -> None:
        Path(args.out).write_text(json.dumps(result, indent=1, default=float) + "\n")

    for label in args.problems:
        problem = PROBLEMS[label]
        if args.hook_only:

            def partial(row, label=label) -> None:  # a problem's variants so far
                result["problems"][label] = row
                save()

            row = measure_hook_only(problem, args.pairs, args.cudnn_engines, on_variant=partial)
        else:
            row = measure_problem(space, ext, problem, args.pairs)
        result["problems"][label] = row
        print(label, json.dumps(row, default=float), flush=True)
        save()  # after every problem (and, with --hook-only, every variant): a run stopped by a limit keeps it
    return result


def measure_hook_only(problem: ConvProblem, pairs: int, engines=(), on_variant=None) -> dict:
    """The hook's host cost per call alone (``--hook-only``); ``on_variant(row)`` after each variant measured."""
    torch.backends.cudnn.allow_tf32 = problem.dtype == "float32"
    torch.backends.cudnn.benchmark = False
    ops = make_operands(problem, "cuda")
    row: dict = {"problem": problem.key, "hook": {}}

    def measured(variants: dict) -> None:
        row["hook"] = variants
        if on_variant is not None:
            on_variant(row)

    measure_hook(problem, ops.x, ops.w, conv_args(problem), pairs=pairs, engines=engines, on_variant=measured)
    return row


def measure_problem(space, ext, problem: ConvProblem, pairs: int = 20) -> dict:
    """Every measurement of the module docstring for one problem (forward; the route also runs backward)."""
    row: dict = {"problem": problem.key}
    torch.backends.cudnn.allow_tf32 = problem.dtype == "float32"
    torch.backends.cudnn.benchmark = False
    ops = make_operands(problem, "cuda")
    args_ = conv_args(problem)
    cands, prepared, blob = time_planning(space, problem, row)
    ref = measure_python_paths(space, prepared, ops, args_, row)
    print("python paths", json.dumps(row, default=float), flush=True)
    if ext is not None:
        plan_route, native_route = load_routes(ext, space, problem, prepared, blob, ops, ref, row)
        measure_routes(ext, plan_route, native_route, ops.x, ops.w, args_, ref, row)
    # an engine config rebuilt from its name (no heuristic query)
    row["rebuild_from_name"] = _rebuild_check(space, problem, cands[:6])
    row["hook"] = measure_hook(problem, ops.x, ops.w, args_, pairs=pairs)
    print("hook", json.dumps(row["hook"], default=float), flush=True)
    return row


def first_choice(cands):
    """cuDNN's first choice (mode A's rank 0 or the best rank it gave) of a problem's candidates."""
    return min((c for c in cands if c.rank_a >= 0), key=lambda c: c.rank_a)


def time_planning(space, problem: ConvProblem, row: dict) -> tuple[list, object, bytes]:
    """Enumerating the problem's candidates, building cuDNN's first choice's plan and serializing it, timed into
    ``row``; the candidates, the prepared plan and its serialized bytes."""
    t0 = time.perf_counter()
    cands = space.enumerate(problem)
    row["enumerate_ms"] = 1e3 * (time.perf_counter() - t0)
    row["candidates"] = len(cands)
    first = first_choice(cands)
    t0 = time.perf_counter()
    prepared = space.prepare(problem, first)
    row["build_plan_ms"] = 1e3 * (time.perf_counter() - t0)
    t0 = time.perf_counter()
    blob = bytes(prepared.graph.serialize(as_bytes=True))
    row["serialize_ms"] = 1e3 * (time.perf_counter() - t0)
    row["blob_bytes"] = len(blob)
    row["engine"] = first.name
    return cands, prepared, blob


def measure_python_paths(space, prepared, ops, args_: dict, row: dict) -> torch.Tensor:
    """Host us per call of ``F.conv2d`` and of the plan through the frontend's Python API (both forms) into
    ``row``, and the ordered form's error; PyTorch's output, the reference."""
    x, w = ops.x, ops.w
    y = torch.empty_like(F.conv2d(x, w, None, **args_))
    ops.y = y
    handle = space.handle_for_current_stream()
    t = prepared.tensors
    ws = torch.empty(max(prepared.workspace_bytes, 1), dtype=torch.uint8, device="cuda")

    def mapping_form():
        prepared.graph.execute_plan_at_index({t["x"]: x, t["w"]: w, t["y"]: y}, ws, prepared.plan_index,
                                             handle=handle)  # fmt: skip

    row["host_us"] = {
        "F.conv2d": host_us_per_call(lambda: F.conv2d(x, w, None, **args_)),
        "frontend mapping form": host_us_per_call(mapping_form),
        "frontend ordered form (prepared.run)": host_us_per_call(lambda: prepared.run(ops)),
    }
    ref = F.conv2d(x, w, None, **args_)
    prepared.run(ops)
    row["ordered_form_rel_err"] = relative_error(ops.y, ref.double())
    return ref


def load_routes(ext, space, problem: ConvProblem, prepared, blob: bytes, ops, ref, row: dict) -> tuple[int, int]:
    """The compiled path: the plan loaded (timed, its error and host us per call into ``row``), and two routes of
    the problem's geometry registered: through plans in every direction, and PyTorch's native calls."""
    x, w = ops.x, ops.w
    args_ = conv_args(problem)
    mf = torch.channels_last if problem.layout == "nhwc" else torch.contiguous_format
    yt = torch.empty(problem.y_shape, device="meta").contiguous(memory_format=mf)
    t0 = time.perf_counter()
    pid = ext.load_plan(blob, *prepared.uids, 0, list(yt.shape), list(yt.stride()), torch.cuda.current_device())
    row["ext_load_plan_ms"] = 1e3 * (time.perf_counter() - t0)
    out = ext.run_plan(pid, x, w)
    torch.cuda.synchronize()
    row["ext_rel_err"] = relative_error(out, ref.double())
    row["host_us"]["ext.run_plan"] = host_us_per_call(lambda: ext.run_plan(pid, x, w))
    geo = [list(args_["stride"]), list(args_["padding"]), list(args_["dilation"]), args_["groups"]]
    native_route = ext.register_route(-1, -1, -1, *geo, problem.layout == "nhwc")
    # every direction through a plan: build the two gradients' first configs too
    pids = [pid]
    for d, direction in ((1, "bwd_data"), (2, "bwd_filter")):
        q = problem.replace(direction=direction)
        pq = space.runner(q, first_choice(space.enumerate(q)))
        like = torch.empty(q.x_shape if d == 1 else q.w_shape, device="meta").contiguous(memory_format=mf)
        pids.append(ext.load_plan(pq.blob, *pq.uids, d, list(like.shape), list(like.stride()),
                                  torch.cuda.current_device()))  # fmt: skip
    plan_route = ext.register_route(*pids, *geo, problem.layout == "nhwc")
    return plan_route, native_route


def measure_routes(ext, plan_route: int, native_route: int, x, w, args_: dict, ref, row: dict) -> None:
    """Host us per call of both routes, forward and forward + backward (beside ``F.conv2d``'s), into ``row``, and
    the errors of the plan route's gradients against PyTorch's."""
    row["host_us"]["ext.run_route fwd, plans"] = host_us_per_call(lambda: ext.run_route(plan_route, x, w))
    row["host_us"]["ext.run_route fwd, native"] = host_us_per_call(lambda: ext.run_route(native_route, x, w))
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    gy = torch.randn_like(ref)

    def train_step(fn):
        return lambda: fn().backward(gy)

    row["host_us"]["F.conv2d fwd+bwd"] = host_us_per_call(train_step(lambda: F.conv2d(xg, wg, None, **args_)))
    row["host_us"]["ext route fwd+bwd, plans"] = host_us_per_call(train_step(lambda: ext.run_route(plan_route, xg, wg)))
    row["host_us"]["ext route fwd+bwd, native"] = host_us_per_call(
        train_step(lambda: ext.run_route(native_route, xg, wg))
    )
    # gradients of the plan route against PyTorch's
    xg.grad = wg.grad = None
    ext.run_route(plan_route, xg, wg).backward(gy)
    gx, gw = xg.grad.clone(), wg.grad.clone()
    xg.grad = wg.grad = None
    F.conv2d(xg, wg, None, **args_).backward(gy)
    row["ext_grad_rel_err"] = [relative_error(gx, xg.grad.double()), relative_error(gw, wg.grad.double())]


def measure_hook(problem: ConvProblem, x, w, args_, pairs: int = 20, calls: int = 200, engines=(),
                 on_variant=None) -> dict:  # fmt: skip
    """Host us per call through the hook (``F.conv2d`` switched on), per route, beside PyTorch's own ``F.conv2d``
    in the same rotation (pairs of blocks, ABBA): the forward alone, and forward + backward of a training call."""
    from algosel.learn.models import load_default
    from algosel.runtime import hook

    sel = load_default()
    original = F.conv2d
    variants = {
        "pass-through": hook.Executor(selector=Predicting(sel), cache=False),
        "pass-through, Python path": hook.Executor(selector=Predicting(sel), cache=False, native=False),
        "cudnn plan": hook.Executor(selector=Predicting(sel, "cudnn"), cache=False),
        "gemm": hook.Executor(selector=Predicting(sel, "gemm"), cache=False),
        # the compiled route with other engines' plans: a plan's host cost is partly its engine's (docs/hook.md)
        **{
            f"cudnn plan, engine {e}": hook.Executor(selector=Predicting(sel, f"cudnn:eng{e}_"), cache=False)
            for e in engines
        },
    }
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    gy = torch.randn_like(original(x, w, None, **args_))
    out: dict = {}
    for name, ex in variants.items():
        with hook.enabled(ex):
            F.conv2d(x, w, None, **args_)  # plans the forward alone (no input requires grad)
            routes = sorted({r.kind for r in ex.route_list()})
            held = sum(len(r.slots) for r in ex.route_list())  # signatures the dispatch table runs in C++
            row = paired_extra_us(lambda: original(x, w, None, **args_), lambda: F.conv2d(x, w, None, **args_),
                                   pairs, calls)  # fmt: skip
            F.conv2d(xg, wg, None, **args_).backward(gy)  # plans the training call's three directions
            train = paired_extra_us(
                lambda: original(xg, wg, None, **args_).backward(gy),
                lambda: F.conv2d(xg, wg, None, **args_).backward(gy),
                pairs,
                max(1, calls // 4),
            )
            train["route"] = "/".join(sorted({r.kind for r in ex.route_list()} - set(routes)) or routes)
            train["held_in_table"] = sum(len(r.slots) for r in ex.route_list()) - held
        # the candidates planned (the route's host cost depends on its cuDNN engine: docs/hook.md)
        planned = sorted(
            {getattr(getattr(p.runner, "candidate", None), "candidate_id", p.path) for _, p in ex.plans.items()}
        )
        row = {"route": "/".join(routes), "table": ex.dispatch.fast_run is not None, "held_in_table": held,
               "planned": planned, **row}  # fmt: skip
        row["fwd+bwd"] = train
        out[name] = row
        if on_variant is not None:  # e.g. written out, so that a run stopped by a time limit keeps it
            on_variant(out)
        print(
            f"  {name:28s} {row['route']:9s} fwd extra {row['extra_us']:+6.2f} us {row['extra_us_95']}  "
            f"fwd+bwd extra {train['extra_us']:+6.2f} us {train['extra_us_95']}",
            flush=True,
        )
    return out


def _rebuild_check(space, problem, cands) -> dict:
    """Build each named config with create_execution_plan(engine, knobs) on a fresh graph; compare names."""
    import cudnn

    from algosel.spaces.cudnn_graph import KNOB_TYPES, parse_engine_name, parse_knobs

    by_value = {v: k for k, v in KNOB_TYPES.items()}
    out = {"tried": 0, "same_name": 0, "errors": []}
    for c in cands:
        engine, knobs = parse_engine_name(c.name)
        t0 = time.perf_counter()
        try:
            graph = space.plain_graph(problem)  # graph without heuristics (create_execution_plans([]))
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(f"graph: {exc}")
            break
        try:
            kn = {getattr(cudnn.knob_type, by_value[k]): v for k, v in parse_knobs(knobs).items()}
            graph.create_execution_plan(engine, kn)
            i = graph.get_execution_plan_count() - 1
            graph.build_plan_at_index(i)
            out["tried"] += 1
            out["same_name"] += int(graph.get_plan_name_at_index(i) == c.name)
            out.setdefault("ms", []).append(round(1e3 * (time.perf_counter() - t0), 2))
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(f"{c.name}: {type(exc).__name__}: {str(exc)[:200]}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="runtime_costs.json")
    p.add_argument("--build-ext", action="store_true", help="build the compiled path first (about a minute)")
    p.add_argument("--hook-only", action="store_true", help="only the hook's host cost per call, per route")
    p.add_argument("--pairs", type=int, default=20, help="ABBA pairs of blocks per hook measurement")
    p.add_argument(
        "--cudnn-engines",
        default="",
        help="--hook-only: also the cuDNN route with these engines' plans "
        "(comma-separated engine ids, e.g. 22,45), where the problem's list has them",
    )
    p.add_argument("--problems", default=None, help=f"comma-separated, of: {', '.join(PROBLEMS)} (default: all)")
    args = p.parse_args()
    args.problems = list(PROBLEMS) if not args.problems else args.problems.split(",")
    try:
        args.cudnn_engines = [int(e) for e in args.cudnn_engines.split(",") if e.strip()]
    except ValueError:
        p.error(f"--cudnn-engines: engine ids are integers, got {args.cudnn_engines!r}")
    unknown = [label for label in args.problems if label not in PROBLEMS]
    if unknown:
        p.error(f"--problems: no problem named {unknown[0]!r} (choose from {', '.join(PROBLEMS)})")
    result = run(args)  # writes --out as it goes
    print(hook_table(result))
    if args.hook_only:
        return
    print(f"\n{'path':45s} " + " ".join(f"{k[:18]:>18s}" for k in result["problems"]))
    names = sorted({n for r in result["problems"].values() for n in r["host_us"]})
    for n in names:
        print(f"{n:45s} " + " ".join(f"{r['host_us'].get(n, float('nan')):18.1f}" for r in result["problems"].values()))


def hook_table(result: dict) -> str:
    """Markdown: the hook's extra host us per call (95% interval) per problem and route."""
    head = ("problem", "hook variant", "route", "F.conv2d us", "fwd extra us (95%)", "fwd+bwd route",
            "fwd+bwd extra us (95%)")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def extra(v):
        return f"{v['extra_us']:+.2f} ({v['extra_us_95'][0]:+.2f}, {v['extra_us_95'][1]:+.2f})"

    for label, row in result["problems"].items():
        for name, v in row.get("hook", {}).items():
            t = v["fwd+bwd"]
            cells = (label, name, v["route"], f"{v['F.conv2d_us']:.1f}", extra(v), t.get("route", ""), extra(t))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
