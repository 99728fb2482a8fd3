"""Mixture-of-experts MLPs: the routing plan and servecal's own MoE block (docs/profiler.md).

A MoE layer's cost is decided by how many tokens each expert receives, not by the
router's weights, so the routing is a *plan* computed from the shape and the token
count (:func:`tokens_per_expert`), the same for the timed block and for the
importers that compose a layer from operator profiles:

* each of ``T`` tokens goes to ``top_k`` experts: ``T·top_k`` assignments, spread
  over the ``E`` experts by :func:`expert_shares` (uniform, or a Zipf law of
  exponent ``routing_skew``), no expert receiving more than ``T``;
* with expert parallelism ``ep``, rank ``r`` holds experts ``[r·E/ep, (r+1)·E/ep)``;
  under skew rank 0 holds the busiest ones, and a step waits for its busiest rank,
  so rank 0's share is the one timed and priced;
* the ``(ep − 1)/ep`` of the assignments whose expert is on another rank cross the
  all-to-all twice (dispatch and combine): :func:`all_to_all_rows`.

:class:`MoEMLP` runs that plan: the router GEMM (its cost is real; its choice is
replaced by the plan so a timing does not depend on random weights), one SwiGLU per
local expert on its rows, the shared experts on every token, and at ``ep > 1`` the
dispatch and combine. In one process there is no other rank: the all-to-all is
emulated by packing the leaving rows into a send buffer and back (the copies a real
all-to-all makes on each side, without the wire).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from servecal.profiler.shapes import ModelShape


def expert_shares(experts: int, skew: float) -> np.ndarray:
    """Each expert's share of the routed assignments: ``∝ (e + 1)^-skew`` (sum 1)."""
    weights = np.arange(1, experts + 1, dtype=float) ** -float(skew)
    return weights / weights.sum()


def tokens_per_expert(shape: ModelShape, tokens: int) -> np.ndarray:
    """Tokens each expert receives from ``tokens`` tokens (largest-remainder rounding
    of ``tokens·top_k·share``, at most ``tokens`` each: a token picks an expert once)."""
    if not shape.is_moe or tokens <= 0:
        return np.zeros(max(shape.experts, 0), dtype=np.int64)
    total = tokens * shape.top_k
    ideal = np.minimum(expert_shares(shape.experts, shape.routing_skew) * total, tokens)
    counts = np.floor(ideal).astype(np.int64)
    left = total - int(counts.sum())
    order = np.argsort(-(ideal - counts), kind="stable")
    for e in order:  # hand the remainder out, never above ``tokens`` per expert
        if left <= 0:
            break
        if counts[e] < tokens:
            counts[e] += 1
            left -= 1
    i = 0
    while left > 0:  # skew so steep that the top experts are full: spill down the list
        room = tokens - counts[i]
        give = min(room, left)
        counts[i] += give
        left -= give
        i += 1
    return counts


def local_experts(shape: ModelShape, rank: int = 0) -> slice:
    """The experts rank ``rank`` holds at expert-parallel size ``shape.ep``."""
    per = shape.experts // shape.ep
    return slice(rank * per, (rank + 1) * per)


def all_to_all_rows(shape: ModelShape, tokens: int) -> int:
    """Rows (tokens × hidden) one all-to-all moves out of a rank: the assignments of
    its tokens to experts on other ranks (0 at ``ep = 1``)."""
    if not shape.is_moe or shape.ep == 1:
        return 0
    counts = tokens_per_expert(shape, tokens)
    mine = int(counts[local_experts(shape)].sum())
    return int(counts.sum()) - mine


@dataclass(frozen=True)
class MoEWork:
    """What one MoE layer does for ``tokens`` tokens on the busiest rank.

    ``expert_rows``: tokens per local expert; ``shared_rows``: tokens through the
    shared experts; ``ffn_flops``: the experts' GEMM FLOPs (3 matrices of
    ``hidden × expert_intermediate`` per row); ``router_flops``; ``a2a_bytes``: what
    dispatch plus combine move off the rank (0 at EP 1)."""

    tokens: int
    expert_rows: tuple[int, ...]
    shared_rows: int
    ffn_flops: float
    router_flops: float
    a2a_bytes: float


