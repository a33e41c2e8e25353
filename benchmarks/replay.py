"""Replay: networks' convolution calls through the runtime's decisions, the records standing in for the GPU (CPU).

    python benchmarks/replay.py [--nets efficientnet_b0,fpn] [--dtypes float32,float16] [--steps 300]
                                [--model-dir out/replay-model] [--out replay.json]

A network is its layers file (``data/suites/NAME.csv``, ``data/layers/NAME.csv``: one row per convolution call); a
training step calls each layer forward, its weight gradient, and its input gradient (but the first layer's, whose
input is the images). A network whose layers file holds several input sizes (the FPN head: 20) is a multi-scale run:
one size a step, ``--passes`` passes over the sizes. Every problem's device time per candidate comes from the H200
records of ``--truth`` (the sweep measured every candidate of these networks): a network with a problem the records
lack is left out.

The model deciding is one that never saw these networks: trained on the H200 records without any network's layers
(the grids: ``--model-dir`` keeps it, built on first use, with its calibration). Arms, each a whole run:

- ``default``: PyTorch's default everywhere;
- ``benchmark``: PyTorch's benchmark mode: on each new problem, time cuDNN's first ``--benchmark-limit`` configs of
  mode A (build and runs), then run the fastest of them;
- ``best``: the fastest recorded candidate of each problem, for free (the bound);
- ``rule``: the executor deciding by the expected-saving rule (``Executor()``, the hook's default mode);
- ``predict`` and ``verify``: the rule without timing (``rule_times=False``, the hook's ``verify=False``) and verify
  mode (``verify=3``).

The executor arms run the real executor (:class:`algosel.runtime.executor.Executor`) with the records as its measurer
(:class:`algosel.runtime.standins.RecordedMeasurer`) and a device that can time. What deciding costs is charged as
the rule's :class:`algosel.runtime.rule.Costs` prices it (a plan build per candidate built, each timing's runs at
the recorded times): the same prices for every arm, benchmark mode's included. Reported per network: the whole run
(kernels plus deciding) and the steady step (the last pass) of each arm, as ratios to the default's.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from algosel.candidates import DEFAULT_ID

REPO = Path(__file__).resolve().parents[1]
TRUTH = [REPO / "data/sweeps/h200", REPO / "data/sweeps/h200-zoo-f32", REPO / "data/sweeps/h200-layers",
         REPO / "data/sweeps/h200-mynet"]  # fmt: skip
#: The H200 records a replay model is trained on: everything but networks' layers.
TRAIN = [REPO / "data/sweeps/h200", REPO / "data/sweeps/h200-nhwc", REPO / "data/sweeps/h200-loss"]
ARMS = ("default", "benchmark", "best", "rule", "predict", "verify")


def layers_file(name: str) -> Path:
    for folder in ("data/suites", "data/layers"):
        path = REPO / folder / f"{name}.csv"
        if path.exists():
            return path
    raise SystemExit(f"replay.py: no layers file for network {name!r} under data/suites or data/layers")


def network_steps(name: str, dtype: str, passes: int, steps: int) -> list[list]:
    """The problems each step runs (forward and gradients), in call order: one step per size of a multi-scale
    network (``passes`` times over its sizes), else ``steps`` alike steps."""
    from algosel.problem import ConvProblem

    rows = list(csv.DictReader(layers_file(name).open()))
    fields = ("n", "c", "k", "h", "w", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h",
              "dilation_w", "groups")  # fmt: skip
    sizes: dict[str, list] = {}
    for row in rows:
        fwd = ConvProblem(**{f: int(row[f]) for f in fields}, dtype=dtype, layout="nchw", direction="fwd")
        sizes.setdefault(row.get("size", ""), []).append(fwd)
    per_size = []
    for fwds in sizes.values():
        step = []
        for i, fwd in enumerate(fwds):
            dirs = {p.direction: p for p in fwd.directions()}
            step += [fwd, dirs["bwd_filter"]] + ([dirs["bwd_data"]] if i > 0 or len(sizes) > 1 else [])
        per_size.append(step)
    if len(per_size) > 1:
        return [s for _ in range(passes) for s in per_size]
    return per_size * steps


def build_model(directory: Path) -> None:
    """A selector trained on the grids' records alone (no network's layers), with its calibration."""
    from algosel.learn.artifact import new_manifest, record_files, tuned_params
    from algosel.learn.calibration import CALIBRATION_FILE, fit_calibration
    from algosel.learn.evaluate import Prepared, is_test_shape
    from algosel.learn.joint import fit_selector
    from algosel.learn.time_model import TimeModelParams
    from algosel.records.store import load_records, main_environment

    frame, envs = load_records(*TRAIN)
    frame = frame[~frame["source"].str.startswith(("suite:", "layers:"))].reset_index(drop=True)
    frame, env = main_environment(frame, envs)
    frame = frame.reset_index(drop=True)
    params = tuned_params(REPO / "algosel/shipped/models/joint-h100-h200-cudnn91900")
    prep = Prepared.build(frame, envs)
    train = prep.rows(~is_test_shape(prep.shape))
    sel = fit_selector(train, params, TimeModelParams(num_threads=params.num_threads), frame, [env])
    extra = {k: sel.manifest[k] for k in ("shortlist_rank", "spaces", "blocked_engines")}
    extra.update({"dtypes": sorted(frame["dtype"].unique()), "data": [str(p.relative_to(REPO)) for p in TRAIN],
                  "time_model": {"file": "time_model.txt", "target": "log2(time_ms)"}})  # fmt: skip
    manifest = new_manifest(params, env, extra)
    sel.with_manifest(manifest).save(directory, replace=True)
    (directory / CALIBRATION_FILE).write_text(fit_calibration(sel, frame, envs).to_json())
    record_files(directory, [CALIBRATION_FILE])


def network_of(name: str) -> str:
    """The network a layers file holds (its rows' ``network``)."""
    return next(csv.DictReader(layers_file(name).open()))["network"]


def network_errors(selector, frame, envs):
    """The replay model's errors (:func:`algosel.learn.calibration.errors_on`) on every network's layers in the
    records, each row with its ``network``."""
    from algosel.learn.calibration import errors_on

    nets = frame[frame["source"].str.startswith(("suite:", "layers:"))].reset_index(drop=True)
    errors = errors_on(selector, nets, envs, selector.catalogue)
    network = dict(zip(nets["problem_key"], nets["source"].str.split(":").str[1]))
    return errors.assign(network=errors["problem_key"].map(network))


class Truth:
    """Recorded device times per problem and candidate (the stand-in GPU)."""

    def __init__(self, frame):
        ok = frame[(frame["status"] == "ok") & np.isfinite(frame["time_ms_median"])]
        self.times = {k: dict(zip(g["candidate_id"], g["time_ms_median"].astype(float)))
                      for k, g in ok.groupby("problem_key")}  # fmt: skip
        self.rank_a = {k: sorted(((int(r), c) for c, r, s in zip(g["candidate_id"], g["rank_a"], g["space"])
                                  if s == "cudnn" and r >= 0))
                       for k, g in ok.groupby("problem_key")}  # fmt: skip

    def has(self, key: str) -> bool:
        return DEFAULT_ID in self.times.get(key, {})

    def time(self, key: str, cid: str) -> float:
        t = self.times[key]
        return t.get(cid, t[DEFAULT_ID])  # a candidate the records lack runs PyTorch's (as a failed build)


def timing_ms(truth: Truth, key: str, ids: list[str], costs) -> float:
    """What timing ``ids`` on a problem costs (their builds and runs; PyTorch's default builds nothing)."""
    build = sum(costs.plan_build_ms for c in ids if c.startswith("cudnn:"))
    runs = sum(costs.timing_overhead_ms + costs.timing_runs * truth.time(key, c) for c in ids)
    return build + runs


def run_arm(arm: str, steps: list[list], truth: Truth, selector, calibration, costs, limit: int,
            overrides: dict | None = None, aside: bool = False) -> dict:  # fmt: skip
    """One arm's whole run: per step, the device time of what each call runs, plus what deciding costs.

    ``aside``: the executor arms decide a new problem beside the step (the hook's default, runtime/aside.py): its
    first call runs PyTorch's default, and the host time deciding takes (measured here, ``decide_host_ms``) is not
    charged to the step; without it that host time is charged, as on the step's path."""

    from algosel.runtime.candidates import ModelCandidates
    from algosel.runtime.executor import Executor
    from algosel.runtime.policy import DEFAULT_POLICY
    from algosel.runtime.standins import FakeDevice, RecordedMeasurer

    ex, measurer = None, None
    if arm in ("rule", "predict", "verify"):
        measurer = RecordedMeasurer(truth_catalogue(truth))
        # the compiled path's routes (a GPU's): no host cost per call over PyTorch's own
        policy = dataclasses.replace(DEFAULT_POLICY, python_path_overhead_us=0.0, **(overrides or {}))
        ex = Executor(selector=selector, verify=3 if arm == "verify" else 0, rule_times=arm != "predict", cache=False,
                      policy=policy,
                      native=False, candidates=ModelCandidates(selector, live=False), measurer=measurer,
                      device_probe=FakeDevice(busy=True, can_time=True), calibration=calibration,
                      look_first=False)  # fmt: skip
    aside = aside and arm in ("rule", "predict")  # (the hook decides beside the step but with verify=k)
    chosen: dict[str, str] = {}
    step_ms, decide_ms, switched, host_ms = [], 0.0, 0, 0.0
    for i, step in enumerate(steps):
        if ex is not None:
            ex.decider.recurrence.steps = i
        total = 0.0
        for p in step:
            key = p.key
            if key not in chosen:
                asked = len(measurer.asked) if measurer else 0
                t0 = time.perf_counter()
                chosen[key], cost = decide_arm(arm, p, truth, ex, costs, limit)
                host = 1e3 * (time.perf_counter() - t0) if ex is not None else 0.0
                host_ms += host
                if measurer is not None and len(measurer.asked) > asked:
                    cost += sum(timing_ms(truth, key, ids, costs) for ids in measurer.asked[asked:])
                decide_ms += cost + (0.0 if aside else host)
                switched += chosen[key] != DEFAULT_ID
                if aside:  # the first call ran the default while its problem was decided
                    total += truth.time(key, DEFAULT_ID)
                    continue
            total += truth.time(key, chosen[key])
        step_ms.append(total)
    return {"kernels_ms": float(sum(step_ms)), "decide_ms": decide_ms, "steady_ms": step_ms[-1],
            "problems": len(chosen), "switched": switched, "steps": len(steps), "decide_host_ms": host_ms}  # fmt: skip


def decide_arm(arm: str, p, truth: Truth, ex, costs, limit: int) -> tuple[str, float]:
    times = truth.times[p.key]
    if arm == "default":
        return DEFAULT_ID, 0.0
    if arm == "best":
        return min(times, key=times.get), 0.0
    if arm == "benchmark":
        tried = [c for _, c in truth.rank_a[p.key][:limit]]
        if not tried:
            return DEFAULT_ID, 0.0
        return min(tried, key=times.get), timing_ms(truth, p.key, tried, costs)
    decision = ex.decide(p, __import__("torch").device("cpu"))  # FakeDevice times on it
    cost = costs.plan_build_ms if decision.source == "predicted" and decision.candidate_id.startswith("cudnn:") else 0
    return decision.candidate_id, cost


def truth_catalogue(truth: Truth):
    """The records as the measurer reads them (time_ms and host_us by problem and candidate)."""

    class _Catalogue:
        def time_ms(self, key, cid):
            return truth.times.get(key, {}).get(cid)

        def host_us(self, key, ids):
            return {}

    return _Catalogue()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default="efficientnet_b0,mobilenet_v3_large,resnet50,densenet121,vgg16,googlenet,"
                    "regnet_y_800mf-b64,squeezenet1_1-b64,convnext_tiny-b32,fpn")  # fmt: skip
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--steps", type=int, default=300, help="steps of a fixed-shape network")
    ap.add_argument("--passes", type=int, default=3, help="passes over a multi-scale network's sizes")
    ap.add_argument("--benchmark-limit", type=int, default=10)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--model-dir", type=Path, default=REPO / "out" / "replay-model")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--on-step", action="store_true",
                    help="decide on the step's path (the executor arms' host time charged to the run) instead of "
                    "beside it (the hook's default: a new problem's first call runs the default)")  # fmt: skip
    ap.add_argument("--calibration", choices=("model", "networks"), default="model",
                    help="the rule's error model: the replay model's own (its held-out grid shapes), or the errors "
                    "on the other networks' layers (leave-one-network-out: never the replayed network's)")  # fmt: skip
    ap.add_argument("--policy", action="append", default=[], metavar="FIELD=VALUE",
                    help="a SwitchPolicy number field for the executor arms (repeatable), e.g. "
                    "expected_run_steps=300")  # fmt: skip
    return ap.parse_args(argv)


