#!/usr/bin/env bash
# The hook's default mode (the rule) on one GPU, in one device call of under 10 minutes:
#   OUT=/some/dir CODE=<commit> [TOTAL_S=560] bash benchmarks/rule_gpu.sh
# In order of what matters most, each step under a timeout of its own, none started past TOTAL_S:
# 1. the multi-scale detection head over 30 input sizes, autocast and float32, a process per arm: PyTorch's default,
#    then the rule (benchmarks/zoo_gpu.py --jobs run_default,run_rule; per pass: wall, host time, call statistics;
#    DETECTOR_DTYPES picks the dtypes);
# 2. the GPU tests (.ci/gpu, the compiled path built once for every step);
# 3. RegNetX-3.2GF over 9 input sizes, float32, the same two arms;
# 4. fully connected mode against nn.Linear (benchmarks/fc_mode.py);
# 5. the detection head again in the other order (the rule's process first), for the order's effect.
# Comes back (the device returns 8 files): zoo_gpu.jsonl (every multi-scale row), fc_mode.jsonl, gpu_tests.log,
# gpu_tests.xml, and logs.tgz (every step's log and table).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
export CODE="${CODE:-unknown}" ALGOSEL_CACHE_DIR=/tmp/algosel-zoo-cache
total=${TOTAL_S:-560}
mkdir -p "$OUT/logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/logs/gpu.txt" 2>&1
fits() { [ $((SECONDS + $1)) -le "$total" ]; }
timeout 150 "$py" -m algosel build-ext > "$OUT/logs/build.log" 2>&1 || echo "build-ext failed"
echo "build: $SECONDS s"
ms() {  # ms <dir> <budget_s> <zoo_gpu.py args...>: a multi-scale run into its own folder
    local dir=$1 budget=$2; shift 2
    OUT="$dir" RESULTS=/nonexistent BUDGET_S=$budget timeout $((budget + 25)) bash benchmarks/zoo_gpu.sh "$@" \
        > "$dir.txt" 2>&1
    cat "$dir/zoo_gpu.jsonl" >> "$OUT/zoo_gpu.jsonl" 2>/dev/null
}
fits 100 && ms "$OUT/logs/detector" 90 --dtypes "${DETECTOR_DTYPES:-amp,float32}" --nets detector_ms30 --jobs run_default,run_rule
echo "detector: $SECONDS s"
if [ "${SKIP_GPU_TESTS:-0}" != 1 ] && fits "${GPU_TESTS_S:-200}"; then
    # GPU_TESTS: pytest arguments (a selection; default: every GPU test .ci/gpu runs)
    OUT="$OUT/logs/ci" timeout $((total - SECONDS > 30 ? total - SECONDS : 30)) bash .ci/gpu ${GPU_TESTS:-} > "$OUT/logs/ci_gpu.txt" 2>&1
    cp "$OUT/logs/ci/gpu_tests.log" "$OUT/logs/ci/gpu_tests.xml" "$OUT/" 2>/dev/null
    echo "gpu tests: $SECONDS s"
fi
fits 90 && ms "$OUT/logs/regnet" 80 --dtypes float32 --nets regnet_x_3_2gf_ms9 --jobs run_default,run_rule
echo "regnet: $SECONDS s"
fits 45 && timeout 45 "$py" benchmarks/fc_mode.py --out "$OUT/fc_mode.jsonl" > "$OUT/logs/fc_mode.txt" 2>&1
echo "fc: $SECONDS s"
fits 100 && ms "$OUT/logs/detector_ba" 90 --dtypes amp,float32 --nets detector_ms30 --jobs run_rule,run_default
echo "detector, the other order: $SECONDS s"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
tail -n 2 "$OUT/gpu_tests.log" 2>/dev/null
cat "$OUT/fc_mode.jsonl" 2>/dev/null
"$py" - "$OUT/zoo_gpu.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["net"], r["dtype"], r["arm"], round(r["run_s"], 3), r["passes_s"], r.get("host_passes_s"),
          r.get("measured_problems"), r.get("model_load_s"), r.get("trial"), r.get("blocks_aside"))
    for s in r.get("pass_stats") or []:
        print("   ", {k: v for k, v in sorted(s.items(), key=lambda kv: -kv[1])[:6]})
PY
