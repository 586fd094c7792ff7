#!/usr/bin/env bash
# The GPU check of issue 18, in one call on a machine with a CUDA 12 GPU (within 8 minutes):
#   1. the environment: the gpu extra from PyPI (make setup), or offline from WHEELS=<dir>,
#      or NO_INSTALL=1 to use PYTHON as it is; PYTEST_S and VALIDATE_S bound the two steps (180, 300 s);
#   2. make test-gpu's tests (@pytest.mark.gpu) and the seven kernels validated on a device cluster;
#   3. each kernel timed at a small and a large size next to the device peer (cupy.fft, cupyx, cuGraph).
# Writes $OUT_DIR/gpu-check.csv (default results/gpu-check/) and the logs beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-results/gpu-check}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" -e '.[gpu,test]' || exit 2
elif [ -z "${NO_INSTALL:-}" ]; then
  make setup EXTRAS=gpu,test,bench || exit 2
  PY=.venv/bin/python
fi
"$PY" -c "import cupy; print('device:', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())" || exit 3
rc=0
timeout "${PYTEST_S:-180}" "$PY" -m pytest -q -m gpu --continue-on-collection-errors tests 2>&1 | tee "$OUT_DIR/pytest-gpu.log" || rc=1
timeout "${VALIDATE_S:-300}" "$PY" tools/gpu_validate.py --backend gpu --size small large --csv "$OUT_DIR/gpu-check.csv" \
  2>&1 | tee "$OUT_DIR/validate.log" || rc=1
exit $rc
