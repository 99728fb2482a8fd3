"""SLOWeave inside vLLM: a vLLM v1 scheduler driven by a servecal cost table.

Start vLLM with::

    vllm serve MODEL \\
        --scheduler-cls servecal.integrations.vllm.SLOWeaveScheduler \\
        --additional-config '{"servecal": {"table": "costtable.json", "tpot_slo_ms": 25}}'

(docs/vllm.md has the whole workflow). vLLM's scheduler interface is not public
and changes between releases, so the plug-in is written and tested against one
pinned version, :data:`VLLM_VERSION`.

Only :mod:`.scheduler` imports vLLM, and only when ``SLOWeaveScheduler`` (or
``SLOWeaveAsyncScheduler``) is looked up on this package; the configuration,
planning and logging modules beside it are plain Python.
"""

from __future__ import annotations

from typing import Any

#: The vLLM release the plug-in is written and tested against.
VLLM_VERSION = "0.33.0"

_SCHEDULERS = ("SLOWeaveScheduler", "SLOWeaveAsyncScheduler")


def __getattr__(name: str) -> Any:
    # `--scheduler-cls servecal.integrations.vllm.SLOWeaveScheduler` imports this
    # package and looks the name up: vLLM is imported here, on that lookup, only.
    if name in _SCHEDULERS:
        from servecal.integrations.vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["VLLM_VERSION", *_SCHEDULERS]
