"""The deployment gate: does a cost table still hold on fresh measurements?

``servecal validate`` decides with a batch test whose false-alarm probability per
call is bounded by :attr:`GateConfig.false_alarm` (1%), and whose verdict is
checked, exactly, against the removal of every single row (docs/validate.md).

The unit of evidence is a *cluster*: one grid point of a samples file (its
repeats share the point's model error and, on real hardware, its timing state:
they are not independent draws), or one table grid box × drift region of a run
(a run rarely repeats a point). A cluster *votes*:

* **up** when a strict majority of its rows have ``log(actual / P50) > log(1 + s)``,
* **down** when a strict majority have ``log(actual / P50) < log(1 − s)``,

``s`` being the tolerated shift (``min_shift``, 5%). Null hypothesis of a scope
(all clusters, or one band's, :class:`Bands`): at every point the truth's median lies within
``×(1 ± s)`` of the table's P50. Under it each row lands beyond the tolerance
with probability ≤ ½, so a cluster's strict majority does with probability ≤ ½,
independently of other clusters: the number of votes is stochastically below
Binomial(clusters, ½). That is exact for any noise shape (stalls included) and
any model error within the tolerance.

The tail test checks the other promise, ``actual ≤ P99 + δ``: each cluster's
exceedance fraction lies in [0, 1]; under "the mean exceedance rate is at most
``tail_ratio × tail_p0``" (2%), Bennett's inequality bounds the chance of the
observed mean, whatever the correlation inside a cluster.

The point tests (:mod:`servecal.costmodels.drift.pointwise`) test each cluster on
its own rows: a sign test per point and direction against ``point_shift`` (±10%),
Holm over the ``2 × points`` of them. Their tolerance is twice the counts': a
table fitted on a grid is off by 5-13% at a few points *between* its grid values
(model and interpolation error; benchmarks/validate_gate.py), which a point's own
25 repeats would call drift at ±5%. They see what the counts dilute: a drift on
part of a band (every point with chunk ≥ 64 of a 16-128 grid), each point with
enough repeats to reject alone.

Family: 3 global tests (slowdown, speedup, tail) share a sixth of α, the point
tests a twelfth, the half-space tests on pooled rows at ±10%
(:mod:`servecal.costmodels.drift.scan`, samples only) another twelfth, the 2 × B
region tests (slowdown and speedup per band or
tail region, :class:`Bands`) the other two thirds (weighted Bonferroni): the
probability that any test fires on a table that holds is ≤ α. The regions get
the larger share because a drift is usually regional (long prefills, large
batches): with the default 1%, a region of 12 grid points that all moved beyond
the tolerance is reported, while the global tests need 11 points to speak at all.

Beyond the family: a table whose median shift lies beyond the tolerance, or
whose coverage of ``P99 + δ`` lies below the tolerated ``1 − tail_ratio × tail_p0``
(98%: the tail's tolerance, as ±5% is the median's), is never ``valid``. When no
test rejects, that is ``undecided`` ("measure more"): the evidence is not there
either way.

Stability: a row changes one cluster (its votes, its exceedance fraction, its
point tests, or removes it if it was its last row), so the global tests, its
bands' tests and the point tests' first step.
:func:`decide` re-evaluates the verdict for every *kind* of row of every cluster
(at most 10: far above / above / between / below / far below the tolerances ×
beyond the bound or not),
which covers every single-row removal exactly, in O(clusters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from servecal.costmodels.drift.pointwise import PointTests, sign_p_values
from servecal.costmodels.drift.regions import RegionGrid
from servecal.costmodels.drift.scan import HalfSpaces, RegionScan

#: Verdicts; ``undecided``: the verdict hangs on a single row.
VERDICTS = ("valid", "drifted", "undecided")
#: Most rows listed whose removal would flip a fragile verdict.
SHOW_FLIPS = 5


@dataclass(frozen=True)
class GateConfig:
    """What counts as a change, and the false-alarm budget of one call.

    ``min_shift``: the tolerated change of the median (5%), either way.
    ``false_alarm``: bound on the probability that a call on a table that
    holds says ``drifted``. ``tail_p0``: promised rate of ``actual > P99 + δ``;
    ``tail_ratio``: the tolerated rate as a multiple of it.
    """

    min_shift: float = 0.05
    point_shift: float = 0.10
    false_alarm: float = 0.01
    tail_p0: float = 0.01
    tail_ratio: float = 2.0
    grid: RegionGrid = field(default_factory=RegionGrid)

    def __post_init__(self) -> None:
        if not 0 < self.min_shift < 1:
            raise ValueError("min_shift must be in (0, 1)")
        if not self.min_shift <= self.point_shift < 1:
            raise ValueError("point_shift must be in [min_shift, 1)")
        if not 0 < self.false_alarm < 0.5:
            raise ValueError("false_alarm must be in (0, 0.5)")
        if not 0 < self.tail_p0 < 0.5:
            raise ValueError("tail_p0 must be in (0, 0.5)")
        if not (self.tail_ratio >= 1 and self.tail_ratio * self.tail_p0 < 0.5):
            raise ValueError("tail_ratio must be >= 1 with tail_ratio * tail_p0 < 0.5")

    @property
    def tau_up(self) -> float:
        return math.log1p(self.min_shift)

    @property
    def tau_down(self) -> float:
        return math.log1p(-self.min_shift)

    @property
    def point_tau(self) -> tuple[float, float]:
        """The point tests' tolerance, up and down (log ratio)."""
        return math.log1p(self.point_shift), math.log1p(-self.point_shift)

    @property
    def tail_null(self) -> float:
        return self.tail_ratio * self.tail_p0

    @property
    def alpha_global(self) -> float:
        """Level of each of the three global tests (a sixth of the bound)."""
        return self.false_alarm / 6 / 3

    @property
    def alpha_points(self) -> float:
        """Family-wise level of the per-point tests (a twelfth of the bound, Holm)."""
        return self.false_alarm / 12

    @property
    def alpha_scan(self) -> float:
        """Family-wise level of the half-space tests (a twelfth of the bound, Bonferroni)."""
        return self.false_alarm / 12

    def alpha_band(self, bands: int) -> float:
        """Level of each of the 2 × ``bands`` region tests (two thirds of the bound)."""
        return 2 * self.false_alarm / 3 / (2 * bands)

    @property
    def min_clusters(self) -> int:
        """Fewest clusters with which a global vote test can reject at all."""
        return _min_clusters(self.alpha_global)


