#!/usr/bin/env bash
# Issue 40's targeted sweep on one GPU: the 100 shapes of the `targeted` grid mix (seed 2; algosel/measure/grid.py,
# TARGETED_FAMILIES: where the shipped selector loses and is least sure, strided stems over few channels first) in
# float16 and bfloat16, NCHW and NHWC (400 cases, all three directions each, every candidate timed), in chunks that
# each fit a 10-minute device call:
#
#   OUT=/some/dir bash benchmarks/targeted_sweep.sh      # run it again until it prints "0 to measure"
#
# Run from the repository root on a GPU machine with torch; wheels in .whl/ (lightgbm, nvidia-cudnn-frontend) are
# installed as .ci/gpu does. The dataset is named after the GPU it runs on, $NAME: h200-targeted on an H200 (the
# records the shipped model learnt from), <gpu>-cudnn<version>-targeted on any other (h100-80gb-hbm3-cudnn91900-
# targeted), so that a call that lands on another GPU never mixes its records into the H200's. Records go to $KEEP
# (default /tmp/algosel-$NAME: it outlives a call while the machine is held), resuming from it, from
# data/sweeps/$NAME where committed, and on the H200 from $BASE (default data/sweeps/h200, whose cases are not
# measured again); each chunk starts no case after BUDGET_S seconds (default 480) and copies $KEEP to $OUT/$NAME
# (commit its parts as data/sweeps/$NAME/ between sessions).
# DRY_RUN=1 lists the H200's cases left and measures nothing (no GPU needed: the CPU test runs it so).
#
# Estimated at 22-23 minutes of one H200 for the 400 cases, plus about half a minute of start per chunk: float16 and
# bfloat16 cases took 3.5 s each (mean of 218 cases of data/sweeps/h200-loss, -layers and -zoo-nhwc, from their
# records' measured_at), and a line fitted through them on log2 FLOPs gives 1,319 s for these cases.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh  # $OUT, $py, the wheels, PYTHONPATH
NAME=h200-targeted
if [ "${DRY_RUN:-0}" != 1 ]; then
    NAME=$("$py" -c 'from algosel.records.environment import collect_environment as c, gpu_slug as s
n = s(c()); print("h200-targeted" if n.startswith("h200-") else n + "-targeted")') || exit 1
fi
echo "dataset: $NAME" >&2
KEEP=${KEEP:-/tmp/algosel-$NAME}
resume=()
if [ "$NAME" = h200-targeted ]; then resume+=(--resume-from "${BASE:-data/sweeps/h200}"); fi
if [ -d "data/sweeps/$NAME" ]; then resume+=(--resume-from "data/sweeps/$NAME"); fi
grid=(--grid 100 --seed 2 --grid-mix targeted --suites none --dtypes float16,bfloat16 --grid-layouts nchw,nhwc)

"$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${grid[@]}" --dry-run | tee "$OUT/before.txt" || exit 1
if [ "${DRY_RUN:-0}" = 1 ]; then exit 0; fi
"$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${grid[@]}" --time-budget-s "${BUDGET_S:-480}" --no-progress \
    2>&1 | tee "$OUT/sweep.log"
status=${PIPESTATUS[0]}
mkdir -p "$OUT/$NAME" && cp -r "$KEEP"/. "$OUT/$NAME/"
"$py" -m algosel sweep --out "$KEEP" "${resume[@]}" "${grid[@]}" --dry-run | tee "$OUT/after.txt"
exit "$status"
