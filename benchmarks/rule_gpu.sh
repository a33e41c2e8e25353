#!/usr/bin/env bash
# The hook's default mode (the rule) on one GPU, in one device call of under 10 minutes:
#   OUT=/some/dir CODE=<commit> bash benchmarks/rule_gpu.sh
# 1. the multi-scale runs, a process per arm (PyTorch's default, the rule): the detection head over 30 input sizes
#    in autocast and float32, RegNetX-3.2GF over 9 sizes in float32 (benchmarks/zoo_gpu.py --jobs run_*);
# 2. fully connected mode against nn.Linear (benchmarks/fc_mode.py);
# 3. the GPU tests (.ci/gpu).
# Outputs under $OUT: zoo_gpu.jsonl and its table, fc_mode.jsonl, gpu_tests.log, and each step's log.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
export CODE="${CODE:-unknown}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
RESULTS=/nonexistent BUDGET_S=${MS_BUDGET_S:-170} timeout 200 bash benchmarks/zoo_gpu.sh --dtypes amp,float32 \
    --nets detector_ms30 --jobs run_default,run_rule > "$OUT/ms_detector.txt" 2>&1
RESULTS=/nonexistent BUDGET_S=${CLS_BUDGET_S:-80} timeout 110 bash benchmarks/zoo_gpu.sh --dtypes float32 \
    --nets regnet_x_3_2gf_ms9 --jobs run_default,run_rule > "$OUT/ms_regnet.txt" 2>&1
export PYTHONPATH="/tmp/algosel-site:$PWD"
timeout 60 python3 benchmarks/fc_mode.py --out "$OUT/fc_mode.jsonl" > "$OUT/fc_mode.txt" 2>&1
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
    timeout 200 bash .ci/gpu > "$OUT/ci_gpu.txt" 2>&1
fi
tail -3 "$OUT/ms_detector.txt" "$OUT/ms_regnet.txt" "$OUT/fc_mode.txt" "$OUT/ci_gpu.txt" 2>/dev/null
grep -h '"run_' "$OUT/zoo_gpu.jsonl" 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(r["net"], r["dtype"], r["arm"], round(r["run_s"], 3), r["passes_s"], r.get("host_passes_s"), r.get("measured_problems"), r.get("model_load_s"))
'
