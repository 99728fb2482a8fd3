"""Ground-truth iteration costs for the simulated executor (never the predictor itself).

* :class:`AnalyticTruth`: the docs/spec.md §1 formula × log-normal noise ``exp(σZ)``, with
  rare spikes (probability ``spike_prob``, duration × ``spike_factor``).
* :class:`SampledTruth`: bootstrap from measured samples at the nearest grid point.
* :class:`~servecal.sched.device_truth.DeviceTruth` (``device``): docs/spec.md §1's scale with
  an A100's shape (context-dependent attention, GEMM steps, jitter, stalls).
* :class:`Drift`: any of them slowed by ``factor`` from ``at_ms`` on, optionally
  only inside an ``(n_decode, chunk)`` region.

``truth.executor(rng)`` binds a :class:`numpy.random.Generator` and returns an
:class:`~servecal.sched.executor.Executor`. Random draws are taken in blocks so a
scalar iteration costs no numpy call.

Drift is applied in one place, :func:`with_drift`, around any executor's step cost:
a built-in truth's ``executor(rng, drift)`` wraps its own step cost before pricing
its energy (constant power, or a power model: energy from the drifted duration), and
a user's truth (``module:attr``) gets it around its executor from the loader
(:class:`~servecal.sched.truth_protocol.GuardedTruth`), with nothing to write.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.sched.executor import Executor
from servecal.util.errors import InputError

_BLOCK = 4096


class _Draws:
    """Standard normals and uniforms drawn 4096 at a time, handed out as floats."""

    __slots__ = ("_rng", "_z", "_u", "_i")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._i = _BLOCK

    def next(self) -> tuple[float, float]:
        if self._i == _BLOCK:
            self._z = self._rng.standard_normal(_BLOCK).tolist()
            self._u = self._rng.random(_BLOCK).tolist()
            self._i = 0
        i = self._i
        self._i = i + 1
        return self._z[i], self._u[i]


@dataclass(frozen=True)
class Drift:
    """From ``at_ms`` on, iterations with ``n_decode`` in ``n_range`` and ``chunk`` in
    ``c_range`` (inclusive; ``None``: any) take ``factor`` × as long.

    ``at_share`` (instead of a time): from that share of the run's arrival span on
    (``30%``: from 30% of the time between 0 and the last arrival), so that a drift
    starts at the same point of a run whatever its rate (a max-goodput search);
    :meth:`resolved` turns it into ``at_ms`` once the requests are known.
    """

    at_ms: float
    factor: float
    n_range: tuple[int, int] | None = None
    c_range: tuple[int, int] | None = None
    at_share: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.at_ms < math.inf:
            raise ValueError("Drift.at_ms must be finite and >= 0")
        if self.at_share is not None and not 0 <= self.at_share <= 1:
            raise ValueError("Drift.at_share must be in [0, 1] (a share of the run)")
        if not 0 < self.factor < math.inf:
            raise ValueError("Drift.factor must be finite and > 0")
        for r in (self.n_range, self.c_range):
            if r is not None and not 0 <= r[0] <= r[1]:
                raise ValueError(f"Drift range {r} must satisfy 0 <= lo <= hi")

    def resolved(self, span_ms: float) -> Drift:
        """This drift with ``at_share`` turned into ``at_ms`` for a run whose last
        request arrives at ``span_ms`` (unchanged when it is given as a time)."""
        if self.at_share is None:
            return self
        return Drift(self.at_share * span_ms, self.factor, self.n_range, self.c_range)

    def applies(self, n_decode: int, chunk: int, now_ms: float) -> bool:
        if now_ms < self.at_ms:
            return False
        if self.n_range is not None and not self.n_range[0] <= n_decode <= self.n_range[1]:
            return False
        return self.c_range is None or self.c_range[0] <= chunk <= self.c_range[1]


class DriftedExecutor:
    """Any executor, its iterations ``drift.factor`` × as long where ``drift`` applies
    (and their energy, when the executor reports one, × as much)."""

    __slots__ = ("_inner", "_drift", "energy_source")

    def __init__(self, inner: Executor, drift: Drift) -> None:
        self._inner = inner.execute
        self._drift = drift
        self.energy_source = inner.energy_source

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        ms, energy = self._inner(n_decode, chunk, ctx, prefix, now_ms)
        drift = self._drift
        if drift.applies(n_decode, chunk, now_ms):
            ms *= drift.factor
            energy = None if energy is None else energy * drift.factor
        return ms, energy


def with_drift(executor: Executor, drift: Drift | None) -> Executor:
    """``executor`` slowed by ``drift`` (unchanged without one): the one place drift is
    applied, to a built-in truth's step cost and a user's executor alike."""
    return executor if drift is None else DriftedExecutor(executor, drift)


class ConstantPower:
    """Any executor's iterations priced at a constant ``power_w``: energy = power ×
    duration (the duration as drifted, when the executor is a :class:`DriftedExecutor`)."""

    __slots__ = ("_inner", "_power", "energy_source")

    def __init__(self, inner: Executor, power_w: float) -> None:
        self._inner = inner.execute
        self._power = power_w
        self.energy_source = "model"

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        ms, _ = self._inner(n_decode, chunk, ctx, prefix, now_ms)
        return ms, self._power * ms / 1000.0


def drifted_at_power(step: Executor, drift: Drift | None, power_w: float | None) -> Executor:
    """A built-in truth's executor: its step cost drifted, then priced at ``power_w``."""
    executor = with_drift(step, drift)
    return executor if power_w is None else ConstantPower(executor, power_w)


