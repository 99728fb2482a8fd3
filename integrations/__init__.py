"""Adapters that carry servecal's cost tables and policies into other serving engines.

Each sub-package imports its engine only when its engine-facing classes are used
(``servecal.integrations.vllm.SLOWeaveScheduler`` imports vLLM; importing
``servecal`` or ``servecal.integrations`` never does).
"""