def _min_clusters(alpha: float) -> int:
    return math.ceil(math.log2(1 / alpha))


@lru_cache(maxsize=4096)
def vote_critical(clusters: int, alpha: float) -> int:
    """Fewest votes of ``clusters`` with ``P(Binomial(clusters, ½) ≥ votes) ≤ alpha``
    (``clusters + 1``: none, the test cannot reject)."""
    if clusters <= 0:
        return 1
    k = np.arange(clusters + 2)
    tail = stats.binom.sf(k - 1, clusters, 0.5)  # P(X >= k)
    ok = np.flatnonzero(tail <= alpha)
    return int(ok[0]) if ok.size else clusters + 1


def vote_p_value(votes: int, clusters: int) -> float:
    """``P(Binomial(clusters, ½) ≥ votes)``."""
    if clusters <= 0:
        return 1.0
    return float(stats.binom.sf(votes - 1, clusters, 0.5))


def _bennett_h(u: float) -> float:
    return (1 + u) * math.log1p(u) - u


@lru_cache(maxsize=4096)
def tail_critical(clusters: int, null: float, alpha: float) -> float:
    """Mean exceedance fraction at which the tail test rejects (Bennett, values in [0, 1])."""
    if clusters <= 0:
        return math.inf
    v = null * (1 - null)
    target = math.log(1 / alpha) / (clusters * v)  # need h(t / v) >= target
    lo, hi = 0.0, 1.0
    while _bennett_h(hi) < target:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _bennett_h(mid) < target:
            lo = mid
        else:
            hi = mid
    return null + hi * v


def tail_p_value(mean: float, clusters: int, null: float) -> float:
    """Bennett bound on ``P(mean ≥ observed)`` under a mean rate ≤ ``null``."""
    if clusters <= 0 or mean <= null:
        return 1.0
    v = null * (1 - null)
    return min(1.0, math.exp(-clusters * v * _bennett_h((mean - null) / v)))


