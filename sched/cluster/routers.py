"""The built-in routers: ``route(request, replicas) -> int`` (docs/capacity.md).

A router is called once per request, at its arrival, with the replicas it may use
(all of them, or its SLO tier's with SLO-class routing) and returns the chosen one's
``index``. It reads only what a real gateway could know at that moment: each
replica's outstanding requests, its queued prompt tokens, its decoding batch and its
cost table; never output lengths. A fresh router is built for every run, so it may
keep state (round-robin's turn). Names resolve through the policy registry
(``sched/policies/registry.py``); ``module:Class`` loads a user's router, its
constructor's keyword arguments being its options.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, ClassVar

from servecal.sched.cluster.replica import Replica
from servecal.sched.request import Request

# the load keys, read in C: routers scan every replica they may use at every arrival,
# so each replica keeps its keys as tuples (``(outstanding, index)``, ``(queued prompt
# tokens, outstanding, index)``), rebuilt when its load moves, not at every scan
_BY_REQUESTS = attrgetter("by_requests")
_BY_TOKENS = attrgetter("by_tokens")


@dataclass
class RoundRobin:
    """Each request to the next replica in turn (of those it may use)."""

    #: It reads no replica's state, so the cluster routes every request up front.
    reads_replicas: ClassVar[bool] = False

    _turn: int = field(default=0, init=False, repr=False)

    def route(self, request: Request, replicas: Sequence[Replica]) -> int:
        chosen = replicas[self._turn % len(replicas)]
        self._turn += 1
        return chosen.index


@dataclass(frozen=True)
class LeastRequests:
    """The replica with the fewest outstanding requests (ties: the lowest index)."""

    def route(self, request: Request, replicas: Sequence[Replica]) -> int:
        return min(replicas, key=_BY_REQUESTS).index


@dataclass(frozen=True)
class LeastTokens:
    """The replica with the fewest queued prompt tokens, then the fewest requests."""

    def route(self, request: Request, replicas: Sequence[Replica]) -> int:
        return min(replicas, key=_BY_TOKENS).index


def _learns(predictor: Any) -> bool:
    """Whether ``predictor`` learns online (its answers move: nothing is cached)."""
    return callable(getattr(predictor, "observe", None))


def _decoding_with(replica: Replica) -> int:
    """Requests decoding once everything routed to ``replica`` and the new one do:
    ``n + m + 1``."""
    return max(replica.n_decode, replica.outstanding) + 1


@dataclass(frozen=True)
class PredictedLatency:
    """Where the replica's cost table predicts the request meets its TTFT and TPOT
    (the llm-d gateway's predicted-latency idea, on calibrated P99 + margin).

    For each replica, with ``n`` requests decoding, ``m`` more routed to it and not yet
    decoding (prefilling or queued) and ``Q`` prompt tokens queued, at mean context
    ``ctx``, and ``T(n, c) = P_q + δ`` of an iteration with ``n`` decodes and a chunk of
    ``c``:

    * TPOT ≈ ``T(n + m + 1, min(chunk, Q))``: the iterations it will decode in, once
      everything admitted decodes beside the next chunk;
    * TTFT ≈ wait for the current iteration + ``⌈(Q + prompt) / chunk⌉ · T(n, chunk)``:
      the queue ahead of it and its own prompt, prefilled ``chunk`` tokens per iteration.

    The replicas are tried least loaded first (fewest queued prompt tokens, then fewest
    outstanding requests) and the first predicted to meet both gets the request: on
    identical replicas that is also the lowest predicted TTFT. When none is predicted
    to meet both, the one with the smallest worst ratio of prediction to SLO.

    An uncongested fleet costs one table lookup a request: on a cost table, whose
    answers are non-decreasing in every coordinate, ``T(n + m + 1, chunk)`` bounds
    both ``T(n, chunk)`` and ``T(n + m + 1, min(chunk, Q))`` from above, so a least
    loaded replica that meets both SLOs at that one shape meets them exactly; only
    when it does not are the two bounds computed (:meth:`_surely_meets`).
    ``chunk``: the prefill tokens per iteration assumed (a SLOWeave replica's chunk
    varies; 512 is a typical one at a 25 ms TPOT); ``quantile``, ``use_margin``: the
    bound planned on (``use_margin=False`` with a P50-only table).
    """

    chunk: int = 512
    quantile: float = 0.99
    use_margin: bool = True
    #: per replica index: ``(steps, n, ctx, T(n, chunk))`` and ``(steps, args, T(args))``
    #: of its last TTFT and TPOT bounds; reused while the replica has not stepped and the
    #: arguments are the same (the cost table is fixed during a run, unless it learns
    #: online: then nothing is cached)
    _ttft: dict[int, tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False,
                                              compare=False)  # fmt: skip
    _tpot: dict[int, tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False,
                                              compare=False)  # fmt: skip

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise ValueError("chunk must be >= 1")
        if not 0 < self.quantile < 1:
            raise ValueError("quantile must be in (0, 1)")

    def _bound(self, replica: Replica, n: int, c: int, ctx: float) -> float:
        p = replica.predictor
        t = float(p.predict(n, c, ctx, 0, q=self.quantile))
        if not self.use_margin:
            return t
        # a cost table's margin is rho × its tail quantile's prediction (costmodels/table.py):
        # at that quantile, one lookup gives both
        info = getattr(p, "margin_info", None)
        if info is not None and info.quantile == self.quantile:
            return t * (1.0 + info.rho)
        return t + float(p.margin(n, c, ctx, 0))

    def predict(self, request: Request, replica: Replica) -> tuple[float, float]:
        """``(TTFT, TPOT)`` predicted for ``request`` on ``replica``, in ms."""
        n, ctx = replica.n_decode, replica.ctx_mean
        steps, i = replica.steps, replica.index
        fixed = not _learns(replica.predictor)
        args = (_decoding_with(replica), min(self.chunk, replica.queued_prompt_tokens + 1), ctx)
        hit = self._tpot.get(i)
        if fixed and hit is not None and hit[0] == steps and hit[1] == args:
            tpot = hit[2]
        else:
            tpot = self._bound(replica, *args)
            self._tpot[i] = (steps, args, tpot)
        hit = self._ttft.get(i)
        if fixed and hit is not None and hit[0] == steps and hit[1] == n and hit[2] == ctx:
            per_iteration = hit[3]
        else:
            per_iteration = self._bound(replica, n, self.chunk, ctx)
            self._ttft[i] = (steps, n, ctx, per_iteration)
        return self._ttft_of(request, replica, per_iteration), tpot

    def _ttft_of(self, request: Request, replica: Replica, per_iteration: float) -> float:
        """Wait for the current iteration, then the queue ahead and the prompt at
        ``chunk`` tokens an iteration of ``per_iteration`` ms."""
        iterations = math.ceil((replica.queued_prompt_tokens + request.prompt_tokens) / self.chunk)
        return max(0.0, replica.now_ms - request.arrival_ms) + iterations * per_iteration

    def _worst(self, request: Request, replica: Replica) -> float:
        ttft, tpot = self.predict(request, replica)
        return max(ttft / request.ttft_slo_ms, tpot / request.tpot_slo_ms)

    def _surely_meets(self, request: Request, replica: Replica) -> bool:
        """Whether ``replica`` meets both SLOs at one shape bounding both of
        :meth:`predict`'s table lookups from above (see the class docstring): True
        only where :meth:`_worst` is at most 1 too; False decides nothing. Only for a
        fixed table declared ``non_decreasing`` (a learning one may not stay so)."""
        p = replica.predictor
        if not getattr(p, "non_decreasing", False) or _learns(p):
            return False
        upper = self._bound(replica, _decoding_with(replica), self.chunk, replica.ctx_mean)
        if upper / request.tpot_slo_ms > 1.0:
            return False
        return self._ttft_of(request, replica, upper) / request.ttft_slo_ms <= 1.0

    def route(self, request: Request, replicas: Sequence[Replica]) -> int:
        # the least loaded first: in an uncongested fleet it is the answer, and finding
        # it is one C scan, not a sort
        first = min(replicas, key=_BY_TOKENS)
        if self._surely_meets(request, first):
            return first.index
        best_worst = self._worst(request, first)
        if best_worst <= 1.0:
            return first.index
        best = first
        for r in sorted(replicas, key=_BY_TOKENS)[1:]:
            worst = self._worst(request, r)
            if worst <= 1.0:
                return r.index
            if worst < best_worst:
                best, best_worst = r, worst
        return best.index