@dataclass(frozen=True)
class AnalyticTruth:
    """docs/spec.md §1 cost × ``exp(sigma·Z)``, × ``spike_factor`` with probability ``spike_prob``.

    ``power_w`` (optional) models energy as constant power × duration.
    """

    formula: AnalyticPredictor = field(default_factory=AnalyticPredictor)
    sigma: float = 0.0
    spike_prob: float = 0.0
    spike_factor: float = 3.0
    power_w: float | None = None

    def __post_init__(self) -> None:
        if self.sigma < 0:
            raise ValueError("AnalyticTruth.sigma must be >= 0")
        if not 0 <= self.spike_prob < 1:
            raise ValueError("AnalyticTruth.spike_prob must be in [0, 1)")
        if self.spike_factor < 1:
            raise ValueError("AnalyticTruth.spike_factor must be >= 1")
        if self.power_w is not None and self.power_w < 0:
            raise ValueError("AnalyticTruth.power_w must be >= 0")

    @property
    def energy_source(self) -> str:
        return "none" if self.power_w is None else "model"

    def oracle(self) -> AnalyticPredictor:
        """The predictor that knows this truth's formula and noise (not its spikes)."""
        f = self.formula
        return AnalyticPredictor(
            f.base, f.decode_fixed, f.decode_per_token, f.prefill_fixed, f.prefill_per_token,
            sigma=self.sigma,
        )  # fmt: skip

    def executor(self, rng: np.random.Generator, drift: Drift | None = None) -> Executor:
        """Its iterations drawn from ``rng``, slowed by ``drift``, priced at ``power_w``."""
        return drifted_at_power(_AnalyticExecutor(self, rng), drift, self.power_w)


class _AnalyticExecutor:
    """The step cost alone (no energy: :class:`ConstantPower` prices it)."""

    energy_source = "none"

    def __init__(self, truth: AnalyticTruth, rng: np.random.Generator) -> None:
        f = truth.formula
        self._coef = (f.base, f.decode_fixed, f.decode_per_token, f.prefill_fixed)
        self._per_token = f.prefill_per_token
        self._sigma = truth.sigma
        self._spike_p = truth.spike_prob
        self._spike_f = truth.spike_factor
        self._noisy = truth.sigma > 0 or truth.spike_prob > 0
        self._draws = _Draws(rng)

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        base, dfix, dper, pfix = self._coef
        t = base
        if n_decode > 0:
            t += dfix + dper * n_decode
        if chunk > 0:
            t += pfix + self._per_token * chunk
        if self._noisy:
            z, u = self._draws.next()
            t *= math.exp(self._sigma * z)
            if u < self._spike_p:
                t *= self._spike_f
        return t, None


