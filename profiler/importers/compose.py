"""Compose iteration times from per-operator profiles, the way Vidur does.

For an iteration with ``n`` decode tokens (KV length ``ctx`` each) and a prefill
chunk of ``c`` tokens after ``p`` cached ones, on ``T = n + c`` tokens (``T`` padded
first where the engine pads, :data:`PADDINGS`: a CUDA-graph engine runs the graph
captured at the next size up):

    per layer = linear ops on T tokens (QKV, output, gate/up, down GEMMs; norms,
                rope, activation, adds where the profile has them)
              + decode attention (n requests at ctx) + prefill attention (c after p)
                − one attention kernel's fixed cost per part a varlen kernel folds in
    iteration = n_layers × per layer + embedding(T) + LM head(n + 1[c > 0] rows)
              + (2·n_layers + 1) all-reduces of T × hidden at TP > 1
                (see :mod:`~servecal.profiler.importers.collective`)

Each source answers those operator questions from its tables; this module sums.
The rows it returns are medians (``rep = 0``): the samples carry no tail.

One flattened forward: every linear and pointwise kernel, collective and the embedding
run once over all ``T`` tokens, whatever mix of decodes and prompts they are, and the step
pays each launch once. Attention is the one part that sees the mix;
:class:`StepComposition` says whether the engine runs it as one varlen kernel (vLLM V1,
SGLang: one fixed kernel cost a step) or a kernel per part (eager engines).

A table row has one prefill chunk. A step that carries several prompts (vLLM batches
them up to its token budget) runs the linear layers, pointwise kernels and collectives
on all their tokens at once and attention over each prompt's rows: :func:`compose_step` prices such
a step directly from the source (``k`` prompts of ``c/k`` tokens do ``1/k`` of the
causal work of one of ``c``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from servecal.profiler.design import Point
from servecal.profiler.importers.collective import (
    V1_MAX_CAPTURE_TOKENS,
    allreduces_per_iteration,
)
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

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


#: How an engine runs a step's attention: ``varlen``, one kernel over the decode and the
#: prefill rows (vLLM V1's FlashAttention, SGLang, TensorRT-LLM), or ``separate``, a kernel
#: for the decodes and one per prompt (eager engines: vLLM V0, Sarathi-Serve).
ATTENTION_MODES = ("varlen", "separate")
#: How an engine pads a step's token count before its forward runs: ``none``; ``graph``,
#: vLLM V1 replaying the CUDA graph captured at the next size up (its default capture
#: sizes, :func:`cudagraph_capture_sizes`; steps above the largest run unpadded); ``align8``,
#: Sarathi-Serve (and vLLM <= 0.2) padding the input to a multiple of 8 for tensor cores.
PADDINGS = ("none", "graph", "align8")


def cudagraph_capture_sizes(largest: int = V1_MAX_CAPTURE_TOKENS) -> tuple[int, ...]:
    """vLLM V1's default capture sizes: 1, 2, 4, multiples of 8 below 256, then multiples
    of 16 up to ``largest`` (``max_cudagraph_capture_size``, 512 by default)."""
    sizes = (1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16))
    return tuple(s for s in sizes if s <= largest)


_CAPTURE_SIZES = cudagraph_capture_sizes()


@dataclass(frozen=True)
class StepComposition:
    """How the parts of one step add up (see docs/profiler.md, "How a step is composed").

    Linear, pointwise, collective and embedding work always run once over all the step's
    tokens (one flattened forward, one launch each). ``attention`` says whether the decode
    part and every prompt's part share one varlen kernel, so the step pays one kernel's
    fixed cost (``source.attention_launch_ms()``) instead of one per part. ``padding``
    says how many token rows that flattened forward really runs (:data:`PADDINGS`): the
    linear, pointwise, collective and embedding work is priced on the padded count;
    attention and the LM head see only the real requests (padded rows hold no KV and
    are not sampled)."""

    attention: str = "varlen"
    padding: str = "none"

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_MODES:
            raise InputError(
                f"attention must be one of {', '.join(ATTENTION_MODES)}, got {self.attention!r}"
            )
        if self.padding not in PADDINGS:
            raise InputError(f"padding must be one of {', '.join(PADDINGS)}, got {self.padding!r}")

    def rows_run(self, tokens: int) -> int:
        """The token rows the forward runs for a step of ``tokens`` tokens."""
        if self.padding == "align8":
            return -(-tokens // 8) * 8
        if self.padding == "graph" and tokens <= _CAPTURE_SIZES[-1]:
            return _CAPTURE_SIZES[bisect_left(_CAPTURE_SIZES, tokens)]
        return tokens

    def attention_ms(
        self, source: OperatorSource, n: int, ctx: int, prefills: list[tuple[int, int]]
    ) -> tuple[float, float]:
        """(decode part, prefill part) of one layer's attention."""
        decode = source.decode_attention_ms(n, ctx) if n else 0.0
        parts = [source.prefill_attention_ms(c, p) for c, p in prefills if c > 0]
        prefill = sum(parts)
        kernels = [decode, *parts] if n else parts
        if self.attention == "varlen" and len(kernels) > 1:
            # a part folded in saves one kernel's fixed cost, never more than the smallest
            # part costs on its own: adding rows to a step never makes it cheaper
            launch = float(getattr(source, "attention_launch_ms", lambda: 0.0)())
            saved = (len(kernels) - 1) * min(launch, *kernels)
            prefill = max(prefill - saved, 0.0)
        return decode, prefill


