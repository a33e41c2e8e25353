#!/usr/bin/env bash
# The user's loop of docs/tutorial.md on one GPU, for the numbers the tutorial quotes:
#   layers -> sweep -> train on the union -> evaluate on the network's layers -> training steps with the hook ->
#   the HTML report.
#
#   OUT=/some/dir bash benchmarks/loop_h200.sh
#
# Run from the repository root, in an environment with algosel, its GPU extra (nvidia-cudnn-frontend,
# nvidia-ml-py), lightgbm and a CUDA build of torch. Everything goes under $OUT: times.tsv (seconds and bytes per
# step), the layers file, the sweep's records, the model, the evaluation and one JSON line per training-step run
# (steps.jsonl). Estimated at about 7 to 8 minutes on one H200 (6 to 7 with BUILD_EXT=0): the sweep of MyNet's 42
# cases at the 0.65 cases/s of docs/sweeper.md is about 65 s (capped at 200 s); training on the union with the
# shipped model's hyperparameters (no tuning; its final fit took 11 s on 2 threads, plus 3 cross-validation fits and
# loading) about a minute; the evaluation half a minute; building the compiled path about a minute (docs/hook.md);
# twelve training-step runs of about 10 s each, then the paired runs of benchmarks/zoo.py (about 40 s each); the
# report 20 s (17 s on a CPU machine for data/sweeps/h200).
# The commands are docs/tutorial.md's.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
py=${PYTHON:-python3}
SHIPPED=models/joint-h100-h200-cudnn91900
SWEEP="$OUT/sweeps/h200-mynet"
# The runtime's persistent cache of decisions and plans (and a compiled extension, if built) under $OUT: nothing is
# read from an earlier run's cache, and later runs of one model in this script reuse what the first one decided.
export ALGOSEL_CACHE_DIR="$OUT/cache"
MODEL="$OUT/models/h200-mynet"
printf 'step\tseconds\tbytes\texit\n' > "$OUT/times.tsv"

# step NAME OUTPUT COMMAND...: run it, append its wall time, the size of OUTPUT and its exit status to times.tsv;
# returns that status (so that, under set -e, a failed step ends the run unless its caller says otherwise)
step() {
    local name=$1 output=$2
    shift 2
    local t0=$SECONDS rc=0 bytes=0
    echo "== $name: $*"
    "$@" || rc=$?
    if [ -e "$output" ]; then bytes=$(du -sb "$output" | cut -f1); fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$bytes" "$rc" >> "$OUT/times.tsv"
    return "$rc"
}

step doctor "$OUT/doctor.txt" bash -c "$py -m algosel doctor > '$OUT/doctor.txt'; cat '$OUT/doctor.txt'"
step layers "$OUT/mynet.csv" \
    $py -m algosel layers --model examples/mynet.py:make_model --input 16,3,128,128 --out "$OUT/mynet.csv"
step dry-run "$OUT/mynet.csv" $py -m algosel sweep --layers "$OUT/mynet.csv" --dtypes float32,float16 \
    --resume-from data/sweeps/h200 --out "$SWEEP" --dry-run
step sweep "$SWEEP" $py -m algosel sweep --layers "$OUT/mynet.csv" --dtypes float32,float16 \
    --resume-from data/sweeps/h200 --out "$SWEEP" --time-budget-s 200 --no-progress
step train "$MODEL" $py -m algosel train data/sweeps/h200 "$SWEEP" --models "$OUT/models" --name h200-mynet \
    --params-from "$SHIPPED" --no-progress
mkdir -p "$OUT/eval"
# The training steps below do not need the evaluation: a failure here is reported and the run goes on.
step evaluate "$OUT/eval" bash -c "$py -m algosel evaluate --model '$MODEL' --data data/sweeps/h200 '$SWEEP' \
    --no-lono --no-progress --layers '$OUT/mynet.csv' --compare-model '$SHIPPED' --out '$OUT/eval' \
    > '$OUT/eval/evaluate.txt'; status=\$?; cat '$OUT/eval/evaluate.txt'; exit \$status" ||
    echo "== evaluate failed (exit $?); continuing with the training steps"

# The hook's compiled path (into $ALGOSEL_CACHE_DIR; about a minute). BUILD_EXT=0 skips it: the hook then runs its
# Python path, and a failed build is reported and the run goes on the same way.
if [ "${BUILD_EXT:-1}" != 0 ]; then
    step build-ext "$OUT/cache/ext" $py -m algosel build-ext || echo "== build-ext failed (exit $?); the Python path runs"
fi

# Training steps, each mode in a process of its own (PyTorch caches its plan per shape in a process), the main
# comparison (default against the hook with the new model) twice in ABBA order.
run_step() {
    local label=$1
    shift
    echo "== step $label: $*"
    $py examples/mynet_step.py --steps 50 --warmup 10 "$@" | sed "s/^{/{\"label\": \"$label\", /" >> "$OUT/steps.jsonl"
}
t0=$SECONDS
for dtype in float32 amp; do
    run_step "default-$dtype-1" --mode default --dtype "$dtype"
    run_step "hook-mynet-$dtype-1" --mode hook --model "$MODEL" --dtype "$dtype"
    run_step "hook-mynet-$dtype-2" --mode hook --model "$MODEL" --dtype "$dtype"
    run_step "default-$dtype-2" --mode default --dtype "$dtype"
    # the shipped model has no record of MyNet's shapes: what it meets is recorded as unseen (where the hook
    # reads ALGOSEL_RECORD_UNSEEN)
    ALGOSEL_RECORD_UNSEEN="$OUT/unseen.csv" run_step "hook-shipped-$dtype" --mode hook --model "$SHIPPED" --dtype "$dtype"
    run_step "hook-shipped-verify3-$dtype" --mode hook --model "$SHIPPED" --verify 3 --dtype "$dtype"
done
printf 'training-steps\t%s\t0\t0\n' "$((SECONDS - t0))" >> "$OUT/times.tsv"
# The same comparison paired in one process (docs/tutorial.md step 7): the steps are host-bound and vary more
# between processes than the modes differ.
step zoo-mynet "$OUT/zoo-mynet-new.jsonl" $py benchmarks/zoo.py --nets mynet --model "$MODEL" --jobs paired \
    --rounds 30 --out "$OUT/zoo-mynet-new.jsonl"
step zoo-mynet-shipped "$OUT/zoo-mynet-shipped.jsonl" $py benchmarks/zoo.py --nets mynet --jobs paired --rounds 30 \
    --out "$OUT/zoo-mynet-shipped.jsonl"

# The loop closes: the unseen problems the shipped model met are what the new sweep recorded.
if [ -f "$OUT/unseen.csv" ]; then
    step unseen-dry-run "$OUT/unseen.csv" $py -m algosel sweep --layers "$OUT/unseen.csv" --dtypes float32,float16 \
        --resume-from data/sweeps/h200 --resume-from "$SWEEP" --out "$OUT/sweeps/unseen" --dry-run
fi
# Last, as it needs no GPU: the HTML report (docs/tutorial.md step 8).
step report "$OUT/html" $py -m algosel report --data data/sweeps/h200 "$SWEEP" --model "$MODEL" --out "$OUT/html" ||
    echo "== report failed (exit $?)"
cat "$OUT/times.tsv"
