"""The learn-from-cache loop replayed on CPU: does a network run once in verify mode run its next process's prediction
mode with verify's gain, and no timing?

    python benchmarks/learn_loop.py [--network fpn] [--data DIR ...] [--trees 100] [--leaves 63]
        [--time-trees 100] [--cache-weight 1] [--top-k 3] [--threads 2] [--out F.json]

1. Hold the network out: every problem of its records (``suite:<network>`` or ``layers:<network>``) leaves the
   training records (``--data``, default the six H200 datasets), whatever other source also measured it.
2. Fit the first model on the rest (one fit, no tuning: ``--trees`` trees of ``--leaves`` leaves, a time model of
   ``--time-trees`` trees; smaller and faster than ``algosel train``'s tuned setting).
3. Replay verify mode on the network's *learned* problems: the first model's top ``--top-k`` (its prediction mode's
   candidate lists, the nearest recorded problem's) and PyTorch's default, each at its recorded time (a failed
   candidate ``inf``; one the records lack is left out, as counted), kept by the runtime cache's own writer
   (:class:`algosel.runtime.cache.RuntimeCache`) as measured decisions.
4. Fit the second model on the same records and that cache (:func:`algosel.runtime.measured.records_from_cache`,
   :func:`algosel.learn.cache_records.with_cache_records`, ``--cache-weight``), as ``algosel train --from-cache``.
5. Score each model's prediction-mode pick (:meth:`Selector.choose`'s first; a pick the records lack counts as
   PyTorch's default) against the records on the learned problems and on the network's *other* problems: the
   input sizes of the suite file (``data/suites/<network>.csv``, its ``size`` column) alternate between learned and
   other, so the second group is the same layers at sizes the cache never saw (a network of one size has none).

The second model is scored twice: with its catalogue holding the cache's problems, as ``algosel train`` writes it
(a cached problem is then ranked among its timed candidates), and with the sweep's catalogue alone (the ranker must
have learnt it: every problem ranked among the nearest recorded problem's list). The headline is the share of
verify's gain (total time saved over PyTorch's default) that the second model's prediction mode reaches.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from algosel.candidates import DEFAULT_ID
from algosel.learn.cache_records import with_cache_records
from algosel.learn.evaluate import Prepared
from algosel.learn.joint import fit_selector
from algosel.learn.ranker import RankerParams, fingerprint
from algosel.learn.selector import Selector
from algosel.learn.time_model import TimeModelParams
from algosel.problem import ConvProblem
from algosel.records.analysis import ok_mask
from algosel.records.catalogue import build_catalogue
from algosel.records.store import load_records, main_environment
from algosel.runtime.cache import RuntimeCache
from algosel.runtime.decision import Decision
from algosel.runtime.measured import records_from_cache

H200 = [f"data/sweeps/h200{s}" for s in ("", "-nhwc", "-layers", "-zoo-f32", "-zoo-nhwc", "-loss")]


@dataclass(frozen=True)
class LoopSettings:
    """The fits' sizes (one setting, no tuning) and the replay's: what verify mode times, the cache's weight."""

    n_estimators: int = 100
    num_leaves: int = 63
    learning_rate: float = 0.1
    time_trees: int = 100
    cache_weight: float = 1.0
    top_k: int = 3
    threads: int = 2


def network_keys(frame: pd.DataFrame, network: str) -> set[str]:
    """The problem keys the records measured for ``network`` (its suite's or its layers file's)."""
    sources = {f"suite:{network}", f"layers:{network}"}
    return set(frame.loc[frame["source"].isin(sources), "problem_key"])


def size_split(keys: Iterable[str], suite_csv: Path | None) -> tuple[set[str], set[str]]:
    """``keys`` parted into learned and other problems: the suite's input sizes alternate (sorted) between the
    two; a shape of a learned size is learned. Without a suite file of several sizes, every problem is learned."""
    keys = set(keys)
    if suite_csv is None or not suite_csv.is_file():
        return keys, set()
    suite = pd.read_csv(suite_csv)
    sizes = sorted(suite["size"].astype(str).unique())
    if len(sizes) < 2:
        return keys, set()
    learned_sizes = set(sizes[::2])
    fields = ["n", "c", "k", "h", "w", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h", "dilation_w",
              "groups"]  # fmt: skip
    learned_shapes = {
        ConvProblem(**{f: int(row[f]) for f in fields}).shape_key
        for _, row in suite.iterrows()
        if str(row["size"]) in learned_sizes
    }
    learned = {k for k in keys if ConvProblem.from_key(k).shape_key in learned_shapes}
    return learned, keys - learned


