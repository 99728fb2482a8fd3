"""``prefix-affinity``: route a request where its prompt prefix is already in KV.

The idea of llm-d's prefix-cache scorer on servecal's replicas, each with its own
prefix cache (docs/prefix_cache.md): a request goes to the replica holding the
longest run of its leading blocks, unless that replica's predicted TTFT (the
``predicted-latency`` router's bound, on the prompt left after the cached part)
breaks the request's TTFT SLO; then, and when no replica holds any of its blocks,
to the least loaded one (fewest queued prompt tokens, then fewest requests).

A replica "holds" a block when its cache has it, or when the router sent it a
request with that block that may not be prefilled yet (the router remembers the
replica it last sent each block to): so the next turn of a conversation follows the
previous one even while the previous one is still queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from servecal.sched.cluster.replica import Replica
from servecal.sched.cluster.routers import PredictedLatency
from servecal.sched.prefix_cache import chain_keys
from servecal.sched.request import Request

_BY_TOKENS = attrgetter("by_tokens")  # (queued prompt tokens, outstanding, index)


def _held_run(keys: tuple[int, ...], replica: Replica, sent: dict[int, int]) -> int:
    """Leading blocks of ``keys`` the replica holds: cached, or last sent there."""
    cache = replica.engine.prefix_cache
    n = 0
    for key in keys:
        if sent.get(key) == replica.index or (cache is not None and key in cache):
            n += 1
        else:
            break
    return n


@dataclass
class PrefixAffinity:
    """See the module docstring; ``chunk``, ``quantile``, ``use_margin``: the TTFT
    bound's, as :class:`~servecal.sched.cluster.routers.PredictedLatency`'s."""

    chunk: int = 512
    quantile: float = 0.99
    use_margin: bool = True
    ttft_share: float = 1.0
    _latency: PredictedLatency = field(init=False, repr=False)
    _sent: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.ttft_share <= 1:
            raise ValueError("ttft_share must be in (0, 1]")
        self._latency = PredictedLatency(self.chunk, self.quantile, self.use_margin)

    def route(self, request: Request, replicas: Sequence[Replica]) -> int:
        keys = _keys(request)
        least = min(replicas, key=_BY_TOKENS)
        chosen = self._affine(request, keys, replicas, least) if keys else None
        if chosen is None:
            chosen = least
        for key in keys:
            self._sent[key] = chosen.index
        return chosen.index

    def _predict(self, request: Request, replica: Replica, blocks: int) -> tuple[float, float]:
        """Predicted (TTFT, TPOT) of ``request`` on ``replica`` with ``blocks`` cached."""
        rest = max(1, request.prompt_tokens - blocks * request.block_size)
        return self._latency.predict(replace(request, prompt_tokens=rest), replica)

    def _affine(
        self,
        request: Request,
        keys: tuple[int, ...],
        replicas: Sequence[Replica],
        least: Replica,
    ) -> Replica | None:
        """The replica holding the longest run of ``keys`` (ties: the least loaded) if it
        is predicted to meet its TPOT SLO and its TTFT SLO (``ttft_share`` of it), the
        latter no later than the least loaded replica would with what that one holds;
        else None."""
        best: Any = None
        best_key: tuple[int, tuple[int, int, int]] | None = None
        for r in replicas:
            n = _held_run(keys, r, self._sent)
            key = (-n, _BY_TOKENS(r))
            if n and (best_key is None or key < best_key):
                best, best_key = r, key
        if best is None or best_key is None or best is least:
            return None
        ttft, tpot = self._predict(request, best, -best_key[0])
        if ttft > self.ttft_share * request.ttft_slo_ms or tpot > request.tpot_slo_ms:
            return None
        there, _ = self._predict(request, least, _held_run(keys, least, self._sent))
        return best if ttft <= there else None


def _keys(request: Request) -> tuple[int, ...]:
    full = min(len(request.block_ids), request.prompt_tokens // request.block_size)
    return chain_keys(request.block_ids, full) if full else ()
