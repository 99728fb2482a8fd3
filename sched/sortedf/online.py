"""Sorted-F-Online: Sorted-F as a policy of the reference engine (receding horizon).

Whenever requests arrive (or a preempted one is back in the queue) the policy
re-plans: Sorted-F Phase 1 over every waiting request, with ``s`` = the tokens it
must prefill (prompt, plus its outputs after a recompute) and ``o`` = the tokens it
still has to produce. Between re-plans it executes that list like Phase 2: the
head is admitted, its whole prefill in one iteration, while the predicted KV of
the running requests plus the newcomers stays ``<= M`` at every future completion
(the MC-SF/Sorted-F test on the engine's token accounting); the first that does
not fit stops admission. Ready requests decode every iteration.

Token accounting (docs/engine.md): a request prefilling ``P`` tokens holds ``P``
after that iteration, which also emits its first token, and one more per decode,
so with ``R`` tokens still to produce it holds ``P - 1 + d`` after its ``d``-th
iteration, ``d = 1..R``; a ready request holding ``h`` with ``R`` left holds
``h + d``. Like the offline algorithm it is clairvoyant about output lengths (it
reads ``output_tokens``), so its admissions never force a recompute preemption.
Decisions are about tokens and memory; iteration times, and so every latency the
engine reports in ms, come from the engine's executor (the cost table).

With the engine's prefix cache (docs/prefix_cache.md) a request's KV is its own
tokens plus cache blocks it shares: ``s`` and the held tokens are its own
(``shared_tokens`` left out) and, in the admission test, the blocks referenced now
are a fixed reservation taken off ``M`` (counted once; conservative: a block is not
foreseen to be freed). Phase 1's order is still formed on ``M``.
Without a cache both are zero and this is the policy above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servecal.costmodels.predictor import Predictor
from servecal.sched.live import RequestView
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.sortedf.admission import future_peak
from servecal.sched.sortedf.batching import SOLVERS, form_batches
from servecal.sched.view import EngineView


def _to_produce(live: RequestView) -> int:
    return live.output_tokens - live.tokens_out


@dataclass
class SortedFOnline:
    """Receding-horizon Sorted-F (see module doc). ``solver`` is Phase 1's solver."""

    solver: str = "auto"
    replans: int = field(default=0, init=False)
    _order: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r}; choose from {', '.join(SOLVERS)}")

    def _replan(self, waiting: list[RequestView], memory: int) -> None:
        s = np.array([w.prefill_target - w.shared_tokens for w in waiting], dtype=np.int64)
        o = np.array([max(1, _to_produce(w)) for w in waiting], dtype=np.int64)
        # Phase 1 on s - 1 so that a batch's check matches the engine's P - 1 + d.
        batches = form_batches(np.maximum(s - 1, 0), o, memory, self.solver)
        rids = [w.rid for w in waiting]
        self._order = [rids[i] for b in batches for i in b.tolist()]
        self.replans += 1

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        held: list[int] = []
        left: list[int] = []
        chunks: list[tuple[int, int]] = []
        own_now = 0  # KV the running requests hold outside shared cache blocks
        for live in view.running:
            own_now += live.kv_tokens - live.shared_tokens
            if live.is_ready:
                held.append(live.kv_tokens - live.shared_tokens)
            else:  # a prefill in progress: finish it now, it was admitted already
                held.append(live.prefill_target - 1 - live.shared_tokens)
                chunks.append((live.rid, live.remaining_prefill))
            left.append(max(1, _to_produce(live)))
        # the prefix cache's referenced blocks, counted once (0 without a cache)
        memory = view.kv_capacity - (view.kv_used - own_now)
        waiting = list(view.waiting)
        queued = set(self._order)
        if view.new_arrivals or any(w.rid not in queued for w in waiting):
            self._replan(waiting, view.kv_capacity)  # the order: on M, as it always was
        h = np.asarray(held, dtype=np.int64)
        r = np.asarray(left, dtype=np.int64)
        waiting_ids = {w.rid for w in waiting}
        self._order = [rid for rid in self._order if rid in waiting_ids]
        admitted = 0
        for rid in self._order:
            live = view.get(rid)
            h2 = np.append(h, live.prefill_target - 1 - live.shared_tokens)
            r2 = np.append(r, max(1, _to_produce(live)))
            if future_peak(h2, r2) > memory:
                break
            h, r = h2, r2
            chunks.append((rid, live.remaining_prefill))
            admitted += 1
        del self._order[:admitted]
        return Plan(prefill=tuple(chunks)) if chunks else DECODE_ONLY

    def summary(self) -> dict:
        return {"replans": self.replans}
