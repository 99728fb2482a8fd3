"""DueTimes (the plug-in's O(exceptions) deadline book) against a brute-force dict."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from servecal.integrations.vllm.due import DueTimes

SLO = 25.0


class Brute:
    """Every decoding request's due time, written out."""

    def __init__(self) -> None:
        self.due: dict[int, float] = {}
        self.own: dict[int, float] = {}

    def slo(self, k: int) -> float:
        return self.own.get(k, SLO)


# an operation: (kind, request, flag) on requests 0..7
ops = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "start", "step", "leave"]),
        st.integers(0, 7),
        st.floats(0.0, 1.0),
    ),  # fmt: skip
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_earliest_due_time_matches_brute_force(sequence) -> None:
    fast, brute = DueTimes(SLO), Brute()
    known: set[int] = set()  # arrived, not yet decoding
    now = 0.0
    for kind, k, x in sequence:
        if kind == "arrive" and k not in known and k not in brute.due:
            known.add(k)
            if x < 0.3:  # its own SLO
                fast.set_slo(k, 5.0 + 40 * x)
                brute.own[k] = 5.0 + 40 * x
        elif kind == "start" and k in known:  # first token at the last step's end
            known.discard(k)
            fast.started(k, now)
            brute.due[k] = now + brute.slo(k)
        elif kind == "step":  # a step ends: all decodes, or all but those with bit set
            now += 1.0 + x
            decoding = sorted(brute.due)
            if x < 0.5:
                fast.all_emitted(now)
                for d in decoding:
                    brute.due[d] = now + brute.slo(d)
            else:
                skipped = [d for d in decoding if (d * 7 + int(x * 100)) % 3 == 0]
                emitted = [d for d in decoding if d not in skipped]
                fast.some_emitted(emitted, skipped, now)
                for d in emitted:
                    brute.due[d] = now + brute.slo(d)
        elif kind == "leave" and k in brute.due:
            fast.forget(k)
            del brute.due[k]
            brute.own.pop(k, None)
        expect = min(brute.due.values(), default=math.inf)
        assert fast.earliest(len(brute.due)) == expect
