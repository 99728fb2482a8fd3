"""A decoder-only transformer built from a :class:`ModelShape`, with random weights.

Llama layout: embedding → ``n_layers`` × (RMSNorm → fused QKV → RoPE → grouped-query
attention through ``scaled_dot_product_attention`` → output projection, residual;
RMSNorm → SwiGLU MLP, residual) → final RMSNorm → LM head on the positions that
sample a token. One forward pass runs a whole engine iteration (decode tokens of
many sequences plus prefill chunks, see :mod:`servecal.profiler.kv`).

Tensor parallelism (``collective`` of size ``N > 1``, one process per rank, as
Megatron-LM and vLLM split a Llama): each rank holds ``shape.shard(N)``, i.e. its
query heads and KV heads (KV heads replicated when fewer than ``N``) in a
column-parallel QKV projection, a row-parallel output projection, its slice of
the MLP width in column-parallel gate/up and a row-parallel down projection, and
its slice of the vocabulary in the embedding and the LM head. The partial sums of
the two row-parallel projections are all-reduced (2 per layer), the embedding's
masked lookup too (1 per iteration), and the head's logits are all-gathered.
Norms and RoPE run replicated on every rank.

The pieces are public so that an executor can run part of an iteration: call
:meth:`Transformer.prepare` once, :meth:`Transformer.embed`, then for each layer
``i`` either ``layers[i](x, batch, ictx)`` or its two halves
``layers[i].attention(...)`` and ``layers[i].mlp(...)`` (stop between them and
resume later with the same ``x``), and finally :meth:`Transformer.head`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from servecal.profiler.collective import SINGLE_DEVICE, Collective
from servecal.profiler.kv import DecodeGroup, IterationBatch, PrefillSegment
from servecal.profiler.moe import MoEMLP
from servecal.profiler.oom import is_out_of_memory
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError


def _probe_gqa() -> bool:
    q = torch.zeros(1, 2, 1, 2)
    kv = torch.zeros(1, 1, 1, 2)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except TypeError:  # torch < 2.5
        return False
    return True


_HAS_GQA = _probe_gqa()


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | object | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` with grouped-query K/V (fewer heads than Q)."""
    if _HAS_GQA:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True
        )
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)


@functools.cache
def _causal_lower_right() -> Any:
    # Imported lazily: torch.nn.attention.bias pulls in torch._dynamo (seconds of import).
    try:  # torch >= 2.3: bottom-right-aligned causal mask that flash/efficient kernels accept
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:  # pragma: no cover - older torch
        return None
    return causal_lower_right


