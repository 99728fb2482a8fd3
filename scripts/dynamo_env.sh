#!/usr/bin/env bash
# Build (once, cached by the versions pinned here) a virtualenv holding NVIDIA Dynamo's
# mocker, ai-dynamo 1.6.1 and its Rust engine ai-dynamo-runtime 1.6.1, and print its
# python. Progress goes to stderr; stdout is the path alone:
#   SERVECAL_DYNAMO_PYTHON=$(bash scripts/dynamo_env.sh) pytest tests/costmodels/test_export_dynamo.py
# Its own virtualenv, not servecal's: ai-dynamo registers pytest plugins (its backends'
# conftests) and a vLLM general plugin, which would load into servecal's test run and
# vLLM engines. Both wheels go in --no-deps, beside the few packages the mocker's Python
# side imports (found by importing it): ai-dynamo's full requirements pull aisimulate,
# which does not build here, and Kubernetes, Redis and transformers it does not need.
set -euo pipefail
pins="ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1"
needs="numpy typing_extensions pyyaml msgspec packaging pydantic"
hash="$(echo "$pins $needs" | sha256sum | cut -c1-12)"
venv="${SERVECAL_DYNAMO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/servecal/dynamo-$hash}"
if [ ! -f "$venv/.complete" ]; then
    echo "building the Dynamo mocker's virtualenv in $venv (about 80 MB)" >&2
    rm -rf "$venv"
    python -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $needs >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps $pins >&2
    touch "$venv/.complete"
fi
echo "$venv/bin/python"
