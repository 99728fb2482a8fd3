"""The engine-side state of one request, read by policies through properties.

Policies see a request as a :class:`RequestView` (read-only properties). The engine
changes a request only through :class:`LiveRequest`'s transition methods
(``admit``, ``start_streak``, ``finish``, ...), so every write to its fields is in
this module and each transition keeps the fields consistent with each other. Token counts are
kept *lazily*: while a request decodes in every iteration (a "streak", the usual
case) nothing about it changes per iteration; its token count and last-token time
are derived from the shared :class:`Clock`. That is what lets the engine run
tens of thousands of iterations per second with hundreds of active requests.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Protocol

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


class RequestView(Protocol):
    """What a policy may read about one request (every attribute read-only)."""

    @property
    def rid(self) -> int: ...
    @property
    def request(self) -> Request: ...
    @property
    def tpot_slo_ms(self) -> float: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def arrival_ms(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def prefill_target(self) -> int: ...
    @property
    def prefilled(self) -> int: ...
    @property
    def remaining_prefill(self) -> int: ...
    @property
    def is_ready(self) -> bool: ...
    @property
    def tokens_out(self) -> int: ...
    @property
    def kv_tokens(self) -> int: ...
    @property
    def first_token_ms(self) -> float: ...
    @property
    def last_token_ms(self) -> float: ...
    @property
    def deadline_ms(self) -> float: ...
    @property
    def admit_seq(self) -> int: ...
    @property
    def completion_ms(self) -> float: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def shared_tokens(self) -> int: ...
    @property
    def recomputes(self) -> int: ...
    @property
    def parks(self) -> int: ...
    @property
    def parked(self) -> bool: ...
    @property
    def slo_exception(self) -> bool: ...
    @property
    def streaking(self) -> bool: ...
    @property
    def heap_version(self) -> int: ...
    def finishes_in(self, idx: int) -> bool: ...
    def streaks(self) -> list[tuple[int, int]]: ...


class LiveRequest:
    """One request while the engine holds it (a :class:`RequestView` plus transitions).

    Public attributes are read-only; the engine moves a request between phases with
    the methods under "transitions", which are the only writers of its fields.
    """

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
        "_cached",
        "_shared",
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
        self._cached = 0  # prompt tokens the prefix cache served its first prefill
        self._shared = 0  # KV tokens in cache blocks it references (counted once, by the cache)

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
    def steps_out(self) -> int:
        """Steps that emitted its tokens: ``tokens_out`` (one token a step) unless a
        subclass delivers several a step (speculative decoding)."""
        if self._streaking:
            return self._tok + (self._clock.last_iter - self._sync_iter)
        return self._tok

    @property
    def output_steps(self) -> int:
        """Steps it takes to emit every output token (its output tokens here)."""
        return self.request.output_tokens

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
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache served its first prefill (which starts there;
        0 without a cache or a hit). They are in :attr:`prefilled` from the start."""
        return self._cached

    @property
    def shared_tokens(self) -> int:
        """Of its KV, the tokens in cache blocks it references: the cache counts them
        once however many requests share them."""
        return self._shared

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

    @property
    def streaking(self) -> bool:
        """Decoding in every iteration since :attr:`sync_iter` (token count derived lazily)."""
        return self._streaking

    @property
    def heap_version(self) -> int:
        """Version of this request's deadline-heap entries; older entries are stale."""
        return self._hv

    def finishes_in(self, idx: int) -> bool:
        """Its streak emits its last output token in iteration ``idx``."""
        return self._streaking and self._sync_iter + self.request.output_tokens - self._tok == idx

    def streaks(self) -> list[tuple[int, int]]:
        """``(first, last)`` iteration indices of each run of consecutive token
        emissions, the current one included."""
        if self._streaking:
            return [*self._streaks, (self._sync_iter, self._clock.last_iter)]
        return list(self._streaks)

    # -- transitions (called by the engine only) -------------------------------------
    def reject(self) -> None:
        """Refused: by admission control, or larger than the KV capacity."""
        self._phase = Phase.REJECTED

    def admit(self, seq: int) -> None:
        """Start (or restart after a recompute) its prefill as the ``seq``-th admission."""
        self._phase = Phase.PREFILL
        self._admit_seq = seq

    def park(self) -> None:
        """A plan parks it: it keeps its KV and progress but is not scheduled."""
        self._parked = True
        self._parks += 1

    def unpark(self) -> None:
        self._parked = False

    def mark_exception(self) -> None:
        """A plan knowingly broke one of its deadlines."""
        self._exception = True

    def serve_cached(self, tokens: int) -> None:
        """Waiting: its first ``tokens`` prefill tokens come from the prefix cache."""
        self._prefilled = tokens
        self._shared = tokens
        if not self._recomputes:
            self._cached = tokens

    def share(self, tokens: int) -> None:
        """The first ``tokens`` of its KV are (now) cache blocks it references."""
        self._shared = tokens

    def drop_cached(self) -> None:
        """Waiting: its cached prefix is given up; it prefills from token 0."""
        self._prefilled = 0
        if not self._recomputes:
            self._cached = 0

    def add_prefill(self, tokens: int) -> bool:
        """``tokens`` more prompt tokens are in KV; True once the prefill is complete."""
        self._prefilled += tokens
        return self._prefilled == self._target

    def start_streak(self, idx: int, tokens: int) -> int:
        """It emits its ``tokens``-th token in iteration ``idx`` and decodes on every
        iteration after; returns the new heap version."""
        self._streaking = True
        self._sync_iter = idx
        self._tok = tokens
        self._hv += 1
        return self._hv

    def stop_streak(self, last_ms: float) -> None:
        """It stops decoding: freeze its token count and ℓ_i (``last_ms``)."""
        if self._streaking:
            self._streaks.append((self._sync_iter, self._clock.last_iter))
            self._tok = self.steps_out
            self._streaking = False
            self._last_ms = last_ms

    def skip_decode(self, last_ms: float) -> int:
        """A plan leaves it out of this iteration's decodes; returns the new heap version."""
        self.stop_streak(last_ms)
        self._hv += 1
        return self._hv

    def prefill_complete(self, now: float) -> None:
        """Its prefill finished at ``now``: it decodes from here (its next token follows)."""
        self._phase = Phase.READY
        self._kv0 = self._prefilled - (self._tok + 1)
        if math.isnan(self._first_ms):
            self._first_ms = now

    def finish(self, now: float) -> None:
        self._phase = Phase.DONE
        self._done_ms = now
        self._hv += 1

    def recompute(self) -> None:
        """Preempted by recompute: KV freed, everything emitted so far is prefilled again."""
        self._phase = Phase.WAITING
        self._target = self.request.prompt_tokens + self._tok
        self._prefilled = 0
        self._parked = False
        self._hv += 1
        self._recomputes += 1

    def __repr__(self) -> str:
        return (
            f"LiveRequest(rid={self.rid}, phase={self._phase.name}, "
            f"prefilled={self._prefilled}/{self._target}, tokens_out={self.tokens_out})"
        )