def moe_work(shape: ModelShape, tokens: int, dtype_bytes: int = 2) -> MoEWork:
    """The routing plan's work for ``tokens`` tokens (see the module doc)."""
    rows = tuple(int(c) for c in tokens_per_expert(shape, tokens)[local_experts(shape)])
    shared = tokens * shape.shared_experts
    per_row = 2.0 * 3 * shape.hidden * shape.expert_intermediate
    return MoEWork(
        tokens=tokens,
        expert_rows=rows,
        shared_rows=shared,
        ffn_flops=per_row * (sum(rows) + shared),
        router_flops=2.0 * tokens * shape.hidden * shape.experts,
        a2a_bytes=2.0 * all_to_all_rows(shape, tokens) * shape.hidden * dtype_bytes,
    )


class MoEMLP(nn.Module):
    """A MoE MLP (SwiGLU experts) of one rank, running the routing plan.

    ``shape`` is the rank's share (its ``expert_intermediate`` split by TP like a
    dense MLP's width). ``last_rows`` / ``last_a2a_rows`` record what the previous
    forward ran (expert rows, rows through the all-to-all): the tests read them.
    """

    def __init__(self, shape: ModelShape, **factory: Any) -> None:
        super().__init__()
        self.shape = shape
        h, ei = shape.hidden, shape.expert_intermediate
        n_local = shape.experts // shape.ep
        self.router = nn.Linear(h, shape.experts, bias=False, **factory)
        self.w_gate_up = nn.Parameter(torch.empty(n_local, h, 2 * ei, **factory))
        self.w_down = nn.Parameter(torch.empty(n_local, ei, h, **factory))
        self.shared_gate_up: nn.Linear | None = None
        self.shared_down: nn.Linear | None = None
        if shape.shared_experts:
            width = shape.shared_experts * ei
            self.shared_gate_up = nn.Linear(h, 2 * width, bias=False, **factory)
            self.shared_down = nn.Linear(width, h, bias=False, **factory)
        self.last_rows = 0
        self.last_a2a_rows = 0
        self._plans: dict[int, tuple[list[tuple[int, int]], int]] = {}

    def _plan(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """``[(first token, rows)]`` per local expert and the all-to-all rows (cached)."""
        plan = self._plans.get(tokens)
        if plan is None:
            counts = tokens_per_expert(self.shape, tokens)
            starts = np.concatenate(([0], np.cumsum(counts)))[:-1] % max(tokens, 1)
            local = local_experts(self.shape)
            pairs = [(int(s), int(c)) for s, c in zip(starts[local], counts[local], strict=True)]
            plan = self._plans[tokens] = (pairs, all_to_all_rows(self.shape, tokens))
        return plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[0]
        self.router(x)  # the router GEMM's cost; its choice is the plan's
        pairs, a2a = self._plan(tokens)
        idx_all = torch.arange(max(2 * tokens, a2a), device=x.device) % tokens
        if a2a:  # dispatch: pack the rows bound for other ranks (emulated, one process)
            sent = x.index_select(0, idx_all[:a2a])
        out = torch.zeros_like(x)
        rows = 0
        for e, (start, count) in enumerate(pairs):
            if not count:
                continue
            idx = idx_all[start : start + count]
            gate, up = (x[idx] @ self.w_gate_up[e]).chunk(2, dim=-1)
            out.index_add_(0, idx, (F.silu(gate) * up) @ self.w_down[e])
            rows += count
        if a2a:  # combine: the other ranks' expert outputs (stood in for by the sent
            # rows) come back into a receive buffer and are added to their tokens
            received = torch.empty_like(sent).copy_(sent)
            out.index_add_(0, idx_all[:a2a], received)
        if self.shared_gate_up is not None and self.shared_down is not None:
            gate, up = self.shared_gate_up(x).chunk(2, dim=-1)
            out = out + self.shared_down(F.silu(gate) * up)
        self.last_rows = rows
        self.last_a2a_rows = a2a
        return out
