"""The online drift monitor: one prediction-vs-actual record in, a state out.

Fed every engine iteration (``observe(record)``, O(1)), it runs three
sequential tests on the iteration's log residual ``log(actual / P50)``:

* *slowdown* / *speedup*: one-sided CUSUMs of the standardised residual
  (thresholds from the calibration's noise profile, see ``thresholds``);
* *tail*: a Bernoulli CUSUM on ``actual > P99 + δ`` against the promised 1%,
  which catches a broken P99 even when the median is fine;

and the same three per ``(n_decode, chunk)`` region for attribution. States
go ``ok → warn → drift``: *warn* when a global statistic passes
``warn_level`` of its threshold (and back to *ok* below half of that), *drift*
when one crosses it. *drift* is latched: the table stays suspect until it is
recalibrated, which ``summary()`` recommends, naming the regions.

Records are duck-typed: any mapping or object with ``n_decode, chunk,
pred_p50, pred_p99, margin, actual_ms`` (``index``, ``start_ms``, ``ctx``,
``prefix`` optional). With a ``reference`` (``TableMedian`` of a cost table) the
median comes from it instead of ``pred_p50``, and iterations outside its grid
are counted apart (see ``reference``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servecal.costmodels.drift.detectors import Cusum
from servecal.costmodels.drift.profile import NoiseProfile
from servecal.costmodels.drift.regions import RegionGrid
from servecal.costmodels.drift.thresholds import Thresholds, derive_thresholds

STATES = ("ok", "warn", "drift")


@dataclass(frozen=True)
class DriftConfig:
    """Knobs without units: what counts as relevant, and the false-alarm budget.

    ``min_shift``: smallest relative change of the median worth acting on (0.05 =
    5%); the CUSUMs are tuned to it. ``false_alarm_every``: in-control average run
    length of *each* of the three global detectors, in iterations.
    ``tail_p0``: the promised rate of ``actual > P99 + δ``; ``tail_ratio``: the
    rate the tail test is tuned to catch, as a multiple of it.
    """

    min_shift: float = 0.05
    false_alarm_every: float = 1e7
    tail_p0: float = 0.01
    tail_ratio: float = 2.0
    warn_level: float = 0.5
    grid: RegionGrid = field(default_factory=RegionGrid)

    def __post_init__(self) -> None:
        if not 0 < self.min_shift < 1:
            raise ValueError("DriftConfig.min_shift must be in (0, 1)")
        if not self.false_alarm_every >= 10:
            raise ValueError("DriftConfig.false_alarm_every must be >= 10")
        if not 0 < self.tail_p0 < 0.5:
            raise ValueError("DriftConfig.tail_p0 must be in (0, 0.5)")
        if not 1 < self.tail_ratio < 1 / self.tail_p0:
            raise ValueError("DriftConfig.tail_ratio must be in (1, 1/tail_p0)")
        if not 0 < self.warn_level < 1:
            raise ValueError("DriftConfig.warn_level must be in (0, 1)")


def field_of(record: Any, name: str, default: Any = None) -> Any:
    """``record[name]`` or ``record.name`` (records are duck-typed)."""
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


class _Detectors:
    """The three CUSUMs for one scope (the whole stream, or one region)."""

    __slots__ = ("up", "down", "tail", "n", "hits", "sum_effect")

    def __init__(self, th: Thresholds) -> None:
        self.up = Cusum(th.k_up, th.h_up)
        self.down = Cusum(th.k_down, th.h_down)
        self.tail = Cusum(0.0, th.h_tail)
        self.n = 0
        self.hits = 0
        self.sum_effect = 0.0

    def update(self, u: float, e: float, hit: bool, inc: float, index: int, t: float) -> None:
        self.n += 1
        self.hits += hit
        self.sum_effect += e
        self.up.update(u, index, t, e)
        self.down.update(-u, index, t, e)
        self.tail.update(inc, index, t)

    def levels(self) -> dict[str, float]:
        return {"slowdown": self.up.level, "speedup": self.down.level, "tail": self.tail.level}

    def by_name(self, name: str) -> Cusum:
        return {"slowdown": self.up, "speedup": self.down, "tail": self.tail}[name]


class DriftMonitor:
    """Streaming drift detection against a cost table's promises (see module doc)."""

    def __init__(
        self, profile: NoiseProfile, config: DriftConfig | None = None, reference: Any = None
    ) -> None:
        self.profile = profile
        self.reference = reference
        self.config = config or DriftConfig()
        self.thresholds = derive_thresholds(
            profile,
            min_shift=self.config.min_shift,
            arl0=self.config.false_alarm_every,
            tail_p0=self.config.tail_p0,
            tail_ratio=self.config.tail_ratio,
        )
        self.grid = self.config.grid
        self.state = "ok"
        self.changes: list[dict[str, Any]] = []
        self.alarms: list[dict[str, Any]] = []
        self._all = _Detectors(self.thresholds)
        self._regions: dict[int, _Detectors] = {}
        self._region_fired: dict[int, set[str]] = {}
        self._count = 0
        self._last_ms = 0.0
        self._skipped = 0
        self._outside = 0
        self._outside_hits = 0

    # -- streaming ---------------------------------------------------------
    def observe(self, record: Any) -> dict[str, str]:
        """Consume one iteration; returns the columns to add to its row."""
        p50 = float(field_of(record, "pred_p50", math.nan))
        actual = float(field_of(record, "actual_ms", math.nan))
        index = field_of(record, "index")
        index = self._count if index is None else int(index)
        t = float(field_of(record, "start_ms", self._last_ms) or 0.0)
        self._count += 1
        self._last_ms = t
        n_decode = int(field_of(record, "n_decode", 0))
        chunk = int(field_of(record, "chunk", 0))
        bound = float(field_of(record, "pred_p99", p50)) + float(field_of(record, "margin", 0.0))
        hit = actual > bound
        ref = self.reference
        if ref is not None:
            ctx = float(field_of(record, "ctx", 0.0) or 0.0)
            pre = float(field_of(record, "prefix", 0.0) or 0.0)
            if not ref.in_domain(n_decode, chunk, ctx, pre):
                self._outside += 1  # the table clamps here: evidence of its reach, not drift
                self._outside_hits += hit
                return {"drift_state": self.state}
            p50 = ref(n_decode, chunk, ctx, pre)
        if not (p50 > 0 and actual > 0 and math.isfinite(p50) and math.isfinite(actual)):
            self._skipped += 1  # an idle or malformed iteration carries no evidence
            return {"drift_state": self.state}
        r = math.log(actual / p50)
        u = self.profile.standardise(r)
        e = self.profile.effect(r)
        th = self.thresholds
        inc = th.tail_hit if hit else th.tail_miss
        self._all.update(u, e, hit, inc, index, t)
        region = self.grid.index(n_decode, chunk)
        reg = self._regions.get(region)
        if reg is None:
            reg = self._regions[region] = _Detectors(th)
            self._region_fired[region] = set()
        reg.update(u, e, hit, inc, index, t)
        for name, level in reg.levels().items():
            if level >= 1.0:
                self._region_fired[region].add(name)
        self._advance(index, t)
        return {"drift_state": self.state}

    def _advance(self, index: int, t: float) -> None:
        levels = self._all.levels()
        fired = [d for d, lv in levels.items() if lv >= 1.0]
        known = {a["detector"] for a in self.alarms}
        for det in fired:
            if det not in known:
                self.alarms.append(self._alarm(det, index, t))
        top = max(levels.values())
        if self.state == "drift":
            return
        if fired:
            self._move("drift", index, t, fired[0])
        elif top >= self.config.warn_level and self.state == "ok":
            self._move("warn", index, t, max(levels, key=levels.__getitem__))
        elif top < self.config.warn_level / 2 and self.state == "warn":
            self._move("ok", index, t, None)

    def _move(self, to: str, index: int, t: float, detector: str | None) -> None:
        self.changes.append(
            {"index": index, "time_ms": t, "from": self.state, "to": to, "detector": detector}
        )
        self.state = to

    def _alarm(self, det: str, index: int, t: float) -> dict[str, Any]:
        c = self._all.by_name(det)
        out: dict[str, Any] = {
            "detector": det,
            "index": index,
            "time_ms": t,
            "onset_index": c.onset,
            "onset_ms": c.onset_ms,
        }
        out.update(self._effect(det, c))
        return out

    # -- estimates ---------------------------------------------------------
    def _effect(self, det: str, c: Cusum) -> dict[str, float]:
        if det == "tail":
            th = self.thresholds
            hits = (c.seg_sum - c.seg_n * th.tail_miss) / (th.tail_hit - th.tail_miss)
            return {"exceed_rate": hits / c.seg_n if c.seg_n else 0.0}
        return {"factor": self.profile.factor(c.seg_aux_mean)}

    def _region_report(self, region: int, reg: _Detectors) -> dict[str, Any]:
        levels = reg.levels()
        fired = self._region_fired[region]
        status = "drift" if fired else ("warn" if max(levels.values()) >= 0.5 else "ok")
        mean_det = "slowdown" if levels["slowdown"] >= levels["speedup"] else "speedup"
        c = reg.by_name(mean_det)
        if c.seg_n >= 10:
            factor = self._effect(mean_det, c)["factor"]
        else:
            factor = self.profile.factor(reg.sum_effect / reg.n)
        out = self.grid.describe(region)
        out.update(
            {
                "iterations": reg.n,
                "status": status,
                "detectors": sorted(fired),
                "factor": factor,
                "coverage": 1.0 - reg.hits / reg.n,
                "evidence": max(levels.values()),
            }
        )
        return out

    def regions(self) -> list[dict[str, Any]]:
        """Every visited region, most suspicious first."""
        reps = [self._region_report(r, d) for r, d in self._regions.items()]
        reps.sort(key=lambda x: (x["status"] != "drift", -x["evidence"]))
        return reps

    def recommendation(self, regions: list[dict[str, Any]] | None = None) -> str:
        regions = self.regions() if regions is None else regions
        advice = self._advice(regions)
        if self._outside:
            cov = 1.0 - self._outside_hits / self._outside
            advice += (
                f"; {self._outside} iterations fell outside the table's grid "
                f"({cov:.1%} within P99 + margin there): extend the calibration grid"
            )
        return advice

    def _advice(self, regions: list[dict[str, Any]]) -> str:
        if self.state != "drift":
            return f"no drift detected over {self._all.n} iterations; the table holds"
        bad = [r for r in regions if r["status"] == "drift"]
        if not bad:  # only the pooled stream had the evidence: name the likeliest
            bad = [r for r in regions if r["status"] == "warn"][:3] or regions[:1]
        if len(bad) * 2 >= max(len(regions), 2):
            return "recalibrate the whole table: drift in most visited regions"
        parts = [
            f"{r['region']} (×{r['factor']:.3f} of P50, {r['coverage']:.1%} covered)" for r in bad
        ]
        return "recalibrate " + "; ".join(parts)

    @property
    def slowdown_factor(self) -> float | None:
        """Size of the slow-down under way (actual/P50 vs calibration), or None.

        Known from the moment the slow-down CUSUM passes the warn level (or has
        alarmed) until its excursion ends: the estimate adaptive margins lean on.
        """
        up = self._all.up
        if not up.seg_n or (up.level < self.config.warn_level and self.state != "drift"):
            return None
        return self.profile.factor(up.seg_aux_mean)

    def _overall_factor(self) -> float | None:
        """Median shift since the mean alarm's onset, else over the whole stream."""
        for a in self.alarms:
            if a["detector"] != "tail":
                c = self._all.by_name(a["detector"])
                if c.seg_n:
                    return self._effect(a["detector"], c)["factor"]
                return a["factor"]
        return self.profile.factor(self._all.sum_effect / self._all.n) if self._all.n else None

    def summary(self) -> dict[str, Any]:
        """Change points, drifted regions and by how much, and what to do (for run.json)."""
        regions = self.regions()
        n = self._all.n
        return {
            "drift": {
                "state": self.state,
                "iterations": n,
                "checked": n,  # inside the table's grid (hull on every axis) and tested
                "skipped": self._skipped,
                "outside_domain": {
                    "iterations": self._outside,
                    "coverage": 1.0 - self._outside_hits / self._outside if self._outside else None,
                },
                "changes": list(self.changes),
                "alarms": list(self.alarms),
                "coverage": 1.0 - self._all.hits / n if n else None,
                "coverage_promised": 1.0 - self.config.tail_p0,
                "factor": self._overall_factor(),
                "regions": regions,
                "recommendation": self.recommendation(regions),
                "noise": self.profile.to_dict(),
                "thresholds": self.thresholds.to_dict(),
            }
        }
