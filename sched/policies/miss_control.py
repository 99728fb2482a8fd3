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
from dataclasses import dataclass

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


def _fail_probability(gaps: int, allowed: int, alpha: float) -> float:
    """``P(Binom(gaps, alpha) > allowed)``."""
    if alpha <= 0.0:
        return 0.0
    q = 1.0 - alpha
    term = q**gaps  # P(X = 0)
    cdf = term
    for j in range(allowed):
        term *= (gaps - j) / (j + 1) * alpha / q
        cdf += term
    return max(0.0, 1.0 - cdf)


def affordable_miss_rate(gap_counts: dict[int, int], share: float) -> float:
    """The per-iteration miss rate at which the requests of ``gap_counts`` (gaps →
    how many requests) fail their P99 with mean probability ``share`` (bisection;
    the failure probability rises with the rate)."""
    total = sum(gap_counts.values())
    if total == 0 or share <= 0.0:
        return 0.0
    pairs = [(k, allowed_misses(k), n / total) for k, n in gap_counts.items() if k >= 1]

    def failing(alpha: float) -> float:
        return sum(w * _fail_probability(k, m, alpha) for k, m, w in pairs)

    lo, hi = 0.0, 0.5
    if failing(hi) <= share:
        return hi
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if failing(mid) <= share:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class GapMissControl:
    """The budget scale SLOWeave plans with (see the module docstring).

    * ``target`` (0.9): the run's attainment target; ``tpot_share`` (0.5): the share of
      the failures it allows that TPOT misses may cause.
    * ``gain`` (0.05): log-scale step per miss; ``min_scale``/``max_scale`` bound the
      budget scale (``max_scale`` 1 would never plan looser than the table's P99 + δ;
      1.1, the default, lets a smooth cost use a tenth of the margin's room).
    * ``window`` (256): finished requests whose gap counts set ``α``.

    Use: ``settle(now_ms)`` at each decision (scores the last counted iteration),
    ``scale()`` for the budget, ``planned(deadline_ms)`` after deciding a chunk the
    budget cut, ``finished(gaps)`` when a request completes.
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
        self._counts: dict[int, int] = {PRIOR_GAPS: 1}
        self._since = 0
        self.alpha = affordable_miss_rate(self._counts, self._share())

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

    def finished(self, gaps: int) -> None:
        """A request completed with ``gaps`` inter-token gaps (output tokens − 1)."""
        if gaps < 1:
            return
        if not self._recent:
            self._counts = {}  # the prior gives way to the first measured request
        self._recent.append(gaps)
        self._counts[gaps] = self._counts.get(gaps, 0) + 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            left = self._counts[old] - 1
            if left:
                self._counts[old] = left
            else:
                del self._counts[old]
        self._since += 1
        if self._since >= 16 or len(self._recent) <= 16:
            self._since = 0
            self.alpha = affordable_miss_rate(self._counts, self._share())

    def summary(self) -> dict[str, float | int]:
        """What it ended at: scale, ``α``, counted iterations and misses."""
        return {
            "scale": self._scale,
            "alpha": self.alpha,
            "counted": self.counted,
            "misses": self.misses,
        }
