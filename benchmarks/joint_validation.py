"""The joint model's cost on the H200, on a validation split of the training shapes (CPU, a few minutes).

    python benchmarks/joint_validation.py [--seeds 0,1,2,3,4,5] [--fits h200,joint,joint-l255,targeted-l255,...]

Holds out a further 20% of the training shapes (by a salted hash; the test shapes stay untouched) on both GPUs and
fits, with the shipped H200 model's settings and each seed, the H200's records alone (``h200``) and the joint records
(``joint``), the joint records and the H100's targeted sweep (``targeted``), variants named by what they change:
``-l255`` (num_leaves), ``-n300`` (n_estimators), ``-mcs40`` (min_child_samples), ``-w0.25`` (the H100 records'
weight); prints each fit's geomean and share within 5% on the H200's and the H100's validation
problems, then each fit's mean over the seeds. This is what chose the shipped joint model's 255 leaves: at the H200
model's 127 a joint model was ~0.13% worse on the H200 over six seeds; docs/selector.md ("A GPU of your own") quotes it.
"""

import sys
import time
import zlib
from dataclasses import replace

import numpy as np
import pandas as pd

from algosel.learn.artifact import tuned_params
from algosel.learn.evaluate import Prepared, is_test_shape
from algosel.learn.joint import joint_environments, scores
from algosel.learn.ranker import Ranker, RankerParams
from algosel.records import load_records

D = [f"data/sweeps/h200{s}" for s in ("", "-nhwc", "-layers", "-zoo-f32", "-zoo-nhwc", "-loss")]
H = "data/sweeps/h100-80gb-hbm3-cudnn91900"
T = "data/sweeps/h100-80gb-hbm3-cudnn91900-targeted"
# The shipped joint model's settings with the 127 leaves of the retired H200-only model, which these fits started from.
base = replace(tuned_params("models/joint-h100-h200-cudnn91900", RankerParams(num_threads=2)), num_leaves=127)
fk, ek = load_records(*D)
fn, en = load_records(H, T)
ft, _ = load_records(T)
frame, envs_list = joint_environments(pd.concat([fk, fn], ignore_index=True), {**ek, **en})
prep = Prepared.build(frame, {**ek, **en})
test = is_test_shape(prep.shape)
val = np.array([zlib.crc32(f"val:{s}".encode()) % 1000 < 200 for s in prep.shape]) & ~test
train = ~test & ~val
onh = prep.data["env_id"].isin(set(fn["env_id"])).to_numpy()
# The targeted sweep's problems (those the uniform H100 sweep lacks): trained on by ``targeted`` fits only.
only_targeted = set(ft["problem_key"]) - set(load_records(H)[0]["problem_key"])
targeted = onh & prep.data["problem_key"].isin(only_targeted).to_numpy()
rk, rn = frame[~frame["env_id"].isin(set(fn["env_id"]))], frame[frame["env_id"].isin(set(fn["env_id"]))]
vk, vn = prep.rows(val & ~onh), prep.rows(val & onh)
print("val problems", vk.data.problem_key.nunique(), vn.data.problem_key.nunique(), flush=True)


def run(name, mask, weight_h100=None, **change):
    part = prep.rows(mask)
    t = time.time()
    weight = None
    if weight_h100 is not None:
        weight = np.where(part.data["env_id"].isin(set(fn["env_id"])).to_numpy(), weight_h100, 1.0)
    r = Ranker(replace(base, **change)).fit_prepared(part.data, part.X, weight=weight)
    a, b = scores(r, rk, vk)["model"], scores(r, rn, vn)["model"]
    h200 = f"H200 val {a['geomean']:.4f} {100 * a['within_5pct']:.1f}%"
    h100 = f"H100 val {b['geomean']:.4f} {100 * b['within_5pct']:.1f}%"
    print(f"{name:28s} {h200}  {h100}  ({time.time() - t:.0f}s)", flush=True)
    return a["geomean"], b["geomean"]


def fit(spec: str, seed: int):
    """``h200`` or ``joint`` and its changes, e.g. ``joint-l255-mcs40``."""
    kind, *changes = spec.split("-")
    change, weight = {"seed": seed}, None
    for c in changes:
        if c.startswith("l"):
            change["num_leaves"] = int(c[1:])
        elif c.startswith("mcs"):
            change["min_child_samples"] = int(c[3:])
        elif c.startswith("n"):
            change["n_estimators"] = int(c[1:])
        elif c.startswith("w"):
            weight = float(c[1:])
        else:
            raise SystemExit(f"joint_validation.py: unknown change {c!r} in {spec!r}")
    if kind not in ("h200", "joint", "targeted"):
        raise SystemExit(f"joint_validation.py: unknown fit {spec!r}: h200, joint or targeted and its changes")
    mask = {"h200": train & ~onh, "joint": train & ~targeted, "targeted": train}[kind]
    return run(f"{spec} s{seed}", mask, weight, **change)


args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
seeds = [int(s) for s in args.get("--seeds", "0,1,2,3,4,5").split(",")]
fits = args.get("--fits", "h200,joint,joint-l255").split(",")
got = {f: [fit(f, seed) for seed in seeds] for f in fits}
print(f"\nmean over seeds {','.join(map(str, seeds))}:")
for f, pairs in got.items():
    print(f"{f:28s} H200 val {np.mean([a for a, _ in pairs]):.4f}  H100 val {np.mean([b for _, b in pairs]):.4f}")
