"""A cost table as the four linear latency knobs of llm-d's inference simulator.

llm-d-inference-sim (``latency-calculator: per-token``) models

* a prefill of ``n`` uncached prompt tokens as ``prefill-overhead + n ·
  prefill-time-per-token``;
* every later token as ``inter-token-latency``;
* both multiplied by a load factor that grows linearly from 1 (one request in
  flight) to ``time-factor-under-load`` (``max-num-seqs`` in flight).

A cost table is far richer (mixed iterations, context, prefix), so the knobs are
a least-squares fit of the table's P50 on two slices of its grid, each with its
error reported:

* decode: ``T(n, chunk=0, ctx) = ITL · (1 + (f − 1)(n − 1)/(M − 1))`` over every
  grid ``n_decode`` in ``1..M`` and every ``ctx`` (the simulator has no context
  axis; the fit averages over the table's contexts), linear in ``n − 1``:
  ``ITL`` is the intercept, ``f = 1 + slope·(M − 1)/ITL``;
* prefill: ``T(0, chunk=c) = overhead + c · per_token`` over the grid's chunks
  ``c ≥ 1`` at the first ``ctx`` and no cached prefix.

The ``…-std-dev`` knobs (Gaussian jitter in the simulator) are ``(P99 − P50) /
2.326`` averaged over the same points, when the table has a P99.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servecal.costmodels.errors import InputError
from servecal.costmodels.table import CostTable

#: ``Φ⁻¹(0.99)``: P99 − P50 of a normal distribution in standard deviations.
Z99 = 2.326


@dataclass(frozen=True)
class LinearFit:
    """``y ≈ intercept + slope · x`` by least squares, and its relative errors."""

    intercept: float
    slope: float
    points: int
    rms_rel: float
    max_rel: float

    def describe(self) -> str:
        return f"{self.points} points, RMS error {self.rms_rel:.1%}, max {self.max_rel:.1%}"


def linear_fit(x: np.ndarray, y: np.ndarray) -> LinearFit:
    """Least squares of ``y`` on ``[1, x]`` with an intercept >= 0 (a duration: when the
    free fit's is negative, the line through the origin), and its relative errors."""
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    if a < 0:
        a, b = 0.0, float(x @ y / (x @ x))
    rel = (a + b * x - y) / y
    return LinearFit(float(a), float(b), int(x.size), float(np.sqrt(np.mean(rel**2))),
                     float(np.max(np.abs(rel))))  # fmt: skip


@dataclass(frozen=True)
class SimProfile:
    """The fitted knobs (ms; the load factor has no unit) and the two fits."""

    max_num_seqs: int
    top_n_decode: int
    prefill_overhead_ms: float
    prefill_per_token_ms: float
    prefill_std_ms: float | None
    itl_ms: float
    itl_std_ms: float | None
    load_factor: float
    decode_fit: LinearFit
    prefill_fit: LinearFit


def _std(table: CostTable, n: np.ndarray, c: np.ndarray, ctx: np.ndarray) -> float | None:
    if 0.99 not in table.quantiles:
        return None
    p50, _ = table.lookup(0.5, n, c, ctx, 0)
    p99, _ = table.lookup(0.99, n, c, ctx, 0)
    return float(np.mean((p99 - p50) / Z99))


def fit_sim_profile(table: CostTable, max_num_seqs: int = 256) -> SimProfile:
    """Fit the simulator's knobs to ``table`` (see the module doc)."""
    if max_num_seqs < 2:
        raise InputError("--max-num-seqs must be >= 2 (the load factor needs two loads)")
    axes = table.axes
    ns = np.asarray([n for n in axes["n_decode"] if 1 <= n <= max_num_seqs], dtype=float)
    cs = np.asarray([c for c in axes["chunk"] if c >= 1], dtype=float)
    if ns.size < 2 or cs.size < 2:
        raise InputError(
            "cannot fit llm-d-sim knobs: the table needs two n_decode values in "
            f"1..{max_num_seqs} and two chunk values >= 1 (it has {list(axes['n_decode'])} "
            f"and {list(axes['chunk'])})"
        )
    n, ctx = (a.ravel() for a in np.meshgrid(ns, np.asarray(axes["ctx"], dtype=float)))
    zero = np.zeros_like(n)
    decode_ms, _ = table.lookup(0.5, n, zero, ctx, 0)
    decode = linear_fit(n - 1, np.asarray(decode_ms, dtype=float))
    ctx0 = np.full_like(cs, float(axes["ctx"][0]))
    prefill_ms, _ = table.lookup(0.5, np.zeros_like(cs), cs, ctx0, 0)
    prefill = linear_fit(cs, np.asarray(prefill_ms, dtype=float))
    itl = decode.intercept
    if not itl > 0:
        raise InputError(f"cannot fit llm-d-sim knobs: the decode fit's intercept is {itl:.3g} ms")
    factor = max(1.0, 1.0 + decode.slope * (max_num_seqs - 1) / itl)
    return SimProfile(
        max_num_seqs=max_num_seqs,
        top_n_decode=int(ns[-1]),
        prefill_overhead_ms=prefill.intercept,
        prefill_per_token_ms=max(0.0, prefill.slope),
        prefill_std_ms=_std(table, np.zeros_like(cs), cs, ctx0),
        itl_ms=itl,
        itl_std_ms=_std(table, n, zero, ctx),
        load_factor=factor,
        decode_fit=decode,
        prefill_fit=prefill,
    )


def go_duration(ms: float) -> str:
    """A Go duration string (``time.ParseDuration``): ``12.345ms`` or ``250.0us``."""
    if ms >= 1.0:
        return f"{ms:.3f}ms"
    return f"{ms * 1000.0:.1f}us"


def sim_yaml(profile: SimProfile, source: str) -> str:
    """The profile as the simulator's YAML config (its own key names)."""
    p = profile
    lines = [
        "# llm-d-inference-sim latency profile (latency-calculator: per-token), fitted by",
        f"# servecal export --format llm-d-sim to the P50s of {source}:",
        f"#   decode: ITL x load factor (max-num-seqs {p.max_num_seqs}): {p.decode_fit.describe()}",
        f"#   prefill: overhead + tokens x per-token: {p.prefill_fit.describe()}",
        "engine: vllm",
        f"max-num-seqs: {p.max_num_seqs}",
        "latency-calculator: per-token",
        f"prefill-overhead: {go_duration(p.prefill_overhead_ms)}",
        f"prefill-time-per-token: {go_duration(p.prefill_per_token_ms)}",
    ]
    if p.prefill_std_ms is not None:
        lines.append(f"prefill-time-std-dev: {go_duration(p.prefill_std_ms)}")
    lines.append(f"inter-token-latency: {go_duration(p.itl_ms)}")
    if p.itl_std_ms is not None:
        # the simulator refuses an ITL std-dev above 30% of the mean
        lines.append(
            f"inter-token-latency-std-dev: {go_duration(min(p.itl_std_ms, 0.3 * p.itl_ms))}"
        )
    lines.append(f"time-factor-under-load: {p.load_factor:.3f}")
    return "\n".join(lines) + "\n"


def fit_notes(profile: SimProfile) -> list[str]:
    """The fit's errors, one line each (``servecal export`` prints them)."""
    p = profile
    out = [
        f"decode fit (ITL {go_duration(p.itl_ms)}, load factor {p.load_factor:.3f} at "
        f"max-num-seqs {p.max_num_seqs}): {p.decode_fit.describe()} of the table's P50",
        f"prefill fit (overhead {go_duration(p.prefill_overhead_ms)}, "
        f"{go_duration(p.prefill_per_token_ms)}/token): "
        f"{p.prefill_fit.describe()} of the table's P50",
    ]
    if p.top_n_decode < p.max_num_seqs:
        out.append(
            f"the table's n_decode stops at {p.top_n_decode}: the load factor extrapolates "
            f"the decode fit to max-num-seqs {p.max_num_seqs}"
        )
    if math.isclose(p.load_factor, 1.0) and p.decode_fit.slope <= 0:
        out.append("the table's decode time does not grow with the batch: load factor 1")
    return out
