"""SLOWeave's planning margin, set online from the quantity the SLO judges.

The SLO does not judge iterations: it judges each *request* by the P99 of its own
inter-token gaps, and a run by the share of requests within their SLOs (90%). A
request of ``k`` gaps passes its P99 with ``m(k) = k − 1 − ⌈0.99·(k − 1)⌉`` gaps over
the target (numpy's linear percentile: none below 101 gaps, one up to 200, …). If a
share ``α`` of the iterations SLOWeave fills to the earliest deadline overshoot it,
a request fails with probability ``P(Binom(k, α) > m(k))``; averaged over the gap
counts of the requests that finished, that is the share of requests the plan itself
makes fail. :class:`GapMissControl` solves for the ``α`` at which this share is the
TPOT part of what the attainment target allows (``tpot_share · (1 − target)``: 5%),
and moves the planning budget so that the measured overshoot rate tracks ``α``:
adaptive conformal inference (Gibbs & Candès, NeurIPS 2021) on the budget's log
scale, ``u ← u + gain·(miss − α)``, budget × ``exp(−u)``.

A *miss* is what the SLO counts: the iteration ended after the earliest decode
deadline it was planned against, i.e. that request's gap exceeded its TPOT target.
Only iterations whose chunk the budget cut (``0 < c < limit``) are counted: they are
the ones a margin moves. Under a smooth cost the overshoot rate stays below ``α``
and the scale rests at ``max_scale`` (1.1: a tenth past the table's P99 + δ, which
its probe margin leaves room for on a smooth cost); under jitter or
spikes the table's P99 + δ does not bound, misses come faster than ``α`` and the
budget shrinks until they do not.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servecal.sched.policies.margin import Fit, Median

#: Gap count assumed before any request has finished (the chat output median, 129
#: tokens: docs/workloads.md).
PRIOR_GAPS = 128


def allowed_misses(gaps: int) -> int:
    """Gaps over the target a request of ``gaps`` gaps can have with its P99 still
    within it (numpy's linear percentile; conservative: the interpolated value is
    taken to be over whenever the position past it is)."""
    if gaps <= 1:
        return 0
    position = 0.99 * (gaps - 1)
    return max(0, gaps - 1 - math.ceil(position - 1e-9))


def affordable_miss_rate(
    gap_counts: dict[int, int], share: float, near: float | None = None
) -> float:
    """The per-iteration miss rate at which the requests of ``gap_counts`` (gaps →
    how many requests) fail their P99 with mean probability ``share`` (bisection on
    its logarithm, to 0.3%; the failure probability rises with the rate). ``near``: a
    previous answer to start from (the search then starts within 4× of it)."""
    total = sum(n for k, n in gap_counts.items() if k >= 1)
    if total == 0 or share <= 0.0:
        return 0.0
    ks = np.array([k for k in gap_counts if k >= 1], dtype=float)
    weights = np.array([gap_counts[int(k)] for k in ks], dtype=float) / total
    allowed = np.array([allowed_misses(int(k)) for k in ks])

    def fits(log_alpha: float) -> bool:
        return float(weights @ fail_probability(ks, allowed, math.exp(log_alpha))) <= share

    lo, hi = math.log(1e-7), math.log(0.5)
    if fits(hi):
        return 0.5
    if not fits(lo):
        return 1e-7
    if near is not None and 1e-7 < near < 0.5:
        lo, hi = _narrow_near(fits, lo, hi, math.log(near))
    while hi - lo > 0.003:
        mid = 0.5 * (lo + hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


def _narrow_near(
    fits: Callable[[float], bool], lo: float, hi: float, log_near: float
) -> tuple[float, float]:
    """The bisection's bracket narrowed to within 4× of a previous answer where the
    answer still lies there (each end moves only if it stays on its side)."""
    a, b = log_near - math.log(4.0), log_near + math.log(4.0)
    if lo < a and fits(a):
        lo = a
    if b < hi and not fits(b):
        hi = b
    return lo, hi


def fail_probability(gaps: np.ndarray, allowed: np.ndarray, alpha: float) -> np.ndarray:
    """``P(Binom(gaps, alpha) > allowed)``, elementwise."""
    q = 1.0 - alpha
    term = np.exp(gaps * math.log(q))  # P(X = 0)
    cdf = term.copy()
    for j in range(int(allowed.max(initial=0))):
        term = term * (gaps - j) / (j + 1) * (alpha / q)
        cdf += np.where(j < allowed, term, 0.0)
    return np.clip(1.0 - cdf, 0.0, 1.0)


#: Finished requests after which ``α`` is solved again: often while the first ones
#: arrive, then every :data:`RESOLVE_EVERY` (it moves slowly: a window of 256).
RESOLVE_AT = (16, 128)
RESOLVE_EVERY = 512


@lru_cache(maxsize=16)
def _prior_rate(share: float) -> float:
    """``α`` before any request has finished: every request of :data:`PRIOR_GAPS` gaps."""
    return affordable_miss_rate({PRIOR_GAPS: 1}, share)


@dataclass
class GapMissControl:
    """The budget scale SLOWeave plans with (see the module docstring).

    * ``target`` (0.9): the run's attainment target; ``tpot_share`` (0.5): the share of
      the failures it allows that TPOT misses may cause.
    * ``gain`` (0.05): log-scale step per miss; ``min_scale``/``max_scale`` bound the
      budget scale (``max_scale`` 1 would never plan looser than the table's P99 + δ;
      1.1, the default, lets a smooth cost use a tenth of the margin's room).
    * ``window`` (256): finished requests whose gap counts set ``α`` (solved again after
      16 and 128 of them, then every 512; before the first 16, the prior of
      :data:`PRIOR_GAPS` gaps per request).

    Use: ``settle(now_ms)`` at each decision (scores the last counted iteration),
    ``scale()`` for the budget, ``planned(deadline_ms)`` after deciding a chunk the
    budget cut, ``finished(gaps)`` when a request completes; ``choose`` and ``count``
    are the same steps as a :class:`~servecal.sched.policies.margin.MarginControl`.
    """

    target: float = 0.9
    tpot_share: float = 0.5
    gain: float = 0.05
    min_scale: float = 0.25
    max_scale: float = 1.1
    window: int = 256
    u: float = 0.0
    counted: int = 0
    misses: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise ValueError("GapMissControl.target must be in (0, 1)")
        if not 0.0 < self.tpot_share <= 1.0:
            raise ValueError("GapMissControl.tpot_share must be in (0, 1]")
        if not self.gain > 0.0:
            raise ValueError("GapMissControl.gain must be > 0")
        if not 0.0 < self.min_scale <= self.max_scale:
            raise ValueError("GapMissControl needs 0 < min_scale <= max_scale")
        if self.window < 1:
            raise ValueError("GapMissControl.window must be >= 1")
        self._u_lo = -math.log(self.max_scale)
        self._u_hi = -math.log(self.min_scale)
        self.u = min(max(self.u, self._u_lo), self._u_hi)
        self._scale = math.exp(-self.u)
        self._pending = math.nan  # deadline of the last counted iteration
        self._recent: deque[int] = deque()
        self._counts: dict[int, int] = {}
        self._seen = 0
        self.alpha = _prior_rate(self._share())

    def _share(self) -> float:
        return self.tpot_share * (1.0 - self.target)

    def scale(self) -> float:
        """The factor the next budget is multiplied by."""
        return self._scale

    def settle(self, now_ms: float) -> None:
        """Score the last counted iteration: a miss if it ended (``now_ms``) after the
        deadline it was planned against."""
        deadline = self._pending
        if deadline != deadline:  # nan: nothing pending
            return
        self._pending = math.nan
        miss = now_ms > deadline
        self.counted += 1
        if miss:
            self.misses += 1
        u = self.u + self.gain * ((1.0 if miss else 0.0) - self.alpha)
        u = self._u_lo if u < self._u_lo else self._u_hi if u > self._u_hi else u
        if u != self.u:
            self.u = u
            self._scale = math.exp(-u)

    def planned(self, deadline_ms: float) -> None:
        """The chunk just decided was cut by the budget to end by ``deadline_ms``."""
        self._pending = deadline_ms

    def choose(
        self,
        fit: Fit,
        limit: int,
        prefix: int = 0,
        n_decode: int = 0,
        ctx: float = 0.0,
        median: Median | None = None,
    ) -> int:
        """The largest chunk up to ``limit`` that the budget × :meth:`scale` fits (one
        scale for every chunk: the batch's numbers and the table's median do not
        matter here)."""
        return fit(limit, self._scale)

    def count(
        self, deadline_ms: float, chunk: int, limit: int, now_ms: float, median: Median
    ) -> None:
        """The chunk (``> 0``) just decided: counted only when the budget cut it
        (``chunk < limit``), the iterations a margin moves."""
        if chunk < limit:
            self._pending = deadline_ms

    def holds(self, n_after: int, decode_ms: Callable[[int], float]) -> bool:
        """Never: one scale knows nothing of the decode batch's size."""
        return False

    def finished(self, gaps: int) -> None:
        """A request completed with ``gaps`` inter-token gaps (output tokens − 1)."""
        if gaps < 1:
            return
        self._recent.append(gaps)
        self._counts[gaps] = self._counts.get(gaps, 0) + 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            left = self._counts[old] - 1
            if left:
                self._counts[old] = left
            else:
                del self._counts[old]
        self._seen += 1
        if self._seen in RESOLVE_AT or self._seen % RESOLVE_EVERY == 0:
            self.alpha = affordable_miss_rate(self._counts, self._share(), self.alpha)

    def summary(self) -> dict[str, float | int]:
        """What it ended at: scale, ``α``, counted iterations and misses."""
        return {
            "scale": self._scale,
            "alpha": self.alpha,
            "counted": self.counted,
            "misses": self.misses,
        }
