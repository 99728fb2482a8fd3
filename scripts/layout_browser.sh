#!/usr/bin/env bash
# Make sure a headless Chromium is on PATH for tests/reports/test_layout.py (the report's
# layout at 1280 px). Installs Debian's chromium-headless-shell when it is missing and
# this shell may (root with apt-get); otherwise says so and leaves it to the test, which
# skips on a developer's machine and fails in CI (CI set). Always exits 0; output on stderr.
set -uo pipefail
for name in chromium-headless-shell chrome-headless-shell chromium chromium-browser google-chrome; do
    if command -v "$name" > /dev/null; then exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "installing chromium-headless-shell (the report layout test's browser)" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q --no-install-recommends chromium-headless-shell \
        || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium-headless-shell; }
    } > /dev/null 2>&1 || echo "could not install chromium-headless-shell" >&2
else
    echo "no headless Chromium; tests/reports/test_layout.py skips (install chromium-headless-shell)" >&2
fi
exit 0
