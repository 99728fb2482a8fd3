#!/usr/bin/env bash
# Does the engine's niceness decide whether an engine-calibrated table validates on the
# same engine's served run, on a busy host? PAIRS alternating pairs at niceness -20 and
# at the default (0): calibrate --engine vllm, bench, validate, the CI test's grid and
# workload (tests/integrations/test_vllm_calibrate.py). One line per pair in OUT/summary.txt.
#   SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh) bash benchmarks/validate_nice.sh OUT [PAIRS]
# About 3.5 minutes per calibrate+bench on a loaded 2-core host; results in
# docs/results/2026-12-02-sim-vs-real.md.
set -u
out=${1:?usage: validate_nice.sh OUT [PAIRS]}; pairs=${2:-3}
py=${SERVECAL_VLLM_CPU_PYTHON:?set SERVECAL_VLLM_CPU_PYTHON (scripts/vllm_cpu_env.sh)}
mkdir -p "$out" && cd "$out" || exit 2
echo '{"n_decode": [0, 1, 4], "chunk": [0, 64, 256], "ctx": [16, 1024], "prefix": [0, 512]}' > grid.json
for k in $(seq "$pairs"); do for nice in -20 0; do
  d=pair-$k-nice$nice; rm -rf "$d"; mkdir "$d"
  load=$(cut -d' ' -f1 /proc/loadavg)
  servecal calibrate --engine vllm --device cpu --server-python "$py" --grid grid.json \
      --repeats 6 --out "$d/cal" --nice "$nice" > "$d/cal.txt" 2>&1
  servecal bench --out "$d/bench" --model-dir "$d/cal/model" --table "$d/cal/costtable.json" \
      --policy vllm --server-python "$py" --workload chat --requests 12 --rate 2 \
      --tpot-slo 50 --max-num-batched-tokens 256 --nice "$nice" > "$d/bench.txt" 2>&1
  servecal validate "$d/cal/costtable.json" "$d/bench/server-log" --json > "$d/validate.json"
  rc=$?
  python -c "import json; d = json.load(open('$d/validate.json')); print('$d', 'exit $rc', d['verdict'], 'shift x%.3f' % d['median_ratio'], 'checked %.1f%%' % (100 * d['checked_share']), 'load $load')" >> summary.txt \
      || echo "$d exit $rc, no verdict (see $d/*.txt)" >> summary.txt
  tail -1 summary.txt
done; done
