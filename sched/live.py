"""The engine-side state of one request, read by policies through properties.

Only :mod:`servecal.sched.engine` writes the underscore fields. Token counts are
kept *lazily*: while a request decodes in every iteration (a "streak", the usual
case) nothing about it changes per iteration; its token count and last-token time
are derived from the shared :class:`Clock`. That is what lets the engine run
tens of thousands of iterations per second with hundreds of active requests.
"""

from __future__ import annotations

import math
from enum import IntEnum

from servecal.sched.request import Request


class Phase(IntEnum):
    """Where a request is in its life."""

    WAITING = 0  # not started (or preempted by recompute): holds no KV
    PREFILL = 1  # started, prompt (or recompute) prefill incomplete: holds KV
    READY = 2  # prefill done, decoding
    DONE = 3
    REJECTED = 4  # refused by admission control, or larger than the KV capacity


class Clock:
    """Iteration counter and end times shared by the engine and every live request."""

    __slots__ = ("ends", "last_iter")

    def __init__(self) -> None:
        self.ends: list[float] = []  # end time of iteration k, ms
        self.last_iter = -1  # index of the last completed iteration


class LiveRequest:
    """One request while the engine holds it; every public attribute is read-only."""

    __slots__ = (
        "request",
        "rid",
        "tpot_slo_ms",
        "_clock",
        "_phase",
        "_admit_seq",
        "_target",
        "_prefilled",
        "_streaking",
        "_sync_iter",
        "_tok",
        "_kv0",
        "_last_ms",
        "_first_ms",
        "_done_ms",
        "_streaks",
        "_recomputes",
        "_parks",
        "_parked",
        "_exception",
        "_hv",
    )

    def __init__(self, request: Request, clock: Clock) -> None:
        self.request = request
        self.rid = request.rid
        self.tpot_slo_ms = request.tpot_slo_ms
        self._clock = clock
        self._phase = Phase.WAITING
        self._admit_seq = -1
        self._target = request.prompt_tokens  # tokens to prefill (prompt + outputs after recompute)
        self._prefilled = 0
        self._streaking = False  # decoding in every iteration since _sync_iter
        self._sync_iter = -1  # iteration that emitted the streak's first token
        self._tok = 0  # tokens out at _sync_iter (streaking) or now (not streaking)
        self._kv0 = 0  # KV held = _kv0 + tokens_out while READY
        self._last_ms = math.nan  # last token time when not streaking
        self._first_ms = math.nan
        self._done_ms = math.nan
        self._streaks: list[tuple[int, int]] = []  # closed (first, last) token iterations
        self._recomputes = 0
        self._parks = 0
        self._parked = False
        self._exception = False
        self._hv = 0  # version for lazy deletion from the engine's deadline heaps

    # -- read-only view -------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def arrival_ms(self) -> float:
        return self.request.arrival_ms

    @property
    def prompt_tokens(self) -> int:
        return self.request.prompt_tokens

    @property
    def output_tokens(self) -> int:
        return self.request.output_tokens

    @property
    def prefill_target(self) -> int:
        """Tokens this request must prefill: its prompt, plus its outputs after a recompute."""
        return self._target

    @property
    def prefilled(self) -> int:
        """Prefill tokens already in KV (the *prefix* of its next chunk)."""
        return self._prefilled

    @property
    def remaining_prefill(self) -> int:
        return self._target - self._prefilled if self._phase <= Phase.PREFILL else 0

    @property
    def is_ready(self) -> bool:
        """Prefill done: the request decodes."""
        return self._phase == Phase.READY

    @property
    def tokens_out(self) -> int:
        if self._streaking:
            return self._tok + (self._clock.last_iter - self._sync_iter)
        return self._tok

    @property
    def kv_tokens(self) -> int:
        """KV cache tokens held now."""
        if self._phase == Phase.READY:
            return self._kv0 + self.tokens_out
        return self._prefilled if self._phase == Phase.PREFILL else 0

    @property
    def first_token_ms(self) -> float:
        return self._first_ms

    @property
    def last_token_ms(self) -> float:
        """ℓ_i: time of the last output token (the prefill's completion for its first)."""
        if self._streaking:
            return self._clock.ends[-1]
        return self._last_ms

    @property
    def deadline_ms(self) -> float:
        """d_i = ℓ_i + D_i, the next-token deadline; inf unless decoding."""
        if self._phase != Phase.READY:
            return math.inf
        return self.last_token_ms + self.tpot_slo_ms

    @property
    def admit_seq(self) -> int:
        """Order of (re-)admission; the engine preempts the highest first."""
        return self._admit_seq

    @property
    def completion_ms(self) -> float:
        """When its last token came out (NaN while unfinished)."""
        return self._done_ms

    @property
    def recomputes(self) -> int:
        """Times it was preempted by recompute (KV freed, prefill redone)."""
        return self._recomputes

    @property
    def parks(self) -> int:
        """Times a plan parked it (KV and progress kept)."""
        return self._parks

    @property
    def parked(self) -> bool:
        return self._parked

    @property
    def slo_exception(self) -> bool:
        """A plan knowingly broke one of its deadlines (SLOWeave's aging rule)."""
        return self._exception

    def streaks(self) -> list[tuple[int, int]]:
        """``(first, last)`` iteration indices of each run of consecutive token
        emissions, the current one included."""
        if self._streaking:
            return [*self._streaks, (self._sync_iter, self._clock.last_iter)]
        return list(self._streaks)

    def __repr__(self) -> str:
        return (
            f"LiveRequest(rid={self.rid}, phase={self._phase.name}, "
            f"prefilled={self._prefilled}/{self._target}, tokens_out={self.tokens_out})"
        )
