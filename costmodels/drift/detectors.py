"""The sequential detectors: one-sided CUSUMs, scalar (online) and vectorised (benchmarks).

The scalar :class:`Cusum` is what :class:`~servecal.costmodels.drift.monitor.DriftMonitor`
runs, O(1) per iteration. It also keeps the current *excursion* (since the
statistic last left 0): its start is the CUSUM's change-point estimate and its
mean the size of the shift. :class:`StreamBank` runs the very same recursions on
thousands of independent streams at once, so that false-alarm rates of one per
millions of iterations can be measured in seconds.
"""

from __future__ import annotations

import numpy as np

from servecal.costmodels.drift.thresholds import Thresholds


class Cusum:
    """``S ← max(0, S + x − k)``; fires when ``S ≥ h``. Tracks the current excursion."""

    __slots__ = ("k", "h", "s", "onset", "onset_ms", "seg_n", "seg_sum", "seg_aux")

    def __init__(self, k: float, h: float) -> None:
        self.k, self.h = float(k), float(h)
        self.s = 0.0
        self.onset = -1
        self.onset_ms = 0.0
        self.seg_n = 0
        self.seg_sum = 0.0
        self.seg_aux = 0.0

    def update(self, x: float, index: int = 0, time_ms: float = 0.0, aux: float = 0.0) -> bool:
        """Add one observation (``aux``: a value averaged over the excursion, e.g. its
        size); True when the statistic is at or above ``h``."""
        s = self.s + x - self.k
        if s <= 0.0:
            self.s, self.seg_n, self.seg_sum, self.seg_aux, self.onset = 0.0, 0, 0.0, 0.0, -1
            return False
        if self.seg_n == 0:
            self.onset, self.onset_ms = index, time_ms
        self.s = s
        self.seg_n += 1
        self.seg_sum += x
        self.seg_aux += aux
        return s >= self.h

    @property
    def level(self) -> float:
        """``S / h``: 1 means alarm."""
        return self.s / self.h

    @property
    def seg_mean(self) -> float:
        return self.seg_sum / self.seg_n if self.seg_n else 0.0

    @property
    def seg_aux_mean(self) -> float:
        return self.seg_aux / self.seg_n if self.seg_n else 0.0


class StreamBank:
    """The monitor's three recursions over many independent streams (columns).

    ``feed(u, hit)`` takes blocks of shape ``(iterations, streams)``; after an
    alarm a stream's statistic restarts at 0, so ``alarms`` counts every false
    alarm on a stationary stream and ``first`` keeps each stream's first one.
    """

    DETECTORS = ("slowdown", "speedup", "tail")

    def __init__(self, thresholds: Thresholds, streams: int) -> None:
        self.th = thresholds
        self.s = {d: np.zeros(streams) for d in self.DETECTORS}
        self.first = {d: np.full(streams, -1, dtype=np.int64) for d in self.DETECTORS}
        self.alarms = dict.fromkeys(self.DETECTORS, 0)
        self.t = 0

    def _fire(self, det: str, stat: np.ndarray, h: float) -> None:
        fire = stat >= h
        if fire.any():
            self.alarms[det] += int(fire.sum())
            new = fire & (self.first[det] < 0)
            self.first[det][new] = self.t
            stat[fire] = 0.0

    def feed(self, u: np.ndarray, hit: np.ndarray) -> None:
        th = self.th
        up, down, tail = self.s["slowdown"], self.s["speedup"], self.s["tail"]
        inc = np.where(hit, th.tail_hit, th.tail_miss)
        for row in range(u.shape[0]):
            np.maximum(up + u[row] - th.k_up, 0.0, out=up)
            np.maximum(down - u[row] - th.k_down, 0.0, out=down)
            np.maximum(tail + inc[row], 0.0, out=tail)
            self._fire("slowdown", up, th.h_up)
            self._fire("speedup", down, th.h_down)
            self._fire("tail", tail, th.h_tail)
            self.t += 1

    def first_any(self) -> np.ndarray:
        """Per stream, the first iteration any detector fired (-1: never)."""
        f = np.stack([self.first[d] for d in self.DETECTORS])
        f = np.where(f < 0, np.iinfo(np.int64).max, f).min(axis=0)
        return np.where(f == np.iinfo(np.int64).max, -1, f)
