#!/usr/bin/env bash
# The GPU-bound zoo in one device call of a few minutes, going on where the last call stopped:
#   OUT=/some/dir bash benchmarks/zoo_gpu.sh [benchmarks/zoo_gpu.py arguments...]
# Installs wheels from .whl/ where that folder exists (lightgbm, nvidia-cudnn-frontend; as .ci/gpu), builds the
# compiled path unless it is built in $ALGOSEL_CACHE_DIR (default /tmp/algosel-zoo-cache, kept while the machine
# stays warm), loads the model that covers this GPU (else the H200's, with --force), starts from $RESULTS (default
# benchmarks/results/zoo_gpu.jsonl: copy the file a call returns there before the next call) and runs
# benchmarks/zoo_gpu.py with --resume and --budget-s $BUDGET_S (default 480) into $OUT/zoo_gpu.jsonl.
# Outputs: $OUT/zoo_gpu.jsonl (every row so far), $OUT/zoo_gpu.log, $OUT/zoo_gpu_table.md, $OUT/build.log.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
py=${PYTHON:-python3}
if [ -d .whl ] && ! "$py" -c 'import lightgbm, cudnn' 2>/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/algosel-site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/algosel-site${PYTHONPATH:+:$PYTHONPATH}"
elif [ -d /tmp/algosel-site ]; then
    export PYTHONPATH="/tmp/algosel-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ALGOSEL_CACHE_DIR="${ALGOSEL_CACHE_DIR:-/tmp/algosel-zoo-cache}"
built=$("$py" -c 'from algosel.runtime import native; print(native.status())' 2>/dev/null)
case "$built" in
    built*) case "$built" in *"does not load"*) "$py" -m algosel build-ext > "$OUT/build.log" 2>&1;; esac;;
    *) "$py" -m algosel build-ext > "$OUT/build.log" 2>&1 || { echo "build-ext failed:"; tail -20 "$OUT/build.log"; };;
esac
gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name())' 2>/dev/null)
force=()
# A GPU a shipped model covers (the H200; the H100 by the joint model) loads it as a user's would; another loads the
# H200's with --force, and every row says so
if ! "$py" -c 'from algosel.learn.models import load_default; load_default()' > /dev/null 2>&1; then
    force=(--force); echo "GPU: $gpu: no shipped model covers it; the H200's model is loaded with --force"
fi
results=${RESULTS:-benchmarks/results/zoo_gpu.jsonl}
if [ -f "$results" ] && [ ! -f "$OUT/zoo_gpu.jsonl" ]; then cp "$results" "$OUT/zoo_gpu.jsonl"; fi
"$py" benchmarks/zoo_gpu.py "${force[@]}" --out "$OUT/zoo_gpu.jsonl" --resume --budget-s "${BUDGET_S:-480}" "$@" \
    > "$OUT/zoo_gpu.log" 2>&1
status=$?
"$py" benchmarks/zoo_gpu.py --summarize "$OUT/zoo_gpu.jsonl" > "$OUT/zoo_gpu_table.md" 2>&1
grep -v '^|' "$OUT/zoo_gpu.log" | tail -30
head -30 "$OUT/zoo_gpu_table.md"
exit $status
