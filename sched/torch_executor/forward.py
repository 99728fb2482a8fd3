"""One engine iteration as a real forward pass over the paged pool, stoppable per operator.

The weights and the pieces of a layer are the profiler's
(:mod:`servecal.profiler.model`: norms, fused QKV, RoPE, grouped-query ``sdpa``,
output projection, SwiGLU MLP, head); only where K/V live differs, so attention
is re-assembled here around the paged pool: new K/V are written to their flat
slots, a decode group's keys are read from a per-layer contiguous view of that
group (:class:`~servecal.sched.torch_executor.pool.DecodeView`: gathered block by
block through the block tables once, then appended one token per step while the
same group decodes), in *length buckets* (:func:`length_buckets`: rows of similar
length share one attention call, padded to their widest and masked, so the work
grows with the group's total context as a paged-attention kernel's does, not with
``n × longest``); a prefill chunk's keys are its prefix plus itself with the
profiler's causal mask.

A forward pass is a list of *operators*, two per layer (attention, MLP: the
boundaries FlowPrefill preempts at). :class:`ForwardRun` executes them in order
and can stop at any boundary — when its :class:`StopSignal` has been raised — and
resume later from the saved hidden state; the K/V written by the layers already
run stay in the pool. Each call is timed exactly like calibration
(:mod:`servecal.profiler.timing`: the embed, layers and head segments on the
profiler's clocks, layers scaled by :class:`~servecal.profiler.timing.LayerScale`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from servecal.profiler.model import (
    DecoderLayer,
    IterationContext,
    Transformer,
    prefill_mask,
    sdpa,
)
from servecal.profiler.timing import CpuClock, CudaClock, LayerScale
from servecal.sched.torch_executor.pool import DecodeView, PagedKVPool

#: Operators of one layer, in order (FlowPrefill's default granularity).
LAYER_OPERATORS = ("attention", "mlp")


@dataclass
class PagedBatch:
    """One iteration on the pool: decodes, then prefill chunks, in token order.

    ``decode_lengths[i]``: tokens request ``decode_rids[i]`` holds before this step
    (its new token goes at that position). ``prefills``: ``(rid, prefix, chunk)``.
    The pool must already have blocks for every position written here.
    """

    pool: PagedKVPool
    decode_rids: list[int]
    decode_lengths: list[int]
    prefills: list[tuple[int, int, int]]
    tokens: torch.Tensor  # input ids, decode tokens first

    write_slots: torch.Tensor = field(init=False)
    decode_width: int = field(init=False, default=0)  # keys per decode row (blocks × size)
    decode_positions: torch.Tensor | None = field(init=False, default=None)  # new tokens' slots
    decode_rows: torch.Tensor | None = field(init=False, default=None)  # 0..n_decode-1
    prefill_blocks: list[torch.Tensor] = field(init=False, default_factory=list)
    decode_buckets: list[tuple[int, int, int]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if len(self.decode_rids) != len(self.decode_lengths):
            raise ValueError("PagedBatch needs one decode length per decoding request")
        if not self.decode_rids and not self.prefills:
            raise ValueError("an iteration needs at least one decode or prefill token")
        if self.tokens.numel() != self.n_tokens:
            raise ValueError(f"PagedBatch: {self.tokens.numel()} tokens for {self.n_tokens}")
        pool, dev = self.pool, self.pool.k.device
        slots: list[int] = []
        for rid, length in zip(self.decode_rids, self.decode_lengths, strict=True):
            slots += pool.slots(rid, length, length + 1)
        for rid, prefix, chunk in self.prefills:
            slots += pool.slots(rid, prefix, prefix + chunk)
            blocks, _ = pool.padded_blocks([rid], [prefix + chunk])
            self.prefill_blocks.append(blocks)
        self.write_slots = torch.tensor(slots, dtype=torch.long, device=dev)
        if self.decode_rids:
            lengths = [n + 1 for n in self.decode_lengths]
            bs = pool.block_size  # keys per row: the widest request's blocks
            self.decode_width = max(-(-n // bs) for n in lengths) * bs
            self.decode_positions = torch.tensor(self.decode_lengths, dtype=torch.long, device=dev)
            self.decode_rows = torch.arange(len(self.decode_rids), device=dev)
            self.decode_buckets = pool.cached_buckets(tuple(self.decode_rids), lengths)

    @property
    def n_decode(self) -> int:
        return len(self.decode_rids)

    @property
    def chunk(self) -> int:
        return sum(c for _, _, c in self.prefills)

    @property
    def n_tokens(self) -> int:
        return self.n_decode + self.chunk

    def positions(self) -> torch.Tensor:
        parts = [torch.tensor(self.decode_lengths, dtype=torch.long)]
        parts += [torch.arange(p, p + c, dtype=torch.long) for _, p, c in self.prefills]
        return torch.cat(parts)


def prepare(model: Transformer, batch: PagedBatch) -> IterationContext:
    """Rotary angles, masks and logit rows for ``batch`` (the profiler's ``prepare``)."""
    dev = model.device
    angles = batch.positions().to(dev).float()[:, None] * model.inv_freq[None, :]
    cos = angles.cos().to(model.dtype).unsqueeze(1)
    sin = angles.sin().to(model.dtype).unsqueeze(1)
    rows = list(range(batch.n_decode))
    end = batch.n_decode
    for _, _, chunk in batch.prefills:
        end += chunk
        rows.append(end - 1)
    decode_masks: list[torch.Tensor | None] = []
    for start, stop, width in batch.decode_buckets:  # mask past each row's own length
        lengths = batch.decode_lengths[start:stop]
        if min(lengths) + 1 == width:
            decode_masks.append(None)
            continue
        keys = torch.arange(width, device=dev)
        held = torch.tensor(lengths, device=dev)
        # additive (0 / −inf) once per iteration: a boolean mask is converted in
        # every layer's attention call
        allowed = (keys[None, :] <= held[:, None])[:, None, None, :]
        additive = torch.zeros(allowed.shape, dtype=model.dtype, device=dev)
        decode_masks.append(additive.masked_fill_(~allowed, float("-inf")))
    return IterationContext(
        cos=cos,
        sin=sin,
        logit_rows=torch.tensor(rows, device=dev),
        prefill_masks=[prefill_mask(p, c, dev) for _, p, c in batch.prefills],
        decode_mask=decode_masks,  # one per length bucket (None: no padding)
    )


#: Spare key positions per row of a fresh :class:`DecodeView` (decode steps it can
#: append before the group's widest request outgrows it and it is gathered again).
DECODE_VIEW_SLACK = 256


def decode_keys(
    batch: PagedBatch, layer: int, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode group's keys and values ``[n, kv_heads, decode_width, head_dim]``.

    ``k, v [n, kv_heads, head_dim]`` are this step's, already written to the pool.
    When the layer's :class:`DecodeView` holds this same group at these lengths they
    are appended to it; when the group changed (a request joined, finished or was
    preempted) the view is rebuilt by :func:`rebuild_view`, which copies the rows of
    requests it already held and gathers only the newcomers' blocks.
    """
    pool, width = batch.pool, batch.decode_width
    assert batch.decode_positions is not None
    view = pool.decode_views.get(layer)
    if view is None or not view.matches(tuple(batch.decode_rids), batch.decode_lengths, width):
        view = pool.decode_views[layer] = rebuild_view(batch, layer, view)
    view.k[batch.decode_rows, :, batch.decode_positions] = k
    view.v[batch.decode_rows, :, batch.decode_positions] = v
    view.lengths = [length + 1 for length in batch.decode_lengths]
    return view.k[:, :, :width], view.v[:, :, :width]


def rebuild_view(batch: PagedBatch, layer: int, old: DecodeView | None) -> DecodeView:
    """A :class:`DecodeView` of ``batch``'s decode group for ``layer`` (this step's token
    not yet appended). A request ``old`` holds at the same length is *carried*: its
    row's positions are copied from ``old`` (contiguous memory); the others are
    *fresh*: their blocks are gathered from the pool (whole ``block_size × head_dim`` rows of a
    ``[heads, blocks, size × hd]`` view: a 4-D ``index_select`` takes a much slower
    path). The new view lives in the other of two buffers, so ``old`` stays readable
    while it is copied."""
    pool, n, width = batch.pool, batch.n_decode, batch.decode_width
    pk, pv = pool.k[layer], pool.v[layer]  # [kv_heads, blocks, size, head_dim]
    heads, blocks, size, hd = pk.shape
    held: dict[int, tuple[int, int]] = {}
    if old is not None and len(old.lengths) == len(old.rids):
        held = {r: (i, m) for i, (r, m) in enumerate(zip(old.rids, old.lengths, strict=True))}
    carry_src, carry_dst, fresh = [], [], []
    for i, (rid, length) in enumerate(zip(batch.decode_rids, batch.decode_lengths, strict=True)):
        row = held.get(rid)
        if row is not None and row[1] == length:
            carry_src.append(row[0])
            carry_dst.append(i)
        else:
            fresh.append(i)
    parity = 1 - old.parity if old is not None else 0
    capacity = width + DECODE_VIEW_SLACK
    view_k = pool.view_buffer("k", layer, parity, (n, heads, capacity, hd))
    view_v = pool.view_buffer("v", layer, parity, (n, heads, capacity, hd))
    # Row by row, each request's own length only: a group padded to its widest
    # request would copy n × longest positions where the rows hold Σ lengths.
    for src, dst in zip(carry_src, carry_dst, strict=True):
        assert old is not None
        held_len = batch.decode_lengths[dst]
        view_k[dst, :, :held_len] = old.k[src, :, :held_len]
        view_v[dst, :, :held_len] = old.v[src, :, :held_len]
    rows_k, rows_v = pk.view(heads, blocks, size * hd), pv.view(heads, blocks, size * hd)
    for i in fresh:
        table, wide = pool.padded_blocks([batch.decode_rids[i]], [batch.decode_lengths[i] + 1])
        shape = (heads, wide, size * hd)
        keys = torch.index_select(rows_k, 1, table, out=pool.scratch("k", shape))
        vals = torch.index_select(rows_v, 1, table, out=pool.scratch("v", shape))
        view_k[i, :, : wide * size] = keys.view(heads, wide * size, hd)
        view_v[i, :, : wide * size] = vals.view(heads, wide * size, hd)
    return DecodeView(tuple(batch.decode_rids), [], view_k, view_v, parity)


def paged_attention(
    layer: DecoderLayer, x: torch.Tensor, batch: PagedBatch, ictx: IterationContext
) -> torch.Tensor:
    """The profiler's attention half with K/V in the paged pool; returns ``x + attn``."""
    q, k, v = layer.qkv(x, ictx)
    pool = batch.pool
    pk, pv = pool.k[layer.index], pool.v[layer.index]  # [kv_heads, blocks, size, head_dim]
    heads, blocks, size, hd = pk.shape
    pk.view(heads, blocks * size, hd).index_copy_(1, batch.write_slots, k.transpose(0, 1))
    pv.view(heads, blocks * size, hd).index_copy_(1, batch.write_slots, v.transpose(0, 1))
    # Gather whole blocks from a [heads, blocks, size × hd] view: rows of size × hd
    # elements copy at memory speed (a 4-D index_select takes a much slower path).
    rows_k, rows_v = pk.view(heads, blocks, size * hd), pv.view(heads, blocks, size * hd)
    outs = []
    n = batch.n_decode
    if batch.decode_rids:
        keys, vals = decode_keys(batch, layer.index, k[:n], v[:n])
        for (start, stop, width), mask in zip(batch.decode_buckets, ictx.decode_mask, strict=True):
            rows = slice(start, stop)
            out = sdpa(q[rows].unsqueeze(2), keys[rows, :, :width], vals[rows, :, :width], mask)
            outs.append(out.reshape(stop - start, -1))
    start = n
    for (_, prefix, chunk), blocks, mask in zip(
        batch.prefills, batch.prefill_blocks, ictx.prefill_masks, strict=True
    ):
        if prefix == 0:  # the chunk's own K/V are all its keys: no gather needed
            keys = k[start : start + chunk].transpose(0, 1).unsqueeze(0)
            vals = v[start : start + chunk].transpose(0, 1).unsqueeze(0)
        else:
            end, shape = prefix + chunk, (heads, blocks.numel(), size * hd)
            keys = torch.index_select(rows_k, 1, blocks, out=pool.scratch("pk", shape))
            vals = torch.index_select(rows_v, 1, blocks, out=pool.scratch("pv", shape))
            keys = keys.view(heads, -1, hd)[:, :end].unsqueeze(0)
            vals = vals.view(heads, -1, hd)[:, :end].unsqueeze(0)
        qh = q[start : start + chunk].transpose(0, 1).unsqueeze(0)  # [1, heads, chunk, hd]
        out = sdpa(qh, keys, vals, mask=mask, is_causal=mask is None)
        outs.append(out[0].transpose(0, 1).reshape(chunk, -1))
        start += chunk
    attn = outs[0] if len(outs) == 1 else torch.cat(outs)
    return x + layer.wo(attn)


class StopSignal:
    """A request to stop a running forward pass at its next operator boundary.

    ``request()`` may come from any thread; it is stamped with ``perf_counter_ns`` so
    the run can measure how long the request was blocked by the operator in flight.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at_ns: int | None = None

    def request(self) -> None:
        with self._lock:
            if self._at_ns is None:
                self._at_ns = time.perf_counter_ns()

    def take(self) -> int | None:
        """The request's timestamp (and clear it), or ``None`` when none is pending."""
        with self._lock:
            at, self._at_ns = self._at_ns, None
            return at

    @property
    def pending(self) -> bool:
        return self._at_ns is not None


class ForwardRun:
    """One iteration's forward pass, run operator by operator (see module doc)."""

    def __init__(
        self,
        model: Transformer,
        batch: PagedBatch,
        clock: CpuClock | CudaClock,
        scale: LayerScale,
    ) -> None:
        self.model = model
        self.batch = batch
        self.clock = clock
        self.scale = scale
        self.ops = [(i, op) for i in range(len(model.layers)) for op in LAYER_OPERATORS]
        self.next_op = 0
        self.hidden: torch.Tensor | None = None  # the saved state between calls
        self.logits: torch.Tensor | None = None
        self.segments = [0.0, 0.0, 0.0]  # embed, layers, head (ms), summed over calls
        self.blocking_ms: list[float] = []  # one per stop: request → boundary reached
        self.stops = 0
        self._ictx: IterationContext | None = None

    @property
    def done(self) -> bool:
        return self.logits is not None

    @property
    def duration_ms(self) -> float:
        """Whole-model time of the work run so far (layers scaled like calibration)."""
        return self.scale.estimate(self.segments)

    def run(
        self,
        stop: StopSignal | None = None,
        on_operator: Callable[[int], None] | None = None,
    ) -> bool:
        """Run operators until the pass is done (True) or ``stop`` is raised (False).

        ``stop`` is checked at every operator boundary; ``on_operator(k)`` is called
        just before operator ``k`` starts (a hook for tests and drivers).
        """
        if self.done:
            return True
        model, clock = self.model, self.clock
        labels: list[int] = []
        with torch.inference_mode():
            clock.start()
            if self.hidden is None:
                self._ictx = prepare(model, self.batch)
                self.hidden = model.embed(self.batch.tokens)
                clock.mark()
                labels.append(0)
            x, ictx, layers = self.hidden, self._ictx, model.layers
            assert ictx is not None
            stopped_at: int | None = None
            boundary_ns = 0
            while self.next_op < len(self.ops):
                if stop is not None and stop.pending:
                    if x.device.type == "cuda":  # the boundary must be reached on the device
                        torch.cuda.synchronize(x.device)
                    boundary_ns = time.perf_counter_ns()
                    stopped_at = stop.take()
                    break
                if on_operator is not None:
                    on_operator(self.next_op)
                index, op = self.ops[self.next_op]
                layer = layers[index]
                x = (
                    paged_attention(layer, x, self.batch, ictx)
                    if op == "attention"
                    else layer.mlp(x)
                )
                self.next_op += 1
            self.hidden = x
            clock.mark()
            labels.append(1)
            if self.next_op == len(self.ops) and stopped_at is None:
                self.logits = model.head(x, ictx)
                labels.append(2)
            else:
                labels.append(1)  # an empty tail: the stop itself
            for label, ms in zip(labels, clock.stop(), strict=True):
                self.segments[label] += ms
        if stopped_at is not None:
            self.stops += 1
            self.blocking_ms.append((boundary_ns - stopped_at) / 1e6)
            return False
        return True