def compose_row(
    source: OperatorSource,
    shape: ModelShape,
    point: Point,
    composition: StepComposition | None = None,
) -> dict[str, Any]:
    """One samples row (median, ``rep = 0``) with its per-component breakdown."""
    step = compose_step(
        source, shape, point.n_decode, point.ctx, [(point.chunk, point.prefix)], composition
    )
    return {
        "n_decode": point.n_decode,
        "chunk": point.chunk,
        "ctx": point.ctx,
        "prefix": point.prefix,
        "ms": step["ms"],
        "energy_j": None,
        "rep": 0,
        **{k: v for k, v in step.items() if k != "ms"},  # MoE rows: op_a2a_ms too
    }


def compose(
    source: OperatorSource,
    shape: ModelShape,
    points: list[Point],
    composition: StepComposition | None = None,
) -> pd.DataFrame:
    """Samples rows for ``points`` (sorted), one median row each."""
    return pd.DataFrame([compose_row(source, shape, p, composition) for p in sorted(points)])


def compose_step(
    source: OperatorSource,
    shape: ModelShape,
    n_decode: int,
    ctx: int,
    prefills: list[tuple[int, int]],
    composition: StepComposition | None = None,
) -> dict[str, Any]:
    """One step with ``n_decode`` decodes at ``ctx`` and several prefills ``(chunk,
    prefix)``: one flattened forward (linear work, pointwise kernels, collectives and
    embedding once over every token), attention as ``composition`` says (default: one
    varlen kernel), the LM head on one row per decode and per prompt."""
    chunks = [c for c, _ in prefills if c > 0]
    tokens = n_decode + sum(chunks)
    if tokens < 1:
        raise ValueError("a step needs n_decode + chunks >= 1")
    layers = shape.n_layers
    composition = composition or StepComposition()
    rows = composition.rows_run(tokens)  # what the flattened forward runs, padding included
    linear, other = source.linear_ms(rows)
    decode, prefill = composition.attention_ms(source, n_decode, ctx, prefills)
    parts = {
        "op_linear_ms": layers * linear,
        "op_other_ms": layers * other,
        "op_attn_decode_ms": layers * decode,
        "op_attn_prefill_ms": layers * prefill,
        "op_comm_ms": allreduces_per_iteration(layers) * source.allreduce_ms(rows, not chunks),
        "op_embed_ms": source.embed_ms(rows),
        "op_head_ms": source.head_ms(n_decode + len(chunks)),
    }
    if shape.is_moe:
        parts["op_a2a_ms"] = layers * _all_to_all_ms(source, rows, not chunks)
    return {"ms": sum(parts.values()), **parts}


def _all_to_all_ms(source: OperatorSource, tokens: int, decode_only: bool) -> float:
    """One MoE layer's dispatch + combine, from a source that prices it (else 0)."""
    price = getattr(source, "all_to_all_ms", None)
    return 0.0 if price is None else float(price(tokens, decode_only))
