"""When each decoding request's next token is due, kept in O(exceptions) per step.

SLOWeave needs ``min_i (ℓ_i + D_i)`` over the decoding requests every step (``ℓ_i``
the time of request ``i``'s last token, ``D_i`` its TPOT SLO). In vLLM almost every
step runs every decode, so almost every request's ``ℓ_i`` is the same: the end of
the last step. :class:`DueTimes` stores that common time once (``bulk``) and lists
only the exceptions: decodes a step left out (``apart``, with their own due time)
and requests with their own SLO. A step that ran every decode costs O(1); the
query costs O(exceptions); nothing is a pass over the running requests.

Keys are whatever identifies a request (vLLM's ``Request`` objects, hashed by
identity). Plain Python, no vLLM: tested against a brute-force dict model.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable


class DueTimes:
    """Due times of the decoding requests (ms), default TPOT SLO ``slo_ms``.

    Requests become decoding with :meth:`started` (their first token) and stop with
    :meth:`left` (finished, aborted, preempted). Each step reports its tokens with
    :meth:`all_emitted` (every decoding request got one) or :meth:`some_emitted`.
    """

    def __init__(self, slo_ms: float) -> None:
        self.slo = slo_ms
        self.bulk = -math.inf  # last token time of every decoding request not apart
        self.apart: dict[Hashable, float] = {}  # due times of those left behind
        self.own: dict[Hashable, float] = {}  # requests with their own TPOT SLO
        self.decoding_own: set[Hashable] = set()  # of those, the decoding ones
        # (with neither ``apart`` nor ``decoding_own``, every due time is bulk + slo)

    def set_slo(self, key: Hashable, slo_ms: float) -> None:
        """``key`` has its own TPOT SLO (set before its first token)."""
        self.own[key] = slo_ms

    def started(self, key: Hashable, token_ms: float) -> None:
        """``key`` got its first token at ``token_ms`` and decodes from now on."""
        if key in self.own:
            self.decoding_own.add(key)
        if token_ms != self.bulk:
            self.apart[key] = token_ms + self.own.get(key, self.slo)

    def left(self, key: Hashable) -> None:
        """``key`` no longer decodes (finished, aborted or preempted)."""
        self.apart.pop(key, None)
        self.decoding_own.discard(key)

    def forget(self, key: Hashable) -> None:
        """``key`` left the server: drop its own SLO too."""
        self.left(key)
        self.own.pop(key, None)

    def all_emitted(self, token_ms: float) -> None:
        """Every decoding request got a token at ``token_ms``."""
        self.bulk = token_ms
        self.apart.clear()

    def some_emitted(
        self, emitted: Iterable[Hashable], skipped: Iterable[Hashable], token_ms: float
    ) -> None:
        """``emitted`` got a token at ``token_ms``; the decoding ``skipped`` did not."""
        apart, own, slo, bulk = self.apart, self.own, self.slo, self.bulk
        for key in skipped:
            if key not in apart:  # it was on the bulk time: keep its due time
                apart[key] = bulk + own.get(key, slo)
        for key in emitted:  # on the new bulk time
            apart.pop(key, None)
        self.bulk = token_ms

    def earliest(self, n_decoding: int) -> float:
        """``min(ℓ_i + D_i)`` over the ``n_decoding`` decoding requests (inf if none)."""
        if n_decoding <= 0:
            return math.inf
        apart = self.apart
        if not apart and not self.decoding_own:  # every step ran every decode: the bulk time
            return self.bulk + self.slo
        best = min(apart.values()) if apart else math.inf
        on_bulk = n_decoding - len(apart)
        if on_bulk > 0:
            own_on_bulk = [self.own[k] for k in self.decoding_own if k not in apart]
            if own_on_bulk:
                best = min(best, self.bulk + min(own_on_bulk))
            if on_bulk > len(own_on_bulk):
                best = min(best, self.bulk + self.slo)
        return best
