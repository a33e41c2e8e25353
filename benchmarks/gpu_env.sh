# Sourced by the device scripts (benchmarks/targeted_sweep.sh, targeted_sweep_h100.sh) from the repository root:
# checks $OUT, makes it, sets $py, installs the wheels of .whl/ (lightgbm, nvidia-cudnn-frontend) into /tmp/algosel-site
# unless DRY_RUN=1 (a dry run lists cases: no GPU, no wheels), and puts the checkout on PYTHONPATH.
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
py=${PYTHON:-python3}
if [ -d .whl ] && [ "${DRY_RUN:-0}" != 1 ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/algosel-site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/algosel-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
