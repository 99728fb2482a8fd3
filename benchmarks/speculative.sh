#!/usr/bin/env bash
# Speculative decoding's TPOT and max goodput on chat and mixed, SLOWeave and fixed
# chunks, without speculation and with k=4 at two acceptance rates
# (docs/results/2026-12-04-speculative.md). Usage: benchmarks/speculative.sh OUT [REQUESTS] [SEEDS]
set -euo pipefail
out=${1:?output folder}
requests=${2:-2000}
seeds=${3:-3}
common=(--workloads chat,mixed --policies sloweave,fixed-128,fixed-256,fixed-512,fixed-1024
        --tpot-slo 25 --seeds "$seeds" --requests "$requests" --max-goodput --jobs 1 --json)
servecal compare "${common[@]}" --out "$out/none" > "$out-none.json"
for accept in 0.6 0.8; do
  servecal compare "${common[@]}" --speculative "k=4,accept=$accept" \
    --out "$out/k4-a$accept" > "$out-k4-a$accept.json"
done
