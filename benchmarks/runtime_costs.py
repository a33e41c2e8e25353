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
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from standins import Predicting

from algosel.operands import conv_args, make_operands, relative_error
from algosel.problem import ConvProblem
from algosel.spaces import get_space

CALLS = 300

PROBLEMS = {
    "tiny-3x3-fp16-nhwc": ConvProblem(n=8, c=64, k=64, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1, dtype="float16",
                                      layout="nhwc"),
    "resnet-3x3-fp32": ConvProblem(n=32, c=64, k=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, dtype="float32"),
    "pointwise-fp16-nhwc": ConvProblem(n=32, c=256, k=64, h=56, w=56, r=1, s=1, dtype="float16", layout="nhwc"),
}  # fmt: skip


def host_us_per_call(fn, calls: int = CALLS, repeats: int = 5) -> float:
    """Median over ``repeats`` of the host time of ``calls`` calls queued behind a blocked stream."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        torch.cuda._sleep(200_000_000)  # ~100 ms of spin: the host queues everything before the GPU runs
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


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
    space = get_space("cudnn")
    for label, problem in PROBLEMS.items():
        row = measure_problem(space, ext, problem)
        result["problems"][label] = row
        print(label, json.dumps(row, default=float), flush=True)
    return result


def measure_problem(space, ext, problem: ConvProblem) -> dict:
    """Every measurement of the module docstring for one problem (forward; the route also runs backward)."""
    row: dict = {"problem": problem.key}
    torch.backends.cudnn.allow_tf32 = problem.dtype == "float32"
    torch.backends.cudnn.benchmark = False
    ops = make_operands(problem, "cuda")
    x, w = ops.x, ops.w
    args_ = conv_args(problem)
    t0 = time.perf_counter()
    cands = space.enumerate(problem)
    row["enumerate_ms"] = 1e3 * (time.perf_counter() - t0)
    row["candidates"] = len(cands)
    first = min((c for c in cands if c.rank_a >= 0), key=lambda c: c.rank_a)
    t0 = time.perf_counter()
    prepared = space.prepare(problem, first)
    row["build_plan_ms"] = 1e3 * (time.perf_counter() - t0)
    t0 = time.perf_counter()
    blob = bytes(prepared._mg.graph.serialize(as_bytes=True))
    row["serialize_ms"] = 1e3 * (time.perf_counter() - t0)
    row["blob_bytes"] = len(blob)
    row["engine"] = first.name
    y = torch.empty_like(F.conv2d(x, w, None, **args_))
    ops.y = y
    handle = space.handle_for_current_stream()
    t = prepared._mg.tensors
    ws = torch.empty(max(prepared.workspace_bytes, 1), dtype=torch.uint8, device="cuda")

    def mapping_form():
        prepared._mg.graph.execute_plan_at_index({t["x"]: x, t["w"]: w, t["y"]: y}, ws, prepared._index,
                                                 handle=handle)  # fmt: skip

    row["host_us"] = {
        "F.conv2d": host_us_per_call(lambda: F.conv2d(x, w, None, **args_)),
        "frontend mapping form": host_us_per_call(mapping_form),
        "frontend ordered form (prepared.run)": host_us_per_call(lambda: prepared.run(ops)),
    }
    ref = F.conv2d(x, w, None, **args_)
    prepared.run(ops)
    row["ordered_form_rel_err"] = relative_error(ops.y, ref.double())
    print("python paths", json.dumps(row, default=float), flush=True)
    if ext is not None:
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
            cq = space.enumerate(q)
            fq = min((c for c in cq if c.rank_a >= 0), key=lambda c: c.rank_a)
            pq = space.runner(q, fq)
            like = torch.empty(q.x_shape if d == 1 else q.w_shape, device="meta").contiguous(memory_format=mf)
            pids.append(ext.load_plan(pq.blob, *pq.uids, d, list(like.shape), list(like.stride()),
                                      torch.cuda.current_device()))  # fmt: skip
        plan_route = ext.register_route(*pids, *geo, problem.layout == "nhwc")
        row["host_us"]["ext.run_route fwd, plans"] = host_us_per_call(lambda: ext.run_route(plan_route, x, w))
        row["host_us"]["ext.run_route fwd, native"] = host_us_per_call(lambda: ext.run_route(native_route, x, w))
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        gy = torch.randn_like(ref)

        def train_step(fn):
            return lambda: fn().backward(gy)

        row["host_us"]["F.conv2d fwd+bwd"] = host_us_per_call(train_step(lambda: F.conv2d(xg, wg, None, **args_)))
        row["host_us"]["ext route fwd+bwd, plans"] = host_us_per_call(
            train_step(lambda: ext.run_route(plan_route, xg, wg))
        )
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
    # an engine config rebuilt from its name (no heuristic query)
    row["rebuild_from_name"] = _rebuild_check(space, problem, cands[:6])
    row["hook"] = measure_hook(problem, x, w, args_)
    print("hook", json.dumps(row["hook"], default=float), flush=True)
    return row


def measure_hook(problem: ConvProblem, x, w, args_) -> dict:
    """Host us per forward call through the hook (``F.conv2d`` switched on), per route, beside PyTorch's own
    ``F.conv2d`` measured in the same rotation (pairs of blocks, ABBA)."""
    from algosel.learn.models import load_default
    from algosel.runtime import hook

    sel = load_default()
    original = F.conv2d
    variants = {
        "pass-through": hook.Executor(selector=Predicting(sel), cache=False),
        "pass-through, Python path": hook.Executor(selector=Predicting(sel), cache=False, native=False),
        "cudnn plan": hook.Executor(selector=Predicting(sel, "cudnn"), cache=False),
        "gemm": hook.Executor(selector=Predicting(sel, "gemm"), cache=False),
    }
    out: dict = {}
    for name, ex in variants.items():
        with hook.enabled(ex):
            F.conv2d(x, w, None, **args_)  # plans
            routes = sorted({r.kind for r in ex._routes.values()})
            pairs = []
            for order in ((0, 1), (1, 0), (1, 0), (0, 1)):  # ABBA: default (0) and the hook (1)
                t = {}
                for i in order:
                    fn = original if i == 0 else F.conv2d
                    t[i] = host_us_per_call(lambda fn=fn: fn(x, w, None, **args_), repeats=3)
                pairs.append((t[0], t[1]))
        d = statistics.median(a for a, _ in pairs)
        h = statistics.median(b for _, b in pairs)
        out[name] = {
            "route": "/".join(routes),
            "table": ex.fast_run is not None,
            "F.conv2d_us": round(d, 2),
            "hook_us": round(h, 2),
            "extra_us": round(statistics.median(b - a for a, b in pairs), 2),
        }
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
            mg = space._graph(problem, [])  # graph without heuristics (create_execution_plans([]))
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(f"graph: {exc}")
            break
        try:
            kn = {getattr(cudnn.knob_type, by_value[k]): v for k, v in parse_knobs(knobs).items()}
            mg.graph.create_execution_plan(engine, kn)
            i = mg.graph.get_execution_plan_count() - 1
            mg.graph.build_plan_at_index(i)
            out["tried"] += 1
            out["same_name"] += int(mg.graph.get_plan_name_at_index(i) == c.name)
            out.setdefault("ms", []).append(round(1e3 * (time.perf_counter() - t0), 2))
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(f"{c.name}: {type(exc).__name__}: {str(exc)[:200]}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="runtime_costs.json")
    p.add_argument("--build-ext", action="store_true", help="build the compiled path first (about a minute)")
    args = p.parse_args()
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(f"\n{'path':45s} " + " ".join(f"{k[:18]:>18s}" for k in result["problems"]))
    names = sorted({n for r in result["problems"].values() for n in r["host_us"]})
    for n in names:
        print(f"{n:45s} " + " ".join(f"{r['host_us'].get(n, float('nan')):18.1f}" for r in result["problems"].values()))


if __name__ == "__main__":
    main()
