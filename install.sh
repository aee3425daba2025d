#!/usr/bin/env bash
# Set up autokernel-tui in the current Python environment.
# - A GPU box keeps the CUDA build of torch it already has (the project asks only for torch>=2.4).
# - A machine with no torch and no NVIDIA GPU gets the CPU build (torch==2.13.0), never a multi-GB
#   CUDA build; Triton kernels then run under Triton's interpreter.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$PY" -m pip install torch
  else
    "$PY" -m pip install torch==2.13.0
  fi
fi
"$PY" -m pip install -e '.[dev]'
