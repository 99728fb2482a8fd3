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
# the lease keeps what came before). SERVECAL_GPU_STAGES picks stages (default "tests
# calibrate torch"; also "layers": 4 of 32 layers timed and scaled against all 32, and
# "demo": `servecal demo` on the device); SERVECAL_GPU_TABLE gives the torch stage a
# table calibrated earlier.
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
# run_signal SIGNAL SECONDS CMD...: as run, stopped with SIGNAL at the timeout
run_signal() {
    local sig=$1 limit=$2
    shift 2
    timeout -s "$sig" "$limit" "$@" 2>&1 | tee -a "$log"
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

stages=" ${SERVECAL_GPU_STAGES:-tests calibrate torch} "
want() { [[ "$stages" == *" $1 "* ]]; }

stage "machine"
run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
run 60 python3 -c 'import sys, torch, numpy, pandas, numba, sklearn
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "numpy", numpy.__version__, "pandas", pandas.__version__, "numba", numba.__version__,
      "sklearn", sklearn.__version__, "devices", torch.cuda.device_count())'

if want tests; then
stage "GPU-marked tests"
run 240 python3 -m pytest -p no:cacheprovider -m gpu -rA --junitxml="$out/gpu-tests.xml" \
    tests/profiler/test_gpu.py tests/sched/torch_executor/test_torch_gpu.py \
    tests/integrations/test_vllm_gpu.py tests/profiler/test_gpu_tp.py
[ -n "${SERVECAL_GPU_PACK:-}" ] && mkdir -p "$SERVECAL_GPU_PACK" && cp "$out/gpu-tests.xml" "$SERVECAL_GPU_PACK/" 2>/dev/null
pack none
fi

if want calibrate; then
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
fi

if want torch; then
stage "torch executor on the table"
table="${SERVECAL_GPU_TABLE:-$out/cal/costtable.json}"
targets=$(timeout 60 python3 -m servecal.sched.torch_executor.targets "$table" 2>>"$log")
echo "targets: $targets" | tee -a "$log"
read -r tpot rate < <(python3 -c 'import json, sys
t = json.loads(sys.argv[1]); print(round(t["tpot_slo_ms"], 3), round(t["rate"], 3))' \
    "$targets" 2>>"$log" || echo "25 10")
# every 30 s the run's Python stacks go to the log (where the time goes, if it is slow);
# a run cut short by its timeout prints where it was (faulthandler on SIGABRT)
PYTHONFAULTHANDLER=1 run_signal ABRT "${SERVECAL_GPU_TORCH_S:-200}" python3 -c '
import faulthandler, sys
faulthandler.dump_traceback_later(30, repeat=True)
from servecal.cli import main
sys.argv[0] = "servecal"
main()' simulate --backend torch --device "$dev" --predictor "$table" \
    --workload chat --policy sloweave --tpot-slo "$tpot" --rate "$rate" \
    --requests "${SERVECAL_GPU_REQUESTS:-150}" --seeds 1 --kv-tokens 65536 \
    --out "$out/torch-sloweave" --json
pack torch-sloweave
fi

if want layers; then
stage "layer scaling: 4 of 32 layers timed and scaled against all 32"
printf '{"n_decode": [1, 16, 64, 256], "chunk": [0, 512, 2048], "ctx": [2048], "prefix": [0]}' \
    > "$out/layers-grid.json"
for layers in 32 4; do
    run 150 servecal calibrate --device "$dev" --model "$model" --grid "$out/layers-grid.json" \
        --layers "$layers" --repeats 10 --no-fit --out "$out/layers/l$layers"
done
run 60 python3 - "$out/layers" <<'PY'
import sys

from servecal.costmodels.samples import read_samples

keys = ["n_decode", "chunk", "ctx", "prefix"]
full, part = (read_samples(f"{sys.argv[1]}/l{n}/samples.parquet").frame for n in (32, 4))
both = full.groupby(keys).ms.median().to_frame("all_32_ms")
both["scaled_4_ms"] = part.groupby(keys).ms.median()
both["scaled/all"] = both.scaled_4_ms / both.all_32_ms
print(both.round(3).to_string())
PY
pack layers
fi

if want demo; then
stage "servecal demo on the GPU"
run "${SERVECAL_GPU_DEMO_S:-200}" servecal demo --device "$dev" --budget "${SERVECAL_GPU_DEMO_BUDGET:-90}" \
    --out "$out/demo"
pack demo
fi
stage "done"
pack none
