"""The joint model's cost on the H200, on a validation split of the training shapes (CPU, about a minute).

    python benchmarks/joint_validation.py

Holds out a further 20% of the training shapes (by a salted hash; the test shapes stay untouched) on both GPUs and
fits, with the shipped H200 model's settings and seeds 0-2, the H200's records alone and the joint records, each also
with min_child_samples 40 and (joint) 80; prints each fit's geomean and share within 5% on the H200's and the H100's
validation problems. docs/selector.md ("What transfers to an H100") quotes it.
"""

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
base = tuned_params("models/h200-cudnn91900", RankerParams(num_threads=2))
fk, ek = load_records(*D)
fn, en = load_records(H)
frame, envs_list = joint_environments(pd.concat([fk, fn], ignore_index=True), {**ek, **en})
prep = Prepared.build(frame, {**ek, **en})
test = is_test_shape(prep.shape)
val = np.array([zlib.crc32(f"val:{s}".encode()) % 1000 < 200 for s in prep.shape]) & ~test
train = ~test & ~val
onh = prep.data["env_id"].isin(set(fn["env_id"])).to_numpy()
rk, rn = frame[~frame["env_id"].isin(set(fn["env_id"]))], frame[frame["env_id"].isin(set(fn["env_id"]))]
vk, vn = prep.rows(val & ~onh), prep.rows(val & onh)
print("val problems", vk.data.problem_key.nunique(), vn.data.problem_key.nunique(), flush=True)


def run(name, mask, **ch):
    part = prep.rows(mask)
    t = time.time()
    r = Ranker(replace(base, **ch)).fit_prepared(part.data, part.X)
    a, b = scores(r, rk, vk)["model"], scores(r, rn, vn)["model"]
    h200 = f"H200 val {a['geomean']:.4f} {100 * a['within_5pct']:.1f}%"
    h100 = f"H100 val {b['geomean']:.4f} {100 * b['within_5pct']:.1f}%"
    print(f"{name:28s} {h200}  {h100}  ({time.time() - t:.0f}s)", flush=True)


for seed in (0, 1, 2):
    run(f"h200 only s{seed}", train & ~onh, seed=seed)
    run(f"h200 only mcs40 s{seed}", train & ~onh, seed=seed, min_child_samples=40)
    run(f"joint s{seed}", train, seed=seed)
    run(f"joint mcs40 s{seed}", train, seed=seed, min_child_samples=40)
    run(f"joint mcs80 s{seed}", train, seed=seed, min_child_samples=80)
