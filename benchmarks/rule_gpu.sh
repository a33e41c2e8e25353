#!/usr/bin/env bash
# The hook's default mode (the rule) on one GPU, in one device call of under 10 minutes:
#   OUT=/some/dir CODE=<commit> bash benchmarks/rule_gpu.sh
# In order of what matters most, each step under a timeout of its own:
# 1. the multi-scale detection head over 30 input sizes, autocast and float32, a process per arm (PyTorch's default,
#    the rule: benchmarks/zoo_gpu.py --jobs run_default,run_rule);
# 2. fully connected mode against nn.Linear (benchmarks/fc_mode.py);
# 3. RegNetX-3.2GF over 9 input sizes, float32, the same two arms;
# 4. the GPU tests (.ci/gpu, with the compiled path built once for all of them).
# Outputs under $OUT: zoo_gpu.jsonl and its table, fc_mode.jsonl, gpu_tests.log, and each step's log.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
export CODE="${CODE:-unknown}" ALGOSEL_CACHE_DIR=/tmp/algosel-zoo-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
t0=$SECONDS
timeout 150 "$py" -m algosel build-ext > "$OUT/build.log" 2>&1 || { echo "build-ext failed"; tail -5 "$OUT/build.log"; }
echo "build: $((SECONDS - t0)) s"
RESULTS=/nonexistent BUDGET_S=130 timeout 150 bash benchmarks/zoo_gpu.sh --dtypes amp,float32 \
    --nets detector_ms30 --jobs run_default,run_rule > "$OUT/ms_detector.txt" 2>&1
echo "detector: $((SECONDS - t0)) s"
timeout 50 "$py" benchmarks/fc_mode.py --out "$OUT/fc_mode.jsonl" > "$OUT/fc_mode.txt" 2>&1
echo "fc: $((SECONDS - t0)) s"
RESULTS=/nonexistent BUDGET_S=60 timeout 75 bash benchmarks/zoo_gpu.sh --dtypes float32 \
    --nets regnet_x_3_2gf_ms9 --jobs run_default,run_rule > "$OUT/ms_regnet.txt" 2>&1
echo "regnet: $((SECONDS - t0)) s"
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
    # (.ci/gpu builds into a fresh folder unless given one: the one built above)
    timeout $((560 - SECONDS)) bash .ci/gpu > "$OUT/ci_gpu.txt" 2>&1
    echo "gpu tests: $((SECONDS - t0)) s"
fi
tail -n 3 "$OUT/fc_mode.txt" "$OUT/ci_gpu.txt" 2>/dev/null
grep -h '"run_' "$OUT/zoo_gpu.jsonl" 2>/dev/null | "$py" -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(r["net"], r["dtype"], r["arm"], round(r["run_s"], 3), r["passes_s"], r.get("host_passes_s"),
          r.get("measured_problems"), r.get("model_load_s"), r.get("trial"), r.get("blocks_aside"))
'
