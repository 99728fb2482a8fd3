"""Compose iteration times from per-operator profiles, the way Vidur does.

For an iteration with ``n`` decode tokens (KV length ``ctx`` each) and a prefill
chunk of ``c`` tokens after ``p`` cached ones, on ``T = n + c`` tokens:

    per layer = linear ops on T tokens (QKV, output, gate/up, down GEMMs; norms,
                rope, activation, adds where the profile has them)
              + decode attention (n requests at ctx) + prefill attention (c after p)
    iteration = n_layers × per layer + embedding(T) + LM head(n + 1[c > 0] rows)
              + (2·n_layers + 1) all-reduces of T × hidden at TP > 1
                (see :mod:`~servecal.profiler.importers.collective`)

Each source answers those operator questions from its tables; this module sums.
The rows it returns are medians (``rep = 0``): the samples carry no tail.

A table row has one prefill chunk. A step that carries several prompts (vLLM batches
them up to its token budget) runs the linear layers, pointwise kernels and collectives
on all their tokens at once but attention per prompt: :func:`compose_step` prices such
a step directly from the source (``k`` prompts of ``c/k`` tokens do ``1/k`` of the
causal work of one of ``c``).
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

from servecal.profiler.design import Point
from servecal.profiler.importers.collective import allreduces_per_iteration
from servecal.profiler.shapes import ModelShape

#: Per-iteration component columns written next to the contract columns (ms).
PART_COLUMNS = (
    "op_linear_ms",
    "op_other_ms",
    "op_attn_decode_ms",
    "op_attn_prefill_ms",
    "op_comm_ms",
    "op_embed_ms",
    "op_head_ms",
)


class OperatorSource(Protocol):
    """Per-layer operator times (ms) of one model shape and TP degree, from a profile."""

    name: str

    def linear_ms(self, tokens: int) -> tuple[float, float]:
        """(GEMMs, other pointwise ops) of one layer on ``tokens`` tokens."""
        ...

    def decode_attention_ms(self, n: int, ctx: int) -> float: ...

    def prefill_attention_ms(self, chunk: int, prefix: int) -> float: ...

    def allreduce_ms(self, tokens: int, decode_only: bool) -> float:
        """One all-reduce of ``tokens × hidden`` (0 at TP 1 or with ``--no-comm``);
        ``decode_only``: the iteration has no prefill chunk (CUDA-graph backend)."""
        ...

    def embed_ms(self, tokens: int) -> float: ...

    def head_ms(self, rows: int) -> float: ...

    def provenance(self) -> dict[str, Any]: ...


def compose_row(source: OperatorSource, shape: ModelShape, point: Point) -> dict[str, Any]:
    """One samples row (median, ``rep = 0``) with its per-component breakdown."""
    n, c = point.n_decode, point.chunk
    tokens = n + c
    layers = shape.n_layers
    linear, other = source.linear_ms(tokens)
    parts = {
        "op_linear_ms": layers * linear,
        "op_other_ms": layers * other,
        "op_attn_decode_ms": layers * source.decode_attention_ms(n, point.ctx) if n else 0.0,
        "op_attn_prefill_ms": layers * source.prefill_attention_ms(c, point.prefix) if c else 0.0,
        "op_comm_ms": allreduces_per_iteration(layers) * source.allreduce_ms(tokens, c == 0),
        "op_embed_ms": source.embed_ms(tokens),
        "op_head_ms": source.head_ms(n + (1 if c else 0)),
    }
    if shape.is_moe:  # expert parallelism's all-to-all, per layer (dense rows: no column)
        parts["op_a2a_ms"] = layers * _all_to_all_ms(source, tokens, c == 0)
    return {
        "n_decode": n,
        "chunk": c,
        "ctx": point.ctx,
        "prefix": point.prefix,
        "ms": sum(parts.values()),
        "energy_j": None,
        "rep": 0,
        **parts,
    }


def compose(source: OperatorSource, shape: ModelShape, points: list[Point]) -> pd.DataFrame:
    """Samples rows for ``points`` (sorted), one median row each."""
    return pd.DataFrame([compose_row(source, shape, p) for p in sorted(points)])


def compose_step(
    source: OperatorSource,
    shape: ModelShape,
    n_decode: int,
    ctx: int,
    prefills: list[tuple[int, int]],
) -> dict[str, Any]:
    """One step with ``n_decode`` decodes at ``ctx`` and several prefills ``(chunk,
    prefix)``: linear work, collectives and embedding on every token, attention per prompt,
    the LM head on one row per decode and per prompt."""
    chunks = [c for c, _ in prefills if c > 0]
    tokens = n_decode + sum(chunks)
    if tokens < 1:
        raise ValueError("a step needs n_decode + chunks >= 1")
    layers = shape.n_layers
    linear, other = source.linear_ms(tokens)
    prefill_attention = sum(source.prefill_attention_ms(c, p) for c, p in prefills if c > 0)
    parts = {
        "op_linear_ms": layers * linear,
        "op_other_ms": layers * other,
        "op_attn_decode_ms": layers * source.decode_attention_ms(n_decode, ctx)
        if n_decode
        else 0.0,
        "op_attn_prefill_ms": layers * prefill_attention,
        "op_comm_ms": allreduces_per_iteration(layers) * source.allreduce_ms(tokens, not chunks),
        "op_embed_ms": source.embed_ms(tokens),
        "op_head_ms": source.head_ms(n_decode + len(chunks)),
    }
    if shape.is_moe:
        parts["op_a2a_ms"] = layers * _all_to_all_ms(source, tokens, not chunks)
    return {"ms": sum(parts.values()), **parts}


def _all_to_all_ms(source: OperatorSource, tokens: int, decode_only: bool) -> float:
    """One MoE layer's dispatch + combine, from a source that prices it (else 0)."""
    price = getattr(source, "all_to_all_ms", None)
    return 0.0 if price is None else float(price(tokens, decode_only))
