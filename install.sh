#!/usr/bin/env bash
# Set up autokernel-tui in the current Python environment.
# - A GPU box keeps the CUDA build of torch it already has (the project asks only for torch>=2.4).
# - A machine with no torch and no NVIDIA GPU gets the CPU build (torch==2.13.0), never a multi-GB
#   CUDA build; Triton kernels then run under Triton's interpreter (triton pinned to the tested release).
# - Every other dependency is pinned to constraints.txt, the versions the test suite last passed with,
#   so a new release of one (litellm, Textual) cannot change what the tests see.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
CONSTRAINTS=(-c constraints.txt)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install torch
else
  "$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install torch==2.13.0 "${CONSTRAINTS[@]}"
  # a CUDA build of torch on a machine without a GPU pins its own triton: leave that one alone
  if "$PY" -c 'import importlib.metadata as m, sys; sys.exit(any(r.startswith("triton") for r in m.requires("torch") or []))'; then
    CPU_PINS=$(mktemp)
    trap 'rm -f "$CPU_PINS"' EXIT
    echo "triton==3.9.0" > "$CPU_PINS"
    CONSTRAINTS+=(-c "$CPU_PINS")
  fi
fi
"$PY" -m pip install "${CONSTRAINTS[@]}" -e '.[dev,ray]'
