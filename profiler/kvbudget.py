"""KV-cache capacity in tokens from the memory left for it and the KV cache's dtype.

One token's K and V, per GPU at tensor-parallel degree ``tp``: ``layers × 2 × kv_heads ×
head_dim × bytes`` (KV heads split across GPUs while there are at least ``tp``, else one
replicated per GPU, as :meth:`ModelShape.shard` splits them). An fp8 KV cache stores one
byte a value where bf16 stores two, so the same memory holds twice the tokens.

:func:`kv_tokens` is the one rule: a plan's replicas (``kv_memory_gb`` in a ``[[device.tp]]``
entry), ``simulate``/``compare --kv-memory-gb`` and :meth:`EngineConfig.from_budget
<servecal.sched.engine.EngineConfig.from_budget>` all take the engine's KV capacity ``M``
from it, and everything that budgets KV in a run reads that ``M``: the engine's admission
and preemption, Sorted-F's cap (its batches and admission test, ``view.kv_capacity``) and
the prefix cache (its unreferenced blocks live in the KV memory no request holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

#: Bytes per stored value, by KV-cache dtype (vLLM's ``--kv-cache-dtype`` names included).
KV_DTYPE_BYTES = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "auto": 2,  # vLLM: the model's dtype, bf16 for the shipped shapes
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


def kv_dtype_bytes(kv_dtype: str) -> int:
    """Bytes a value of ``kv_dtype`` takes; one :class:`InputError` line for an unknown one."""
    if kv_dtype not in KV_DTYPE_BYTES:
        raise InputError(f"kv_dtype {kv_dtype!r}: choose one of {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[kv_dtype]


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str = "bfloat16", tp: int = 1) -> int:
    """Bytes of K and V one token holds on each GPU."""
    per_gpu = shape.shard(tp)
    return shape.n_layers * 2 * per_gpu.n_kv_heads * shape.head_dim * kv_dtype_bytes(kv_dtype)


def kv_tokens(shape: ModelShape, memory_gb: float, kv_dtype: str = "bfloat16", tp: int = 1) -> int:
    """Tokens of KV that ``memory_gb`` (10⁹ bytes per GPU, what is left after the weights
    and activations) holds."""
    if not isinstance(memory_gb, int | float) or isinstance(memory_gb, bool) or memory_gb <= 0:
        raise InputError(f"kv_memory_gb = {memory_gb!r}: expected a number > 0")
    tokens = int(memory_gb * 1e9 // kv_bytes_per_token(shape, kv_dtype, tp))
    if tokens < 1:
        raise InputError(f"kv_memory_gb = {memory_gb}: holds no token of {shape.name}'s KV")
    return tokens


@dataclass(frozen=True)
class KVBudget:
    """The memory a replica has for KV (10⁹ bytes per GPU), the model's shape, its KV
    cache's dtype and the TP degree: ``tokens`` is the engine's KV capacity ``M``."""

    memory_gb: float
    shape: ModelShape
    kv_dtype: str = "bfloat16"
    tp: int = 1

    @property
    def tokens(self) -> int:
        return kv_tokens(self.shape, self.memory_gb, self.kv_dtype, self.tp)

    @classmethod
    def of_table(cls, memory_gb: float, fingerprint: Mapping[str, Any], source: str) -> KVBudget:
        """The budget of ``memory_gb`` for what a cost table was measured on: its
        fingerprint's model shape (``model_shape``, else the shipped ``model``), KV dtype
        and TP. One :class:`InputError` line when it records no model or no KV dtype."""
        shape_doc = fingerprint.get("model_shape")
        if isinstance(shape_doc, Mapping):
            try:
                shape = ModelShape(**shape_doc)
            except (TypeError, ValueError) as exc:
                raise InputError(f"{source}: fingerprint model_shape: {exc}") from None
        elif isinstance(fingerprint.get("model"), str):
            shape = ModelShape.resolve(fingerprint["model"])
        else:
            raise InputError(f"{source} records no model shape: its KV bytes per token are "
                             "unknown (give the KV capacity in tokens)")  # fmt: skip
        kv_dtype = fingerprint.get("kv_dtype")
        if not isinstance(kv_dtype, str):
            raise InputError(f"{source} records no kv_dtype: its KV bytes per token are "
                             "unknown (give the KV capacity in tokens)")  # fmt: skip
        tp = fingerprint.get("tp")
        tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1
        return cls(float(memory_gb), shape, kv_dtype, tp)
