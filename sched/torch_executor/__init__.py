"""The torch executor: the reference engine running real forward passes.

Each planned iteration runs through the profiler's transformer with per-request
KV caches in a paged pool (:mod:`.pool`); a forward pass can stop at an operator
boundary and resume later (:mod:`.forward`); predictions are validated online
against the measured times (:mod:`.validation`); runs go through the experiment layer
(:mod:`.backend`, ``--backend torch``). See docs/torch_executor.md.
"""

from servecal.sched.torch_executor.executor import PlanTap, TorchExecutor
from servecal.sched.torch_executor.forward import ForwardRun, PagedBatch, StopSignal
from servecal.sched.torch_executor.pool import PagedKVPool, PoolConfig, PoolExhausted
from servecal.sched.torch_executor.validation import OnlineValidation

__all__ = [
    "ForwardRun",
    "OnlineValidation",
    "PagedBatch",
    "PagedKVPool",
    "PlanTap",
    "PoolConfig",
    "PoolExhausted",
    "StopSignal",
    "TorchExecutor",
]
