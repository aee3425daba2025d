#!/usr/bin/env bash
# Everything the project measures on a GPU, in one script, for the lent H100 (or any CUDA box).
#   scripts/gpu_suite.sh setup check bench profile optimize kernelbench tests screenshots
# Each step writes its raw output under $OUT (default .out/) as <step>.* and a log; the lead copies
# the results pages into docs/results/. Steps are independent; `setup` must come first on a bare machine.
set -uo pipefail
cd "$(dirname "$0")/.."
# Results go to $RESULTS (kept on the machine between calls while it stays warm) and, at the end,
# one tarball of them into $OUT (the device tool brings back only a few files).
FINAL_OUT=${OUT:-$PWD/.out}
OUT=${RESULTS:-/tmp/ak-results}
mkdir -p "$OUT" "$FINAL_OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_DB="$OUT/sessions.db" AUTOKERNEL_CACHE_DIR=/tmp/ak-cache TORCH_EXTENSIONS_DIR=/tmp/torch-ext
PY=${PYTHON:-python3}

versions() {
  "$PY" - <<'PY'
import torch, triton, platform
print(f"GPU: {torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | CUDA {torch.version.cuda} | Python {platform.python_version()}")
PY
}

step_setup() {
  # No network there: the wheels the GPU image lacks (textual, sqlite-utils, ...) travel in .whl/.
  if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
  fi
  "$PY" -m pip install -q --no-deps --no-build-isolation -e . || return 1
  versions | tee "$OUT/versions.txt"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a "$OUT/versions.txt"
}

step_cudabuild() {
  # Build all CUDA C++ starters in parallel (fills torch's extension cache) and pre-flight them.
  "$PY" -m autokernel.kernels.cuda_selfcheck --jobs 8 > "$OUT/cuda_selfcheck.txt" 2>&1; echo "cuda_selfcheck rc=$?"
  tail -15 "$OUT/cuda_selfcheck.txt"
}

step_check() {
  # All starters through the five stages on the GPU (18 = 9 types x triton/cuda).
  for k in $(autokernel kernels --json | "$PY" -c 'import json,sys; print(" ".join(d["name"] for d in json.load(sys.stdin)))'); do
    for b in triton cuda; do
      autokernel check --kernel "$k" --backend "$b" --device cuda --json > "$OUT/check_${k}_${b}.json" 2> "$OUT/check_${k}_${b}.log"
      echo "check $k $b -> rc=$? $("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); f=[s for s in d["stages"] if not s["passed"]]; print("PASS" if d["passed"] else "FAIL", (f[0]["name"]+": "+f[0]["detail"][:200]) if f else d.get("error",""))' "$OUT/check_${k}_${b}.json" 2>/dev/null)"
    done
  done
}

step_bench() {
  autokernel bench --device cuda --dtype bf16 --json > "$OUT/bench.json" 2> "$OUT/bench.log"; echo "bench rc=$?"
  autokernel bench --device cuda --dtype bf16 > "$OUT/bench.txt" 2>/dev/null || true
}

step_profile() {
  autokernel profile --device cuda --size large > "$OUT/profile.txt" 2> "$OUT/profile.log"
  autokernel profile --device cuda --size large --json > "$OUT/profile.json" 2>> "$OUT/profile.log"; echo "profile rc=$?"
}

step_optimize() {
  autokernel optimize --headless --device cuda --size large --max-experiments "${MAX_EXPERIMENTS:-100}" --json \
    > "$OUT/optimize.json" 2> "$OUT/optimize.log"; echo "optimize rc=$?"
}

step_kernelbench() {
  autokernel kernelbench tests/kernelbench_problems --device cuda --max-experiments-per-problem "${KB_EXPERIMENTS:-10}" \
    > "$OUT/kernelbench.txt" 2> "$OUT/kernelbench.log"; echo "kernelbench rc=$?"
}

step_tests() {
  "$PY" -m pytest -q -x -k "cuda or gpu" tests > "$OUT/pytest_gpu.txt" 2>&1; echo "pytest(gpu) rc=$?"
}

step_screenshots() {
  "$PY" -m autokernel.tui.screenshots --db "$AUTOKERNEL_DB" --session latest --out "$OUT" --suffix gpu > "$OUT/screenshots.log" 2>&1
  echo "screenshots rc=$?"
}

[ -d .whl ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
for step in "$@"; do
  echo "== $step $(date -u +%H:%M:%S)"
  "step_$step"
done
tar czf "$FINAL_OUT/results.tgz" -C "$OUT" . && echo "results: $FINAL_OUT/results.tgz"