class NearestPoint:
    """The measured point nearest to an iteration's shape, without a numpy call.

    Nearness is Euclidean in ``log1p`` of ``(n_decode, chunk, ctx, prefix)``. That
    distance is a sum over the axes, and measured points lie on a grid (a few values
    per axis), so the nearest grid *cell* is the nearest value on each axis on its
    own. Shapes are whole token counts, so each axis keeps, per midpoint between two
    of its values (in ``log1p``), the smallest count past it: the nearest value is
    one C bisection of the count, no logarithm (the same answer as comparing
    ``log1p``, exactly). When that cell was measured it is the nearest point; when it
    was not (an infeasible or unmeasured cell) a scan over every point answers, once
    per distinct shape. Built once per truth.
    """

    def __init__(self, points: np.ndarray) -> None:
        self._coords = np.log1p(np.asarray(points, dtype=float))
        values = [sorted(set(self._coords[:, a].tolist())) for a in range(self._coords.shape[1])]
        self._past = [
            [_first_count_past((lo + hi) / 2) for lo, hi in zip(v, v[1:], strict=False)]
            for v in values
        ]
        self._sizes = [len(v) for v in values]
        self._cell: dict[int, int] = {}
        for i, row in enumerate(self._coords.tolist()):
            key = self._key(*(values[a].index(x) for a, x in enumerate(row)))
            self._cell.setdefault(key, i)
        self._scanned: dict[tuple[int, ...], int] = {}

    def _key(self, a: int, b: int, c: int, d: int) -> int:
        _, nb, nc, nd = self._sizes
        return ((a * nb + b) * nc + c) * nd + d

    def index(self, n_decode: int, chunk: int, ctx: int, prefix: int) -> int:
        """Row of ``points`` nearest to the shape (whole token counts)."""
        # written out, no loop or helper: this runs once per simulated iteration
        by_n, by_chunk, by_ctx, by_prefix = self._past
        _, nb, nc, nd = self._sizes
        key = ((bisect_right(by_n, n_decode) * nb + bisect_right(by_chunk, chunk)) * nc
               + bisect_right(by_ctx, ctx)) * nd + bisect_right(by_prefix, prefix)  # fmt: skip
        i = self._cell.get(key)
        if i is not None:
            return i
        shape = (n_decode, chunk, ctx, prefix)
        i = self._scanned.get(shape)
        if i is None:
            q = np.log1p(np.asarray(shape, dtype=float))
            i = self._scanned[shape] = int(np.argmin(((self._coords - q) ** 2).sum(axis=1)))
        return i


def _first_count_past(mid: float) -> int:
    """The smallest whole count ``k >= 0`` with ``log1p(k) > mid``."""
    k = max(0, math.floor(math.expm1(mid)))
    while math.log1p(k) <= mid:
        k += 1
    while k > 0 and math.log1p(k - 1) > mid:
        k -= 1
    return k


@dataclass(frozen=True)
class SampledTruth:
    """Bootstrap: an iteration's duration (and energy) is a measured row, drawn at random
    among the rows of the grid point nearest to its shape.

    Nearness is Euclidean in ``log1p`` of ``(n_decode, chunk, ctx, prefix)``, since
    profiling grids are roughly geometric; :class:`NearestPoint` finds it, built once
    per truth and shared by every run that draws from it.
    """

    path: str
    points: np.ndarray = field(repr=False)  # (P, 4) grid points
    ms: tuple[np.ndarray, ...] = field(repr=False)  # per point
    energy: tuple[np.ndarray, ...] | None = field(repr=False)  # per point, or None
    nearest: NearestPoint = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nearest", NearestPoint(self.points))
        # plain lists: a draw indexes them per iteration, without numpy scalars
        object.__setattr__(self, "_ms_lists", tuple(m.tolist() for m in self.ms))
        e = None if self.energy is None else tuple(x.tolist() for x in self.energy)
        object.__setattr__(self, "_energy_lists", e)

    @classmethod
    def load(cls, path: str | Path) -> SampledTruth:
        """Read a samples file (Parquet or CSV, docs/design.md "Samples"); bad file: InputError."""
        from servecal.costmodels.samples import POINT_COLUMNS, read_sample_columns

        columns = read_sample_columns(path)
        # Group rows by grid point in numpy, not with a pandas groupby (a tenth of the
        # time: this runs at every simulate's start). The sort is stable, so each
        # point's rows keep the file's order; points come out sorted, as groupby's.
        keys = np.column_stack([columns[c].astype(float) for c in POINT_COLUMNS])
        order = np.lexsort(keys.T[::-1])
        keys = keys[order]
        starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)])
        points = keys[starts]

        def per_point(column: str) -> tuple[np.ndarray, ...]:
            return tuple(np.split(columns[column].astype(float)[order], starts[1:]))

        energy = per_point("energy_j") if not np.isnan(columns["energy_j"]).any() else None
        return cls(str(path), points, per_point("ms"), energy)

    @property
    def energy_source(self) -> str:
        return "none" if self.energy is None else "samples"

    def executor(self, rng: np.random.Generator, drift: Drift | None = None) -> Executor:
        """Its iterations drawn from ``rng``, slowed by ``drift`` (the samples' energy too)."""
        return with_drift(_SampledExecutor(self, rng), drift)


