"""Max goodput: the highest offered load at which ≥ 90% of the requests are good.

:class:`GoodputSearch` is a bisection on the rate written as a state machine (ask
``next_rate()``, run there, ``record()`` the attainment), so a sweep can run many
searches at once in one pool. Its bracket expands: a rate that still meets the
target at the bracket's top doubles the top (up to ``cap``), one that misses at
the bottom halves the bottom (down to ``floor``). The answer is therefore never
the edge of a bracket someone guessed: either a rate measured to meet the target
next to one measured to miss it, or a bound that says so (``above_cap``: the
maximum is more than ``cap``; ``below_floor``: less than ``floor``).

Attainment is assumed to fall as the rate rises; every probe of one search uses
the same seed (common random numbers), so sampling noise does not make the curve
non-monotone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servecal.util.errors import InputError

#: DistServe's attainment target.
TARGET = 0.9
#: How far the cap and floor lie beyond the bracket when none is given.
REACH = 16.0

MEASURED = "measured"
ABOVE_CAP = "above_cap"
BELOW_FLOOR = "below_floor"


@dataclass(frozen=True)
class Bracket:
    """Where a search starts (``lo``, ``hi``, req/s) and how far it may expand
    (``cap``, default ``16 × hi``; ``floor``, default ``lo / 16``); ``rel_tol``: stop
    when the gap is below this share of the failing rate."""

    lo: float
    hi: float
    cap: float | None = None
    floor: float | None = None
    target: float = TARGET
    rel_tol: float = 0.02

    def __post_init__(self) -> None:
        if not (0 < self.lo < self.hi and math.isfinite(self.hi)):
            raise ValueError(f"need 0 < lo < hi, got lo={self.lo} hi={self.hi}")
        if not self.limits()[0] <= self.lo or not self.hi <= self.limits()[1]:
            raise ValueError("need floor <= lo < hi <= cap")
        if not 0 < self.target <= 1:
            raise ValueError(f"target must be in (0, 1], got {self.target}")
        if not self.rel_tol > 0:
            raise ValueError(f"rel_tol must be > 0, got {self.rel_tol}")

    def limits(self) -> tuple[float, float]:
        """``(floor, cap)`` with the defaults filled in."""
        floor = self.floor if self.floor is not None else self.lo / REACH
        cap = self.cap if self.cap is not None else self.hi * REACH
        return floor, cap

    @classmethod
    def parse(cls, text: str, rel_tol: float = 0.02) -> Bracket:
        """``--rate-range LO:HI[:CAP]`` in req/s (``rel_tol``: ``--rate-tol``); a bad one
        is one :class:`InputError` line."""
        if not 0 < rel_tol < 1:
            raise InputError(f"--rate-tol {rel_tol:g}: expected a share in (0, 1), e.g. 0.01")
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError(text)
            values = [float(p) for p in parts]
            cap = values[2] if len(parts) == 3 else None
            return cls(values[0], values[1], cap, rel_tol=rel_tol)
        except ValueError:
            raise InputError(
                f"--rate-range {text!r}: expected LO:HI[:CAP] in req/s with "
                "0 < LO < HI <= CAP, e.g. 1:200"
            ) from None


@dataclass(frozen=True)
class Goodput:
    """A search's answer: ``rate`` (req/s) and what it is (``bound``): ``measured``;
    ``above_cap`` (the maximum is more than ``rate`` = the cap); ``below_floor``
    (less than the floor; ``rate`` is 0). ``probes``: runs it took."""

    rate: float
    bound: str
    probes: int

    def text(self) -> str:
        if self.bound == ABOVE_CAP:
            return f"> {self.rate:g}"
        if self.bound == BELOW_FLOOR:
            return "< floor"
        return f"{self.rate:.4g}"


@dataclass
class GoodputSearch:
    """One search (see the module docstring): ``next_rate()`` → run → ``record(att)``."""

    bracket: Bracket
    good: float | None = None  # highest rate measured to meet the target
    bad: float | None = None  # lowest rate measured to miss it
    probes: int = 0
    _pending: float | None = field(default=None, repr=False)
    _result: Goodput | None = field(default=None, repr=False)

    def next_rate(self) -> float | None:
        """The rate to run next, or ``None`` when the search is over (see ``result``)."""
        if self._result is not None:
            return None
        if self._pending is None:
            self._pending = self._choose()
        return self._pending

    def _choose(self) -> float:
        b = self.bracket
        if self.good is None and self.bad is None:
            return b.hi
        if self.good is None:  # only misses so far: look lower
            return b.lo if self.bad == b.hi else self.bad / 2  # type: ignore[operator]
        if self.bad is None:  # only passes so far: look higher
            return self.good * 2
        return 0.5 * (self.good + self.bad)

    def record(self, attainment: float) -> None:
        """The mean attainment measured at the rate ``next_rate()`` gave."""
        rate = self._pending
        if rate is None:
            raise RuntimeError("record() without a pending next_rate()")
        self._pending = None
        self.probes += 1
        if attainment >= self.bracket.target:
            self.good = rate if self.good is None else max(self.good, rate)
        else:
            self.bad = rate if self.bad is None else min(self.bad, rate)
        self._conclude()

    def _conclude(self) -> None:
        """After a probe: at a limit, answer or look once at the limit itself; with the
        answer bracketed to ``rel_tol``, answer; else the search goes on."""
        floor, cap = self.bracket.limits()
        if self.bad is None and self.good is not None and self.good * 2 > cap:
            if self.good >= cap:
                self._result = Goodput(cap, ABOVE_CAP, self.probes)
            else:
                self._pending = cap  # one last look at the cap itself
            return
        if self.good is None and self.bad is not None and self.bad / 2 < floor:
            if self.bad <= floor:
                self._result = Goodput(0.0, BELOW_FLOOR, self.probes)
            else:
                self._pending = floor
            return
        if (
            self.good is not None
            and self.bad is not None
            and self.bad - self.good <= self.bracket.rel_tol * self.bad
        ):
            self._result = Goodput(self.good, MEASURED, self.probes)

    @property
    def result(self) -> Goodput:
        if self._result is None:
            raise RuntimeError("the search is not over")
        return self._result


def search_sequentially(attainment_at: object, bracket: Bracket) -> Goodput:
    """Run one search here, calling ``attainment_at(rate)`` for every probe."""
    search = GoodputSearch(bracket)
    while (rate := search.next_rate()) is not None:
        search.record(float(attainment_at(rate)))  # type: ignore[operator]
    return search.result
