"""A prefill as a sequence of operators, and how its duration splits over them.

FlowPrefill parks a running prefill at an *operator boundary*. By default a layer
has two boundaries, after attention and after the MLP (the released code's
choice); ``fine`` adds the boundaries after the QKV and output projections and
between the MLP's gate-up and down projections; ``layer`` keeps one per layer.

The simulated executor draws a batch's whole prefill time from the truth model
and splits it over the operators in proportion to their cost from *shape
arithmetic* (FLOPs of a dense transformer, per layer and per token ``t`` with
``p`` tokens already in KV)::

    qkv projection    2·h·(h + 2·kvh·hd)        ∝ t
    attention core    4·h·(p + t/2)              ∝ t·(p + t/2)   (causal: half the square)
    output projection 2·h·h                       ∝ t
    gate-up           2·h·2f                      ∝ t
    down              2·f·h                       ∝ t

so "attention" (qkv + core + o) ∝ t·(const + p + t/2) and "MLP" ∝ t. Every layer
costs the same, so a prefill of ``L`` layers is the per-layer vector repeated
``L`` times; iteration overheads (launch, sampling) are spread in proportion too,
so the operators' durations always add up to the drawn total (no work is lost or
invented by splitting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Operators per layer at each granularity, in execution order.
GRANULARITIES: dict[str, tuple[str, ...]] = {
    "layer": ("layer",),
    "attn-mlp": ("attention", "mlp"),
    "fine": ("qkv", "attention-core", "o-proj", "gate-up", "down"),
}


@dataclass(frozen=True)
class OperatorModel:
    """Model shape (default Llama-3-8B) and preemption granularity.

    ``layers``: transformer layers; ``hidden``: model width ``h``; ``ffn``: MLP width
    ``f``; ``heads`` / ``kv_heads``: attention heads (GQA); ``granularity``: a key of
    :data:`GRANULARITIES`.
    """

    layers: int = 32
    hidden: int = 4096
    ffn: int = 14336
    heads: int = 32
    kv_heads: int = 8
    granularity: str = "attn-mlp"

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "ffn", "heads", "kv_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"OperatorModel.{name} must be >= 1")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("OperatorModel: hidden % heads and heads % kv_heads must be 0")
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"OperatorModel.granularity must be one of {'|'.join(GRANULARITIES)}, "
                f"got {self.granularity!r}"
            )

    @property
    def ops_per_layer(self) -> int:
        return len(GRANULARITIES[self.granularity])

    @property
    def n_ops(self) -> int:
        """Operators (and so preemption boundaries) of one prefill."""
        return self.layers * self.ops_per_layer

    def _fine_layer(self, tokens: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """FLOPs of the five fine operators of one layer, summed over the batch."""
        h, f = float(self.hidden), float(self.ffn)
        hd = h / self.heads
        t = tokens.astype(float)
        p = prefix.astype(float)
        return np.array(
            [
                (2 * h * (h + 2 * self.kv_heads * hd) * t).sum(),
                (4 * h * t * (p + t / 2)).sum(),
                (2 * h * h * t).sum(),
                (4 * h * f * t).sum(),
                (2 * f * h * t).sum(),
            ]
        )

    def layer_weights(self, tokens: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
        """Relative cost of each operator of one layer for a batch of chunks (sums to 1)."""
        fine = self._fine_layer(np.asarray(tokens), np.asarray(prefix))
        if self.granularity == "fine":
            w = fine
        elif self.granularity == "attn-mlp":
            w = np.array([fine[:3].sum(), fine[3:].sum()])
        else:
            w = np.array([fine.sum()])
        return w / w.sum()

    def fractions(self, tokens: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
        """Share of the batch's prefill time taken by each of its :attr:`n_ops` operators."""
        return np.tile(self.layer_weights(tokens, prefix), self.layers) / self.layers

    def done_fraction(self, tokens: int, prefix: int, ops_done: int) -> float:
        """Share of a lone chunk's prefill work finished after ``ops_done`` operators."""
        if ops_done <= 0:
            return 0.0
        if ops_done >= self.n_ops:
            return 1.0
        w = _solo_cumulative(self, tokens, prefix)
        full, part = divmod(ops_done, self.ops_per_layer)
        return (full + w[part]) / self.layers


@lru_cache(maxsize=65536)
def _solo_cumulative(model: OperatorModel, tokens: int, prefix: int) -> tuple[float, ...]:
    """Cumulative shares of one layer's operators for a lone chunk, starting at 0."""
    w = model.layer_weights((tokens,), (prefix,))
    return (0.0, *np.cumsum(w).tolist())