class _SampledExecutor:
    def __init__(self, truth: SampledTruth, rng: np.random.Generator) -> None:
        self._index = truth.nearest.index
        self._ms: tuple[list[float], ...] = truth._ms_lists  # type: ignore[attr-defined]
        self._energy: tuple[list[float], ...] | None = truth._energy_lists  # type: ignore[attr-defined]
        self._draws = _Draws(rng)
        self.energy_source = truth.energy_source

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        i = self._index(n_decode, chunk, round(ctx), round(prefix))
        rows = self._ms[i]
        _, u = self._draws.next()
        j = min(int(u * len(rows)), len(rows) - 1)
        t = rows[j]
        e = None if self._energy is None else self._energy[i][j]
        return t, e


def parse_drift(spec: str) -> Drift:
    """``AT:FACTOR[:REGION]``, e.g. ``60s:1.10``, ``30%:1.15`` or
    ``500ms:1.3:n=0-64,c=512-4096``.

    ``AT`` is seconds (``60``, ``60s``), milliseconds (``500ms``) or a share of the
    run's arrival span (``30%``, :attr:`Drift.at_share`).
    """
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise InputError(f"--drift {spec!r}: expected AT:FACTOR[:REGION], e.g. 60s:1.10")
    at, factor = parts[0].strip().lower(), parts[1].strip()
    try:
        share = float(at[:-1]) / 100.0 if at.endswith("%") else None
        if share is not None:
            at_ms = 0.0
        else:
            at_ms = float(at[:-2]) if at.endswith("ms") else float(at.rstrip("s")) * 1000.0
        fac = float(factor)
        ranges: dict[str, tuple[int, int]] = {}
        if len(parts) == 3:
            for item in parts[2].split(","):
                axis, _, rng_text = item.partition("=")
                lo, _, hi = rng_text.partition("-")
                if axis.strip() not in ("n", "c") or not hi:
                    raise ValueError(item)
                ranges[axis.strip()] = (int(lo), int(hi))
        return Drift(at_ms, fac, ranges.get("n"), ranges.get("c"), at_share=share)
    except ValueError as exc:
        raise InputError(
            f"--drift {spec!r}: {exc}; expected AT:FACTOR[:n=LO-HI,c=LO-HI] with AT in s, "
            "ms or % of the run, e.g. 60s:1.10 or 30%:1.15"
        ) from None


def truth_options(name: str, options: str, allowed: tuple[str, ...]) -> dict[str, float]:
    """``key=value,...`` → numbers; unknown keys and non-numbers are one-line InputErrors."""
    kwargs: dict[str, float] = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key not in allowed:
            raise InputError(f"--truth {name}:{options}: unknown option {key!r} (known: {allowed})")
        try:
            kwargs[key] = float(value)
        except ValueError:
            raise InputError(
                f"--truth {name}:{options}: {key} needs a number, got {value!r}"
            ) from None
        if not math.isfinite(kwargs[key]):
            raise InputError(
                f"--truth {name}:{options}: {key} needs a finite number, got {value!r}"
            )
    return kwargs


def analytic_truth(options: str = "") -> AnalyticTruth:
    """``--truth analytic[:OPTIONS]``: ``OPTIONS`` like ``sigma=0.1,spike_prob=0.001,
    spike_factor=3,power_w=300`` (any of them; none: the noiseless formula)."""
    kwargs = truth_options("analytic", options, ("sigma", "spike_prob", "spike_factor", "power_w"))
    try:
        return AnalyticTruth(**kwargs)
    except ValueError as exc:
        raise InputError(f"--truth analytic:{options}: {exc}") from None