def recorded_times(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per problem key: every recorded candidate's median time (``inf`` where it failed)."""
    times = frame["time_ms_median"].where(ok_mask(frame), math.inf)
    out: dict[str, dict[str, float]] = {}
    for key, cid, t in zip(frame["problem_key"], frame["candidate_id"], times):
        out.setdefault(key, {})[cid] = float(t)
    return out


def fit(frame: pd.DataFrame, envs: Mapping[str, Any], env: Mapping[str, Any], settings: LoopSettings) -> Selector:
    """One fit of a selector on every row of ``frame`` (its catalogue from all of them), with ``settings``."""
    params = RankerParams(n_estimators=settings.n_estimators, num_leaves=settings.num_leaves,
                          learning_rate=settings.learning_rate, num_threads=settings.threads)  # fmt: skip
    time_params = TimeModelParams(n_estimators=settings.time_trees, num_threads=settings.threads)
    sel = fit_selector(Prepared.build(frame, envs), params, time_params, frame, [dict(env)])
    sel.manifest["data_fingerprint"] = fingerprint(frame)
    return Selector(sel.ranker, sel.manifest, build_catalogue(frame), sel.time_model)


def verify_times(sel: Selector, problem: ConvProblem, recorded: Mapping[str, float], top_k: int) -> dict[str, float]:
    """What verify mode would measure on ``problem``: ``sel``'s top ``top_k`` and the default, at recorded times."""
    ids = [c.candidate_id for c in sel.choose(problem, top_k=top_k)]
    return {cid: recorded[cid] for cid in dict.fromkeys([*ids, DEFAULT_ID]) if cid in recorded}


def replay_verify(
    root: Path, sel: Selector, env: Mapping[str, Any], keys: Iterable[str], recorded: Mapping, top_k: int
) -> tuple[Path, dict[str, dict[str, float]], int]:
    """Verify mode on ``keys``, kept in a runtime cache under ``root`` by its own writer; returns the folder, the
    measured times per problem and how many shortlisted candidates the records lacked."""
    environment = {"gpu_name": env["gpu_name"], "cudnn": env["cudnn"], "torch": env.get("torch"),
                   "cudnn_frontend": env.get("cudnn_frontend"), "model": sel.manifest["data_fingerprint"],
                   "algosel": "replay"}  # fmt: skip
    cache = RuntimeCache(root, environment)
    measured, lacking = {}, 0
    for key in sorted(keys):
        problem = ConvProblem.from_key(key)
        times = verify_times(sel, problem, recorded[key], top_k)
        lacking += top_k + 1 - len(times)
        if DEFAULT_ID not in times:
            continue
        measured[key] = times
        cache.put(Decision(key, min(times, key=times.get), "measured", times_ms=times))
    return cache.folder, measured, lacking


def pick_totals(sel: Selector, keys: Iterable[str], recorded: Mapping) -> tuple[float, int]:
    """Total recorded time of ``sel``'s pick over ``keys`` (the default's where the records lack the pick), and
    how many picks the records lacked."""
    total, unpriced = 0.0, 0
    for key in keys:
        cid = sel.choose(ConvProblem.from_key(key))[0].candidate_id
        t = recorded[key].get(cid)
        if t is None or not math.isfinite(t):
            unpriced += 1
            t = recorded[key][DEFAULT_ID]
        total += t
    return total, unpriced


def score(selectors: Mapping[str, Selector], keys: set[str], recorded: Mapping, verify: Mapping) -> dict[str, Any]:
    """Totals over ``keys`` (those with a recorded default): default, best, verify mode's measured best, each
    selector's pick; each as x default and x best, and each selector's share of verify's gain."""
    keys = sorted(k for k in keys if math.isfinite(recorded[k].get(DEFAULT_ID, math.inf)))
    default = sum(recorded[k][DEFAULT_ID] for k in keys)
    best = sum(min(recorded[k].values()) for k in keys)
    verified = sum(min(verify[k].values()) for k in keys)
    out: dict[str, Any] = {"problems": len(keys), "default_ms": default, "best_ms": best, "verify_ms": verified,
                           "verify_x_default": verified / default, "verify_x_best": verified / best}  # fmt: skip
    for name, sel in selectors.items():
        total, unpriced = pick_totals(sel, keys, recorded)
        gain = (default - total) / (default - verified) if default > verified else math.nan
        out[name] = {"x_default": total / default, "x_best": total / best, "share_of_verify_gain": gain,
                     "unpriced_picks": unpriced}  # fmt: skip
    return out


def run(data: list[str], network: str, suite_csv: Path | None, settings: LoopSettings, workdir: Path) -> dict:
    """The loop of the module docstring; returns its numbers."""
    t0 = time.perf_counter()
    frame, envs = load_records(*data)
    frame, env = main_environment(frame, envs)
    held = network_keys(frame, network)
    if not held:
        raise SystemExit(f"learn_loop: no records of network {network!r} in {', '.join(data)}")
    learned, other = size_split(held, suite_csv)
    recorded = recorded_times(frame[frame["problem_key"].isin(held)])
    train_frame = frame[~frame["problem_key"].isin(held)]
    first = fit(train_frame, envs, env, settings)
    folder, verify_learned, lacking = replay_verify(workdir, first, env, learned, recorded, settings.top_k)
    verify_other = {k: verify_times(first, ConvProblem.from_key(k), recorded[k], settings.top_k) for k in other}
    cache_frame = records_from_cache(folder, first)
    joined, joined_envs, summary = with_cache_records(train_frame, envs, [cache_frame], settings.cache_weight)
    second = fit(joined, joined_envs, env, settings)
    second_ranker = Selector(second.ranker, second.manifest, build_catalogue(train_frame), second.time_model)
    selectors = {"first": first, "second": second, "second_without_cache_catalogue": second_ranker}
    verify = {**verify_other, **verify_learned}
    return {
        "card": env["gpu_name"], "network": network, "data": data, "settings": asdict(settings),
        "problems": {"network": len(held), "learned": len(learned), "other_sizes": len(other)},
        "cache": {**summary, "shortlisted_candidates_the_records_lack": lacking},
        "learned": score(selectors, set(verify_learned), recorded, verify),
        "other_sizes": score(selectors, {k for k in other if DEFAULT_ID in verify[k]}, recorded, verify)
        if other else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


def lines(result: Mapping[str, Any]) -> list[str]:
    """The report of :func:`run`, one line per group and selector."""
    out = [f"{result['card']}, network {result['network']}: {result['problems']}; cache {result['cache']}"]
    for group in ("learned", "other_sizes"):
        s = result[group]
        if not s:
            continue
        out.append(f"{group}: {s['problems']} problems; verify {s['verify_x_default']:.3f}x default, "
                   f"{s['verify_x_best']:.3f}x best")  # fmt: skip
        for name in ("first", "second", "second_without_cache_catalogue"):
            r = s[name]
            out.append(f"  {name:31s} {r['x_default']:.3f}x default  {r['x_best']:.3f}x best  "
                       f"share of verify's gain {100 * r['share_of_verify_gain']:.1f}%  "
                       f"(unpriced picks {r['unpriced_picks']})")  # fmt: skip
    out.append(f"{result['seconds']} s")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="fpn")
    parser.add_argument("--data", nargs="+", default=H200)
    parser.add_argument("--suite", default=None, help="suite file with input sizes (default data/suites/NETWORK.csv)")
    defaults = LoopSettings()
    parser.add_argument("--trees", type=int, default=defaults.n_estimators)
    parser.add_argument("--leaves", type=int, default=defaults.num_leaves)
    parser.add_argument("--time-trees", type=int, default=defaults.time_trees)
    parser.add_argument("--cache-weight", type=float, default=defaults.cache_weight)
    parser.add_argument("--top-k", type=int, default=defaults.top_k)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--out", default=None, help="write the numbers as JSON")
    args = parser.parse_args(argv)
    settings = LoopSettings(n_estimators=args.trees, num_leaves=args.leaves, time_trees=args.time_trees,
                            cache_weight=args.cache_weight, top_k=args.top_k, threads=args.threads)  # fmt: skip
    suite = Path(args.suite) if args.suite else Path("data/suites") / f"{args.network}.csv"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # extrapolation warnings of far problems: the scores say what they cost
        result = run(args.data, args.network, suite, settings, Path(tmp))
    print("\n".join(lines(result)))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
