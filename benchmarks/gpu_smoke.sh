#!/usr/bin/env bash
# The GPU check, one prepared script for a short lease of a CUDA machine:
#  1. the GPU-marked tests (CUDA-event timing, NVML energy, the torch executor on CUDA);
#  2. `servecal calibrate` on cuda:0 (llama-3-8b, bf16, NVML energy) over
#     benchmarks/gpu_grid.json, stopped by a time budget;
#  3. the torch executor on that table (`simulate --backend torch`): a real forward pass
#     per planned iteration, the table's online coverage and P50 error;
#  4. a summary of the samples (points, repeats, energy rows, median ms per n × chunk).
# Held-out accuracy and the comparison with public profiles need no GPU: run them where
# the samples come back (docs/results/2026-12-04-gpu-h200.md says how).
# Each stage runs under its own timeout and a failed stage does not stop the next; all
# output also goes to OUT/log.txt.
#   bash benchmarks/gpu_smoke.sh [OUT] [CALIBRATION_BUDGET_S]   (default runs/gpu-smoke 200)
# SERVECAL_GPU_DEVICE / SERVECAL_GPU_MODEL / SERVECAL_GPU_GRID override cuda:0 /
# llama-3-8b / benchmarks/gpu_grid.json (a CPU dry run of this script: cpu / tiny / a
# CPU grid); SERVECAL_GPU_REQUESTS the torch executor's requests (150). With
# SERVECAL_GPU_PACK=DIR each stage's folder is also packed as DIR/STAGE.tgz as soon as
# the stage ends (a lease's output folder takes a few flat files; a stage cut short by
# the lease keeps what came before).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/gpu-smoke}"
budget="${2:-200}"
dev="${SERVECAL_GPU_DEVICE:-cuda:0}"
model="${SERVECAL_GPU_MODEL:-llama-3-8b}"
grid="${SERVECAL_GPU_GRID:-benchmarks/gpu_grid.json}"
export PYTHONUNBUFFERED=1
rm -rf "$out" && mkdir -p "$out"
log="$out/log.txt"

stage() { echo "== $(date -u +%T) $*" | tee -a "$log"; }
# run SECONDS CMD...: one stage under a timeout; its exit code is logged, never fatal
run() {
    local limit=$1
    shift
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    echo "-- exit ${PIPESTATUS[0]}" | tee -a "$log"
}
servecal() { python3 -m servecal "$@"; }
# pack NAME: OUT/NAME as SERVECAL_GPU_PACK/NAME.tgz, and the log beside it
pack() {
    [ -n "${SERVECAL_GPU_PACK:-}" ] || return 0
    mkdir -p "$SERVECAL_GPU_PACK"
    [ -e "$out/$1" ] && tar czf "$SERVECAL_GPU_PACK/$1.tgz" -C "$out" "$1"
    cp "$log" "$SERVECAL_GPU_PACK/log.txt"
}

stage "machine"
run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
run 60 python3 -c 'import sys, torch, numpy, pandas, numba, sklearn
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "numpy", numpy.__version__, "pandas", pandas.__version__, "numba", numba.__version__,
      "sklearn", sklearn.__version__, "devices", torch.cuda.device_count())'

stage "GPU-marked tests"
run 240 python3 -m pytest -p no:cacheprovider -m gpu -rA --junitxml="$out/gpu-tests.xml" \
    tests/profiler/test_gpu.py tests/sched/torch_executor/test_torch_gpu.py \
    tests/integrations/test_vllm_gpu.py tests/profiler/test_gpu_tp.py
[ -n "${SERVECAL_GPU_PACK:-}" ] && mkdir -p "$SERVECAL_GPU_PACK" && cp "$out/gpu-tests.xml" "$SERVECAL_GPU_PACK/" 2>/dev/null
pack none

stage "calibrate ($dev, $model, budget ${budget}s)"
run $((budget + 180)) servecal calibrate --device "$dev" --model "$model" \
    --grid "$grid" --budget "$budget" --out "$out/cal"
pack cal

stage "samples"
run 120 python3 - "$out/cal" <<'PY'
import sys

from servecal.costmodels.samples import read_samples

samples = read_samples(f"{sys.argv[1]}/samples.parquet")
frame, fp = samples.frame, samples.provenance
points = frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).size()
print({k: fp.get(k) for k in ("device_name", "driver", "torch", "cuda", "dtype",
                              "attention_backend", "layers_timed", "layers_total",
                              "energy_source")})
print(f"{len(points)} points x {int(points.median())} repeats, "
      f"{len(fp.get('infeasible_points') or [])} infeasible; "
      f"energy rows: {frame.energy_j.notna().mean():.0%}")
print(frame.groupby(["n_decode", "chunk"]).ms.median().unstack().round(2).to_string())
PY

stage "torch executor on the table"
table="$out/cal/costtable.json"
targets=$(timeout 60 python3 -m servecal.sched.torch_executor.targets "$table" 2>>"$log")
echo "targets: $targets" | tee -a "$log"
read -r tpot rate < <(python3 -c 'import json, sys
t = json.loads(sys.argv[1]); print(round(t["tpot_slo_ms"], 3), round(t["rate"], 3))' \
    "$targets" 2>>"$log" || echo "25 10")
run 200 servecal simulate --backend torch --device "$dev" --predictor "$table" \
    --workload chat --policy sloweave --tpot-slo "$tpot" --rate "$rate" \
    --requests "${SERVECAL_GPU_REQUESTS:-150}" --seeds 1 --kv-tokens 65536 \
    --out "$out/torch-sloweave" --json
pack torch-sloweave
stage "done"
pack none