@dataclass(frozen=True)
class Bands:
    """The regions a drift is attributed to: bands of ``n_decode`` and of ``chunk``,
    the upper tails above their inner edges (``n_decode 8+``, ``n_decode 32+``,
    ``chunk 256+``) and, for a run, quarters of its time.

    Bands, not the ``n_decode × chunk`` cells of :class:`RegionGrid` (whose edges
    they use): a cell of a calibration grid holds a handful of points, too few
    for any test to speak at a 1% family-wise bound, while a band pools a whole
    row or column of the grid. The tails pool further: a slow-down of every
    prefill of 256 tokens or more spans two chunk bands, each too small on a small
    calibration to reject alone, but together one ``chunk 256+`` region. A
    slow-down of long prefills shows as the ``chunk 1024+`` band, one of large
    batches as an ``n_decode`` band or tail, a change in the middle of a run as its
    last quarters.

    A row lies in a fixed number of regions' columns (:meth:`of`); a tail it does
    not reach is the sentinel :attr:`size` (no region).
    """

    grid: RegionGrid = field(default_factory=RegionGrid)
    quarters: bool = False

    @property
    def n_tails(self) -> tuple[int, ...]:
        """``n_decode`` edges that start a tail region (not the first edge: almost every
        row; not the last: that tail is the top band)."""
        return self.grid.n_edges[1:-1]

    @property
    def c_tails(self) -> tuple[int, ...]:
        return self.grid.c_edges[1:-1]

    @property
    def _tails_start(self) -> int:
        return self.grid.n_buckets + self.grid.c_buckets + (4 if self.quarters else 0)

    @property
    def size(self) -> int:
        return self._tails_start + len(self.n_tails) + len(self.c_tails)

    def of(
        self, n_decode: np.ndarray, chunk: np.ndarray, quarter: np.ndarray | None = None
    ) -> np.ndarray:
        """``(rows, columns)``: each row's n_decode band, chunk band (time quarter), and
        each tail region it lies in (:attr:`size` where it does not)."""
        g = self.grid
        n, c = np.asarray(n_decode), np.asarray(chunk)
        nb = np.searchsorted(g.n_edges, n, side="right")
        cb = g.n_buckets + np.searchsorted(g.c_edges, c, side="right")
        cols = [nb, cb]
        if self.quarters:
            if quarter is None:
                raise ValueError("Bands(quarters=True) needs each row's quarter")
            cols.append(g.n_buckets + g.c_buckets + np.asarray(quarter))
        k = self._tails_start
        for values, edges in ((n, self.n_tails), (c, self.c_tails)):
            for edge in edges:
                cols.append(np.where(values >= edge, k, self.size))
                k += 1
        return np.stack(cols, axis=1).astype(np.int64)

    def describe(self, band: int) -> dict[str, Any]:
        """Label, axis and inclusive range (``None``: unbounded) of one region."""
        g = self.grid
        if band >= self._tails_start:
            t = band - self._tails_start
            axis, edge = (
                ("n_decode", self.n_tails[t])
                if t < len(self.n_tails)
                else ("chunk", self.c_tails[t - len(self.n_tails)])
            )
            return {"region": f"{axis} {edge}+", "axis": axis, "range": [edge, None]}
        if band < g.n_buckets:
            axis, (lo, hi) = "n_decode", g.describe(band * g.c_buckets)["n_decode"]
        elif band < g.n_buckets + g.c_buckets:
            axis, (lo, hi) = "chunk", g.describe(band - g.n_buckets)["chunk"]
        else:
            q = band - g.n_buckets - g.c_buckets
            return {"region": f"time quarter {q + 1} of 4", "axis": "time", "range": [q, q]}
        label = f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")
        return {"region": f"{axis} {label}", "axis": axis, "range": [lo, hi]}


