#!/usr/bin/env bash
# GPU smoke check, for whenever a CUDA machine is available:
#  1. the GPU-marked profiler and torch-executor tests (CUDA-event timing, NVML energy);
#  2. a 3-minute llama-3-8b calibration on cuda:0 (4 of 32 layers timed, scaled).
# Usage: benchmarks/gpu_smoke.sh [OUT_DIR]   (default: runs/gpu-smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/gpu-smoke}"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
pytest -q -m gpu tests/profiler tests/sched/torch_executor
rm -rf "$out"
time servecal calibrate --device cuda:0 --model llama-3-8b --budget 180 --out "$out"
python - "$out" <<'PY'
import json, sys
import pandas as pd
out = sys.argv[1]
fp = json.load(open(f"{out}/fingerprint.json"))
frame = pd.read_parquet(f"{out}/samples.parquet")
points = frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()
print(f"{fp['device_name']} driver {fp['driver']} torch {fp['torch']} CUDA {fp['cuda']}")
print(f"backend {fp['attention_backend']}  layers {fp['layers_timed']}/{fp['layers_total']}")
print(f"{len(points)} points x {int(points.median())} repeats, "
      f"{len(fp['infeasible_points'])} infeasible; energy rows: {frame.energy_j.notna().mean():.0%}")
print(frame.groupby(["n_decode", "chunk"]).ms.median().unstack().round(2).to_string())
PY