def prefill_mask(prefix: int, chunk: int, device: torch.device | str) -> object | None:
    """Causal mask for ``chunk`` queries at positions ``prefix..`` over ``prefix+chunk`` keys.

    On CUDA a lower-right causal bias (keeps the flash/efficient kernels); elsewhere
    an explicit boolean mask.
    """
    if prefix == 0:
        return None  # plain is_causal
    lower_right = _causal_lower_right() if torch.device(device).type == "cuda" else None
    if lower_right is not None:
        return lower_right(chunk, prefix + chunk)
    q_pos = torch.arange(prefix, prefix + chunk, device=device)[:, None]
    return torch.arange(prefix + chunk, device=device)[None, :] <= q_pos


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **factory))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[tokens, heads, head_dim]`` by per-token angles (half-split layout)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@dataclass
class IterationContext:
    """Per-iteration tensors shared by every layer (computed once by ``prepare``)."""

    cos: torch.Tensor  # [tokens, 1, head_dim/2]
    sin: torch.Tensor
    logit_rows: torch.Tensor  # token rows whose logits the head computes
    prefill_masks: list[object | None]
    # [n, 1, 1, Lmax] when decode lengths differ; the torch executor keeps one per
    # length bucket (sched/torch_executor/pool.py: length_buckets)
    decode_mask: torch.Tensor | list[torch.Tensor | None] | None


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class DecoderLayer(nn.Module):
    """One transformer block of one rank; ``index`` selects its K/V in the pools.

    ``shape`` is this rank's share (:meth:`ModelShape.shard`); ``reduce`` sums the
    row-parallel projections' partial outputs over the ranks (identity at TP 1).
    """

    def __init__(
        self,
        shape: ModelShape,
        index: int,
        reduce: Callable[[torch.Tensor], torch.Tensor] = _identity,
        **factory: Any,
    ) -> None:
        super().__init__()
        self.shape = shape
        self.index = index
        self.reduce = reduce
        hidden, eps = shape.hidden, shape.norm_eps
        self.attn_norm = RMSNorm(hidden, eps, **factory)
        self.wqkv = nn.Linear(hidden, shape.q_dim + 2 * shape.kv_dim, bias=False, **factory)
        self.wo = nn.Linear(shape.q_dim, hidden, bias=False, **factory)
        self.mlp_norm = RMSNorm(hidden, eps, **factory)
        self.moe: MoEMLP | None = None
        if shape.is_moe:  # router + experts instead of one MLP (profiler/moe.py)
            self.moe = MoEMLP(shape, **factory)
        else:
            self.w_gate_up = nn.Linear(hidden, 2 * shape.intermediate, bias=False, **factory)
            self.w_down = nn.Linear(shape.intermediate, hidden, bias=False, **factory)

    def qkv(
        self, x: torch.Tensor, ictx: IterationContext
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Normed QKV projection with RoPE: ``q [t, heads, d]``, ``k, v [t, kv_heads, d]``.

        Shared by this contiguous-KV attention and the torch executor's paged one."""
        s = self.shape
        qkv = self.wqkv(self.attn_norm(x))
        q, k, v = qkv.split((s.q_dim, s.kv_dim, s.kv_dim), dim=-1)
        q = apply_rope(q.view(-1, s.n_heads, s.head_dim), ictx.cos, ictx.sin)
        k = apply_rope(k.view(-1, s.n_kv_heads, s.head_dim), ictx.cos, ictx.sin)
        return q, k, v.view(-1, s.n_kv_heads, s.head_dim)

    def attention(
        self, x: torch.Tensor, batch: IterationBatch, ictx: IterationContext
    ) -> torch.Tensor:
        """Attention half: writes this iteration's K/V into the pools, returns ``x + attn``."""
        q, k, v = self.qkv(x, ictx)
        outs = []
        start = 0
        if batch.decode is not None:
            n = batch.decode.n
            outs.append(self._decode(q[:n], k[:n], v[:n], batch.decode, ictx.decode_mask))
            start = n
        for seg, mask in zip(batch.prefills, ictx.prefill_masks, strict=True):
            end = start + seg.chunk
            outs.append(self._prefill(q[start:end], k[start:end], v[start:end], seg, mask))
            start = end
        attn = outs[0] if len(outs) == 1 else torch.cat(outs)
        return x + self.reduce(self.wo(attn))

    def _decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        group: DecodeGroup,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        pk, pv = group.pool.k[self.index], group.pool.v[self.index]
        run = group.contiguous
        if run is not None and group.uniform:
            length = group.lengths[0]
            pk[run, :, length] = k
            pv[run, :, length] = v
            keys, values = pk[run, :, : length + 1], pv[run, :, : length + 1]
        else:  # ragged or scattered slots: index (a copy), pad to the longest, mask
            slots = torch.as_tensor(list(group.slots), device=q.device)
            lengths = torch.as_tensor(list(group.lengths), device=q.device)
            pk[slots, :, lengths] = k
            pv[slots, :, lengths] = v
            longest = max(group.lengths) + 1
            keys, values = pk[slots, :, :longest], pv[slots, :, :longest]
        out = sdpa(q.unsqueeze(2), keys, values, mask=mask)  # [n, heads, 1, head_dim]
        return out.reshape(q.shape[0], -1)

    def _prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        seg: PrefillSegment,
        mask: object | None,
    ) -> torch.Tensor:
        pk, pv = seg.pool.k[self.index], seg.pool.v[self.index]
        end = seg.prefix + seg.chunk
        pk[seg.slot, :, seg.prefix : end] = k.transpose(0, 1)
        pv[seg.slot, :, seg.prefix : end] = v.transpose(0, 1)
        keys = pk[seg.slot : seg.slot + 1, :, :end]
        values = pv[seg.slot : seg.slot + 1, :, :end]
        qh = q.transpose(0, 1).unsqueeze(0)  # [1, heads, chunk, head_dim]
        out = sdpa(qh, keys, values, mask=mask, is_causal=mask is None)
        return out[0].transpose(0, 1).reshape(seg.chunk, -1)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """MLP half (SwiGLU, or the MoE block): returns ``x + mlp``."""
        if self.moe is not None:
            return x + self.reduce(self.moe(self.mlp_norm(x)))
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.reduce(self.w_down(F.silu(gate) * up))

    def forward(
        self, x: torch.Tensor, batch: IterationBatch, ictx: IterationContext
    ) -> torch.Tensor:
        return self.mlp(self.attention(x, batch, ictx))