def policy_overrides(items: list[str]) -> dict[str, float | int]:
    """``--policy FIELD=VALUE`` items as SwitchPolicy fields; one line naming an item that is not one of its numbers."""
    from algosel.runtime.policy import DEFAULT_POLICY

    numbers = {f.name for f in dataclasses.fields(DEFAULT_POLICY)
               if isinstance(getattr(DEFAULT_POLICY, f.name), (int, float))}  # fmt: skip
    overrides = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in numbers or not value:
            raise SystemExit(f"replay.py: --policy {item!r}: not FIELD=VALUE of a SwitchPolicy number field")
        overrides[name] = type(getattr(DEFAULT_POLICY, name))(value)
    return overrides


def replay_model(model_dir: Path) -> tuple[Any, Any]:
    """The replay's selector and its calibration, built on first use (the grids alone)."""
    from algosel.learn.artifact import read_manifest
    from algosel.learn.calibration import load_calibration
    from algosel.learn.selector import Selector

    if not (model_dir / "manifest.json").exists():
        print(f"building the replay model in {model_dir} (grids only, ~1-2 min)", file=sys.stderr)
        build_model(model_dir)
    return Selector.load(model_dir, force=True), load_calibration(model_dir, read_manifest(model_dir))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.simplefilter("ignore")
    from algosel.learn.calibration import from_errors
    from algosel.records.store import load_records
    from algosel.runtime.policy import DEFAULT_POLICY
    from algosel.runtime.rule import Costs

    overrides = policy_overrides(args.policy)
    selector, calibration = replay_model(args.model_dir)
    truth_frame, truth_envs = load_records(*TRUTH)
    truth = Truth(truth_frame)
    net_errors = network_errors(selector, truth_frame, truth_envs) if args.calibration == "networks" else None
    pol = dataclasses.replace(DEFAULT_POLICY, **overrides)
    costs = Costs(pol.plan_build_ms, pol.timing_overhead_ms, pol.timer.max_repeats + 1)
    rows = []
    for net in args.nets.split(","):
        for dtype in args.dtypes.split(","):
            steps = network_steps(net, dtype, args.passes, args.steps)
            missing = {p.key for s in steps for p in s if not truth.has(p.key)}
            if missing:
                print(f"{net} {dtype}: {len(missing)} problems not in the records; left out", file=sys.stderr)
                continue
            row = {"net": net, "dtype": dtype}
            cal = calibration
            if net_errors is not None:  # leave-one-network-out
                cal = from_errors(net_errors[net_errors["network"] != network_of(net)], check_coverage=False)
            for arm in args.arms.split(","):
                row[arm] = run_arm(arm, steps, truth, selector, cal, costs, args.benchmark_limit, overrides,
                                   aside=not args.on_step)  # fmt: skip
            rows.append(row)
            print(format_row(row), flush=True)
    print(summary(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


def format_row(row: dict) -> str:
    base = row["default"]
    whole = base["kernels_ms"] + base["decide_ms"]
    parts = [f"{row['net']:22s} {row['dtype']:8s} default {whole / 1e3:7.2f} s ({base['steps']} steps)"]
    for arm, r in row.items():
        if arm in ("net", "dtype", "default"):
            continue
        whole_x, steady_x = (r["kernels_ms"] + r["decide_ms"]) / whole, r["steady_ms"] / base["steady_ms"]
        parts.append(f"{arm} {whole_x:5.3f}/{steady_x:5.3f}[{r['switched']}]")
    return "  ".join(parts)


def summary(rows: list[dict]) -> str:
    if not rows:
        return "no network replayed"
    arms = [a for a in rows[0] if a not in ("net", "dtype", "default")]
    lines = ["geomean over networks: whole run / steady step, as ratios to the default's"]
    for arm in arms:
        whole = [(r[arm]["kernels_ms"] + r[arm]["decide_ms"]) / (r["default"]["kernels_ms"]) for r in rows]
        steady = [r[arm]["steady_ms"] / r["default"]["steady_ms"] for r in rows]
        geo_whole, geo_steady = math.exp(np.mean(np.log(whole))), math.exp(np.mean(np.log(steady)))
        lines.append(f"  {arm:10s} whole {geo_whole:.3f}  steady {geo_steady:.3f}  worst whole {max(whole):.3f}"
                     f"  worst steady {max(steady):.3f}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