def quarters_of(order: np.ndarray) -> np.ndarray:
    """Quarter (0-3) of each row by its rank in ``order`` (time or row order)."""
    rank = np.empty(order.size, dtype=np.int64)
    rank[np.argsort(order, kind="stable")] = np.arange(order.size)
    return np.minimum(4 * rank // max(order.size, 1), 3)


@dataclass(frozen=True)
class Clusters:
    """Per cluster: rows, raw counts behind its votes, exceedances, bands, median log ratio."""

    rows: np.ndarray  # rows in the cluster
    above: np.ndarray  # rows with r > tau_up
    below: np.ndarray  # rows with r < tau_down
    far_above: np.ndarray  # rows beyond the point tests' tolerance (point_shift)
    far_below: np.ndarray
    hits: np.ndarray  # rows with actual > P99 + δ
    bands: np.ndarray  # (clusters, 2 or 3): its n_decode, chunk (and time) bands
    median: np.ndarray  # median of r

    @property
    def size(self) -> int:
        return int(self.rows.size)

    @property
    def votes(self) -> tuple[np.ndarray, np.ndarray]:
        """Up and down votes (strict majorities beyond the tolerance)."""
        return 2 * self.above > self.rows, 2 * self.below > self.rows


def clusters_of(
    log_ratio: np.ndarray,
    exceed: np.ndarray,
    cluster: np.ndarray,
    bands: np.ndarray,
    config: GateConfig,
) -> tuple[Clusters, np.ndarray]:
    """Aggregate rows into :class:`Clusters`; also each row's cluster number."""
    keys, inverse = np.unique(cluster, return_inverse=True)
    g = keys.size
    rows = np.bincount(inverse, minlength=g)
    order = np.lexsort((log_ratio, inverse))
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    srt = log_ratio[order]
    median = 0.5 * (srt[starts + (rows - 1) // 2] + srt[starts + rows // 2])
    of_cluster = np.zeros((g, bands.shape[1]), dtype=np.int64)
    of_cluster[inverse] = bands

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=mask, minlength=g).astype(np.int64)

    return (
        Clusters(
            rows=rows,
            above=count(log_ratio > config.tau_up),
            below=count(log_ratio < config.tau_down),
            far_above=count(log_ratio > config.point_tau[0]),
            far_below=count(log_ratio < config.point_tau[1]),
            hits=count(exceed),
            bands=of_cluster,
            median=median,
        ),
        inverse,
    )


class _Family:
    """The family's verdict as a function of its aggregate counts (what a removal changes)."""

    def __init__(self, config: GateConfig, bands: int, has_tail: bool) -> None:
        self.config = config
        self.bands = bands
        self.has_tail = has_tail

    def global_rejects(self, g: int, up: int, down: int, tail_sum: float) -> tuple[bool, ...]:
        a = self.config.alpha_global
        crit = vote_critical(g, a)
        tail = False
        if self.has_tail and g > 0:
            tail = tail_sum / g >= tail_critical(g, self.config.tail_null, a)
        return up >= crit, down >= crit, tail

    def band_rejects(self, g: int, up: int, down: int) -> tuple[bool, bool]:
        crit = vote_critical(g, self.config.alpha_band(self.bands))
        return up >= crit, down >= crit


@dataclass(frozen=True)
class GateResult:
    """What :func:`decide` found."""

    verdict: str  # one of VERDICTS
    drifted: bool  # the family's verdict before the stability check
    reason: str
    tests: list[dict[str, Any]]
    regions: list[dict[str, Any]]
    clusters: int
    factor: float
    stability: dict[str, Any]
    flips: tuple[int, ...] = ()  # one row per (cluster, kind of row) whose removal flips
    #: per cluster (in ``cluster_of_row``'s numbering): Holm's slowed / sped-up points
    slowed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    sped_up: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    cluster_of_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cluster_median: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coverage: float | None = None
    #: the half-spaces the pooled tests reject (each with its clusters' ``mask``)
    found: list[dict[str, Any]] = field(default_factory=list)


def decide(
    log_ratio: np.ndarray,
    exceed: np.ndarray | None,
    cluster: np.ndarray,
    n_decode: np.ndarray,
    chunk: np.ndarray,
    config: GateConfig | None = None,
    quarter: np.ndarray | None = None,
    coords: dict[str, np.ndarray] | None = None,
    cuts: dict[str, Any] | None = None,
) -> GateResult:
    """Run the test family on checked rows and check the verdict against every row's removal.

    Per row: ``log_ratio = log(actual / P50)``; ``exceed``: ``actual > P99 + δ``
    (None when the table has no tail); ``cluster``: an integer id (rows of one
    grid point, or of one grid box, region cell and time quarter, share it);
    ``n_decode``, ``chunk`` and (for a run) ``quarter`` place it in its bands
    (constant within a cluster). Raises ``ValueError`` with fewer clusters than
    :attr:`GateConfig.min_clusters`.
    """
    config = config or GateConfig()
    log_ratio = np.asarray(log_ratio, dtype=float)
    hits = np.zeros(log_ratio.size, bool) if exceed is None else np.asarray(exceed, bool)
    family_bands = Bands(config.grid, quarters=quarter is not None)
    row_bands = family_bands.of(n_decode, chunk, quarter)
    c, inverse = clusters_of(log_ratio, hits, np.asarray(cluster), row_bands, config)
    if c.size < config.min_clusters:
        raise ValueError(
            f"only {c.size} grid points were checked; the gate needs at least "
            f"{config.min_clusters} to decide at a {config.false_alarm:.0%} false-alarm bound"
        )
    fam = _Family(config, family_bands.size, exceed is not None)
    state = _State.of(c, fam)
    points = PointTests.of(c.rows, c.far_above, c.far_below, config.alpha_points)
    scan = _scan(c, inverse, coords, cuts, config)
    drifted = state.drifted() or points.rejects or scan.rejects
    code = row_kinds(log_ratio, hits, config)
    pair, first = np.unique(inverse * KINDS + code, return_index=True)
    kinds = (pair // KINDS, pair % KINDS, first)
    flips = _single_row_flips(c, state, points, kinds, drifted, scan.rejects_without(*kinds[:2]))
    factor = math.exp(float(np.median(c.median)))
    coverage = None if exceed is None else 1.0 - float(hits.mean())
    unseen = [u for u in (_unseen(factor, coverage, config), scan.suggestive()) if u]
    verdict, reason = _verdict(flips, drifted, " and ".join(unseen) or None)
    slowed, sped_up = points.rejected()
    tests = state.describe_global() + _describe_points(points, slowed, sped_up)
    tests += scan.describe()
    return GateResult(
        verdict=verdict,
        drifted=drifted,
        reason=reason,
        tests=tests,
        regions=state.describe_bands(family_bands, slowed | sped_up),
        clusters=c.size,
        factor=factor,
        stability={
            "stable": not flips,
            "flipping_rows": flips[:SHOW_FLIPS],
            "method": "exact: each kind of row of each cluster removed in turn",
        },
        flips=tuple(flips),
        slowed=slowed,
        sped_up=sped_up,
        cluster_of_row=inverse,
        cluster_median=c.median,
        coverage=coverage,
        found=scan.found(c.median),
    )


def _scan(
    c: Clusters,
    inverse: np.ndarray,
    coords: dict[str, np.ndarray] | None,
    cuts: dict[str, Any] | None,
    config: GateConfig,
) -> RegionScan:
    """The half-space tests over the clusters (none without ``coords``)."""
    first = np.unique(inverse, return_index=True)[1]
    per_cluster = {a: np.asarray(v, dtype=float)[first] for a, v in (coords or {}).items()}
    spaces = HalfSpaces.of(per_cluster, cuts) if coords else HalfSpaces((), np.zeros((0, c.size)))
    return RegionScan.of(
        spaces, c.rows, c.far_above, c.far_below, config.alpha_scan, config.false_alarm
    )


def _unseen(factor: float, coverage: float | None, config: GateConfig) -> str | None:
    """What the numbers show beyond the promise when no test could confirm it, or None."""
    seen = []
    if abs(math.log(factor)) > config.tau_up:
        seen.append(f"median shift ×{factor:.3f} beyond ±{config.min_shift:.0%}")
    # the tail's tolerance, as ±min_shift is the median's: the promised exceedance
    # (1%) times tail_ratio; a holding table's coverage on a finite set scatters
    # around 99% (98.4-99.6% on 1,000 rows), so the promise itself is no threshold
    if coverage is not None and coverage < 1 - config.tail_null:
        seen.append(
            f"coverage {coverage:.2%} below the tolerated {1 - config.tail_null:.0%} "
            f"(promised {1 - config.tail_p0:.0%})"
        )
    return " and ".join(seen) or None


def _verdict(flips: list[int], drifted: bool, unseen: str | None) -> tuple[str, str]:
    """The verdict and why: never ``valid`` beside a shift or coverage beyond the promise."""
    if flips:
        return "undecided", (
            f"the verdict hangs on single rows: without row {flips[0]}"
            + (f" (or {len(flips) - 1} other kinds of row)" if len(flips) > 1 else "")
            + f" it would be {'valid' if drifted else 'drifted'}; measure more points"
        )
    if drifted:
        return "drifted", "a test of the family rejected at its share of the bound"
    if unseen:
        return "undecided", (
            f"{unseen}, but no test rejects at the false-alarm bound: measure more "
            "(more repeats per point, or more points)"
        )
    return "valid", "no test of the family rejected"


def _describe_points(
    points: PointTests, slowed: np.ndarray, sped_up: np.ndarray
) -> list[dict[str, Any]]:
    """The point tests as two rows of the test list: how many points Holm rejects."""
    out = []
    for name, p, hit in (("slowdown", points.p_up, slowed), ("speedup", points.p_down, sped_up)):
        out.append(
            {"test": name, "scope": "each point", "points": points.size,
             "rejected_points": int(hit.sum()), "p_value": float(p.min()) if p.size else 1.0,
             "critical": points.level, "alpha": points.alpha, "method": "sign test, Holm",
             "rejected": bool(hit.any())}
        )  # fmt: skip
    return out


@dataclass
class _State:
    """Aggregate counts of the family and which tests reject."""

    c: Clusters
    fam: _Family
    up: np.ndarray  # per cluster vote
    down: np.ndarray
    frac: np.ndarray  # per cluster exceedance fraction
    totals: tuple[int, int, int, float]  # clusters, up votes, down votes, sum of fractions
    b_g: np.ndarray  # per band: clusters, up votes, down votes
    b_up: np.ndarray
    b_down: np.ndarray
    glob: tuple[bool, ...]
    band: list[tuple[bool, bool]]

    @classmethod
    def of(cls, c: Clusters, fam: _Family) -> _State:
        up, down = c.votes
        frac = c.hits / c.rows
        flat = c.bands.ravel()
        rep = np.repeat

        def per_band(weights: np.ndarray | None) -> np.ndarray:
            w = None if weights is None else rep(weights, c.bands.shape[1])
            counts = np.bincount(flat, weights=w, minlength=fam.bands + 1)
            return counts[: fam.bands].astype(np.int64)  # the last: "in no tail region"

        totals = (c.size, int(up.sum()), int(down.sum()), float(frac.sum()))
        b_g, b_up, b_down = per_band(None), per_band(up), per_band(down)
        glob = fam.global_rejects(*totals)
        band = [
            fam.band_rejects(int(b_g[b]), int(b_up[b]), int(b_down[b])) for b in range(fam.bands)
        ]
        return cls(c, fam, up, down, frac, totals, b_g, b_up, b_down, glob, band)

    def drifted(self) -> bool:
        return any(self.glob) or any(a or b for a, b in self.band)

    def describe_global(self) -> list[dict[str, Any]]:
        g, up, down, tail_sum = self.totals
        config = self.fam.config
        a = config.alpha_global
        crit = vote_critical(g, a)
        out = [
            {"test": "slowdown", "scope": "all", "points": g, "votes": up, "critical": crit,
             "p_value": vote_p_value(up, g), "alpha": a, "rejected": self.glob[0]},
            {"test": "speedup", "scope": "all", "points": g, "votes": down, "critical": crit,
             "p_value": vote_p_value(down, g), "alpha": a, "rejected": self.glob[1]},
        ]  # fmt: skip
        if self.fam.has_tail:
            mean = tail_sum / g
            out.append(
                {"test": "tail", "scope": "all", "points": g, "exceed_rate": mean,
                 "critical": tail_critical(g, config.tail_null, a),
                 "null_rate": config.tail_null,
                 "p_value": tail_p_value(mean, g, config.tail_null), "alpha": a,
                 "rejected": self.glob[2]}
            )  # fmt: skip
        return out

    def describe_bands(self, bands: Bands, drifted_points: np.ndarray) -> list[dict[str, Any]]:
        """Every band holding a checked point: its tests, size, coverage, shift, and how
        many of its points the point tests rejected (a band whose own test holds but
        that holds such points is ``partly drifted``, never ``ok``)."""
        c, a = self.c, self.fam.config.alpha_band(self.fam.bands)
        out = []
        for b in np.flatnonzero(self.b_g):
            mine = (c.bands == b).any(axis=1)
            g = int(self.b_g[b])
            up, down = int(self.b_up[b]), int(self.b_down[b])
            crit = vote_critical(g, a)
            slow, fast = self.band[b]
            moved = int(drifted_points[mine].sum())
            status = _band_status(slow or fast, moved, crit <= g)
            d = bands.describe(int(b))
            d.update(
                {
                    "index": int(b),
                    "status": status,
                    "direction": "slowdown" if slow else ("speedup" if fast else None),
                    "points": g,
                    "rows": int(c.rows[mine].sum()),
                    "factor": math.exp(float(np.median(c.median[mine]))),
                    "coverage": (
                        1.0 - float(c.hits[mine].sum() / c.rows[mine].sum())
                        if self.fam.has_tail
                        else None
                    ),
                    "votes_up": up,
                    "votes_down": down,
                    "critical": crit,
                    "alpha": a,
                    "p_value": min(vote_p_value(up, g), vote_p_value(down, g)),
                    "drifted_points": moved,
                }
            )
            out.append(d)
        out.sort(key=lambda x: (x["status"] != "drift", x["p_value"]))
        return out


def _band_status(rejected: bool, drifted_points: int, can_reject: bool) -> str:
    if rejected:
        return "drift"
    if drifted_points:
        return "partly drifted"
    return "ok" if can_reject else "too few points"


#: Kinds of row (:func:`row_kinds`): 2 bits for the point tests' tolerance, 3 for the rest.
KINDS = 32


def row_kinds(log_ratio: np.ndarray, hits: np.ndarray, config: GateConfig) -> np.ndarray:
    """What a row's removal changes: ``16·far above + 8·far below + 4·above + 2·below +
    hit`` (beyond the point tests' tolerance, beyond the counts' tolerance, beyond the
    tail bound). Rows of one cluster and kind flip the verdict alike."""
    up, down = config.point_tau
    return (
        16 * (log_ratio > up)
        + 8 * (log_ratio < down)
        + 4 * (log_ratio > config.tau_up)
        + 2 * (log_ratio < config.tau_down)
        + hits
    )


def _single_row_flips(
    c: Clusters,
    s: _State,
    points: PointTests,
    kinds: tuple[np.ndarray, np.ndarray, np.ndarray],
    drifted: bool,
    scan_still: np.ndarray,
) -> list[int]:
    """Rows whose removal flips the verdict, one per (cluster, kind of row): exact.

    ``kinds``: for each (cluster, kind) pair present, the cluster, the kind code
    (:func:`row_kinds`) and one row of that kind; ``scan_still``: per pair, whether a
    half-space test still rejects without it. A removal changes one
    cluster: the global tests and its bands' tests; every other band keeps its
    answer.
    """
    g_all, up_all, down_all, tail_sum = s.totals
    band_rejects = np.array([a or b for a, b in s.band])
    n_rejecting = int(band_rejects.sum())
    fam = s.fam
    flipped: list[int] = []
    # every kind's point p-values without one of its rows, at once (scipy per call is slow)
    cl, kind = kinds[0], kinds[1]
    rest = np.maximum(c.rows[cl] - 1, 0)
    p_ups = sign_p_values(c.far_above[cl] - (kind >> 4 & 1), rest)
    p_downs = sign_p_values(c.far_below[cl] - (kind >> 3 & 1), rest)
    for g, code, row, p_up, p_down, still in zip(*kinds, p_ups, p_downs, scan_still, strict=True):
        ia, ib, ih = code >> 2 & 1, code >> 1 & 1, code & 1
        n, a, b, h = int(c.rows[g]), int(c.above[g]), int(c.below[g]), int(c.hits[g])
        if n == 1:  # its last row: the cluster goes
            gone, nu, nd, nf = 1, 0, 0, 0.0
        else:
            gone, nf = 0, (h - ih) / (n - 1)
            nu, nd = int(2 * (a - ia) > n - 1), int(2 * (b - ib) > n - 1)
        du, dd = nu - int(s.up[g]), nd - int(s.down[g])
        answer = bool(still) or points.rejects_without(
            int(g), float(p_up), float(p_down), bool(gone)
        )
        answer = answer or any(
            fam.global_rejects(g_all - gone, up_all + du, down_all + dd, tail_sum - s.frac[g] + nf)
        )
        mine = c.bands[g]
        mine = mine[mine < fam.bands]  # not the "in no tail region" sentinel
        for band in mine:
            answer = answer or any(
                fam.band_rejects(
                    int(s.b_g[band]) - gone, int(s.b_up[band]) + du, int(s.b_down[band]) + dd
                )
            )
        answer = answer or n_rejecting - int(band_rejects[mine].sum()) > 0
        if answer != drifted:
            flipped.append(int(row))
    return flipped