class Transformer(nn.Module):
    """Embedding, ``len(layers)`` decoder layers (may be fewer than the shape's), head.

    ``shape`` is the whole model's; ``local`` is this rank's share of it (the same
    at TP 1), which sizes the layers and the KV pools (``KVPool(model.local, ...)``).
    """

    def __init__(
        self,
        shape: ModelShape,
        n_layers: int,
        collective: Collective = SINGLE_DEVICE,
        **factory: Any,
    ) -> None:
        super().__init__()
        self.shape = shape
        self.collective = collective
        self.local = local = shape.shard(collective.size)
        reduce = collective.all_reduce if collective.size > 1 else _identity
        self.embedding = nn.Embedding(local.vocab, shape.hidden, **factory)
        self.layers = nn.ModuleList(
            DecoderLayer(local, i, reduce, **factory) for i in range(n_layers)
        )
        self.norm = RMSNorm(shape.hidden, shape.norm_eps, **factory)
        self.lm_head = nn.Linear(shape.hidden, local.vocab, bias=False, **factory)
        half = shape.head_dim // 2
        exponents = torch.arange(half, dtype=torch.float64) / half
        inv_freq = (1.0 / shape.rope_theta**exponents).float().to(factory.get("device"))
        # Kept in float32 whatever the weights' dtype: angles need the precision.
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def prepare(self, batch: IterationBatch) -> IterationContext:
        """Rotary angles, causal masks and logit rows for ``batch`` (shared by all layers)."""
        dev = self.device
        angles = batch.positions(dev).float()[:, None] * self.inv_freq[None, :]
        cos = angles.cos().to(self.dtype).unsqueeze(1)
        sin = angles.sin().to(self.dtype).unsqueeze(1)
        rows = list(range(batch.n_decode))
        end = batch.n_decode
        for seg in batch.prefills:
            end += seg.chunk
            rows.append(end - 1)
        decode_mask = None
        group = batch.decode
        if group is not None and not (group.contiguous is not None and group.uniform):
            lengths = torch.as_tensor(list(group.lengths), device=dev)
            keys = torch.arange(max(group.lengths) + 1, device=dev)
            decode_mask = (keys[None, :] <= lengths[:, None])[:, None, None, :]
        return IterationContext(
            cos=cos,
            sin=sin,
            logit_rows=torch.as_tensor(rows, device=dev),
            prefill_masks=[prefill_mask(p.prefix, p.chunk, dev) for p in batch.prefills],
            decode_mask=decode_mask,
        )

    @property
    def tp(self) -> int:
        return self.collective.size

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``[tokens, hidden]`` (vocabulary-parallel at TP > 1: each
        rank looks up the ids in its slice, zeros for the others, then all-reduce)."""
        if self.tp == 1:
            return self.embedding(tokens)
        ids = tokens - self.collective.rank * self.local.vocab
        outside = (ids < 0) | (ids >= self.local.vocab)
        x = self.embedding(ids.masked_fill(outside, 0)).masked_fill_(outside[:, None], 0.0)
        return self.collective.all_reduce(x)

    def run_layers(
        self,
        x: torch.Tensor,
        batch: IterationBatch,
        ictx: IterationContext,
        start: int = 0,
        stop: int | None = None,
    ) -> torch.Tensor:
        """Layers ``[start, stop)`` in order."""
        for layer in self.layers[start:stop]:
            x = layer(x, batch, ictx)
        return x

    def head(self, x: torch.Tensor, ictx: IterationContext) -> torch.Tensor:
        """Logits ``[n_logits, vocab]`` for the rows that sample a token (each rank
        computes its vocabulary slice; at TP > 1 they are all-gathered, as in vLLM)."""
        logits = self.lm_head(self.norm(x[ictx.logit_rows]))
        return logits if self.tp == 1 else self.collective.all_gather(logits)

    def forward(self, tokens: torch.Tensor, batch: IterationBatch) -> torch.Tensor:
        ictx = self.prepare(batch)
        return self.head(self.run_layers(self.embed(tokens), batch, ictx), ictx)


def default_dtype(device: torch.device | str) -> torch.dtype:
    """bf16 on CUDA, float32 elsewhere (CPU bf16 GEMMs are slow on most hosts)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def build_model(
    shape: ModelShape,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    n_layers: int | None = None,
    seed: int = 0,
    collective: Collective = SINGLE_DEVICE,
) -> Transformer:
    """A :class:`Transformer` for ``shape`` with ``n_layers`` (default all) random layers.

    Weights are drawn from a seeded generator on ``device`` (N(0, 0.02), norms at 1),
    so builds are reproducible; the model is in eval mode with gradients off. With a
    ``collective`` of size ``N > 1`` this is its rank's shard (see the module doc);
    to give the ranks one model's weights, :func:`shard_state_dict` a full model's.
    """
    n_layers = shape.n_layers if n_layers is None else n_layers
    if not 1 <= n_layers <= shape.n_layers:
        raise ValueError(f"n_layers must be in [1, {shape.n_layers}], got {n_layers}")
    dtype = default_dtype(device) if dtype is None else dtype
    keep_attention_off_cudnn(device)
    # Built directly on the device in its dtype (a 70B layer does not fit a CPU detour).
    try:
        model = Transformer(shape, n_layers, collective, device=device, dtype=dtype)
    except (RuntimeError, MemoryError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise InputError(
            f"model shape {shape.name!r}: {n_layers} layer(s) of it do not fit in {device}'s "
            f"memory ({_first_line(exc)}); choose a smaller shape or fewer --layers"
        ) from None
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.normal_(0.0, 0.02, generator=gen)
    return model.eval().requires_grad_(False)


def keep_attention_off_cudnn(device: torch.device | str) -> None:
    """On CUDA, take cuDNN's kernel out of the ``scaled_dot_product_attention`` choice.

    cuDNN builds an execution graph for each new input shape before it runs (hundreds
    of milliseconds; SGLang's cuDNN backend measured ~400 ms) and caches it. The
    profiler repeats one shape per point, but the torch executor's masked decode
    attention meets a new shape nearly every iteration (contexts grow a token a step,
    buckets regroup): on an H200 (torch 2.11) a 40-request run spent all of 150 s
    inside that call (docs/results/2026-12-04-gpu-h200.md). Flash, memory-efficient
    and math kernels take any shape at no set-up cost. Process-wide by torch's design;
    only the profiler's and the executor's own processes build this model.
    """
    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__


def _kv_heads_of_rank(shape: ModelShape, tp: int, rank: int) -> slice:
    """The KV heads rank ``rank`` holds: its ``1/tp`` slice, or the one it replicates."""
    if shape.n_kv_heads >= tp:
        per = shape.n_kv_heads // tp
        return slice(rank * per, (rank + 1) * per)
    head = rank // (tp // shape.n_kv_heads)
    return slice(head, head + 1)


def shard_state_dict(
    full: Mapping[str, torch.Tensor], shape: ModelShape, tp: int, rank: int
) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s slices of a TP-1 model's parameters, for ``load_state_dict``.

    Column-parallel weights (QKV, gate/up, embedding and LM head rows) keep the
    rank's output rows; row-parallel ones (output and down projections) its input
    columns; norms are replicated. With them a TP ``tp`` forward computes what
    the TP-1 model does (a test checks it over gloo).
    """
    local, hd = shape.shard(tp), shape.head_dim
    heads = slice(rank * local.n_heads * hd, (rank + 1) * local.n_heads * hd)
    kv = _kv_heads_of_rank(shape, tp, rank)
    kv_rows = slice(kv.start * hd, kv.stop * hd)
    mlp = slice(rank * local.intermediate, (rank + 1) * local.intermediate)
    vocab = slice(rank * local.vocab, (rank + 1) * local.vocab)
    out: dict[str, torch.Tensor] = {}
    for name, w in full.items():
        if name.endswith("wqkv.weight"):
            q, k, v = w.split((shape.q_dim, shape.kv_dim, shape.kv_dim))
            part = torch.cat((q[heads], k[kv_rows], v[kv_rows]))
        elif name.endswith("wo.weight"):
            part = w[:, heads]
        elif name.endswith("w_gate_up.weight"):
            gate, up = w.chunk(2)
            part = torch.cat((gate[mlp], up[mlp]))
        elif name.endswith("w_down.weight"):
            part = w[:, mlp]
        elif name in ("embedding.weight", "lm_head.weight"):
            part = w[vocab]
        else:  # norms: every rank holds them whole
            part = w
        out[name] = part.clone()
    return out
