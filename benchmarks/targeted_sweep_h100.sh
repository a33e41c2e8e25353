#!/usr/bin/env bash
# Issue 51's targeted family sweep on one GPU (planned for the H100, which comes far more often than the H200): the
# layer families where the joint model loses most on hidden layers or where verify mode finds gains prediction mode
# misses, from the layers files of benchmarks/targeted_layers.py (data/layers/targeted/), every candidate timed, all
# three directions of each case, in three phases:
#
#   1. grouped-f32.csv in float32, NCHW: depthwise and grouped convolutions of six networks at batch 128;
#   2. pointwise-f16.csv in float16, NCHW (where 12.0% of the held-out loss of 18.9% on such problems was): small
#      1x1 problems of five networks at batch 8 and 16;
#   3. csp.csv and aspp.csv in float32 and float16, NCHW: a CSP detector backbone and DeepLabV3's ASPP head.
#
#   OUT=/some/dir bash benchmarks/targeted_sweep_h100.sh   # run it again until every phase prints "0 to measure"
#
# Run from the repository root on a GPU machine with torch; wheels in .whl/ (lightgbm, nvidia-cudnn-frontend) are
# installed as .ci/gpu does. The dataset is named after the GPU it runs on, $NAME = <gpu>-cudnn<version>-families
# (h100-80gb-hbm3-cudnn91900-families on an H100), so that a call that lands on another GPU never mixes its records
# into another GPU's. Records go to $KEEP (default /tmp/algosel-$NAME: it outlives a call while the machine is held),
# resuming from it and from data/sweeps/$NAME where committed; a chunk starts no case after BUDGET_S seconds in all
# (default 480: a chunk and its start fit a 9-minute call), the phases in order, each with what the earlier ones
# left, and copies $KEEP to $OUT/$NAME (commit its parts as data/sweeps/$NAME/ between sessions).
# Roughly 30 minutes of one H100 in all (a guess from the float16 grid cases' 3.5 s each, the float32 batch-128 and
# detector cases counted at 6-8 s; not measured): four chunks or so.
# DRY_RUN=1 lists each phase's cases left and measures nothing (no GPU needed: the CPU test runs it so); LAYERS sets
# the folder of the layers files (default data/layers/targeted).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh  # $OUT, $py, the wheels, PYTHONPATH
NAME=${NAME:-dry-run-families}
if [ "${DRY_RUN:-0}" != 1 ]; then
    NAME=$("$py" -c 'from algosel.records.environment import collect_environment as c, gpu_slug as s
print(s(c()) + "-families")') || exit 1
fi
echo "dataset: $NAME" >&2
KEEP=${KEEP:-/tmp/algosel-$NAME}
LAYERS=${LAYERS:-data/layers/targeted}
resume=()
if [ -d "data/sweeps/$NAME" ]; then resume+=(--resume-from "data/sweeps/$NAME"); fi
phases=(
    "grouped --layers $LAYERS/grouped-f32.csv --dtypes float32 --layouts nchw"
    "pointwise --layers $LAYERS/pointwise-f16.csv --dtypes float16 --layouts nchw"
    "detectors --layers $LAYERS/csp.csv --layers $LAYERS/aspp.csv --dtypes float32,float16 --layouts nchw"
)
deadline=$((SECONDS + ${BUDGET_S:-480}))
status=0
for phase in "${phases[@]}"; do
    read -r -a args <<< "$phase"
    name=${args[0]}
    args=("${args[@]:1}" --suites none)
    "$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${args[@]}" --dry-run | sed "s/^/$name: /" \
        | tee -a "$OUT/before.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    if [ "${DRY_RUN:-0}" = 1 ]; then continue; fi
    left=$((deadline - SECONDS))
    if [ "$left" -lt 30 ]; then echo "$name: no time left in this chunk" | tee -a "$OUT/before.txt"; continue; fi
    "$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${args[@]}" --time-budget-s "$left" --no-progress \
        2>&1 | tee -a "$OUT/sweep.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" != 0 ]; then status=$rc; break; fi
done
if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi
mkdir -p "$OUT/$NAME" && cp -r "$KEEP"/. "$OUT/$NAME/"
for phase in "${phases[@]}"; do
    read -r -a args <<< "$phase"
    "$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${args[@]:1}" --suites none --dry-run \
        | sed "s/^/${args[0]}: /" | tee -a "$OUT/after.txt"
done
exit "$status"
