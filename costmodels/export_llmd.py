"""A cost table as the four linear latency knobs of llm-d's inference simulator.

Written for llm-d-inference-sim **v0.10.2** (``pkg/common/config.go``, unchanged in the
rules used here at main ``eec055a``, 2026-08-20). With ``latency-calculator: per-token``
it models

* a prefill of ``n`` uncached prompt tokens as ``prefill-overhead + n ·
  prefill-time-per-token``;
* every later token as ``inter-token-latency``;
* both multiplied by a load factor that grows linearly from 1 (one request in
  flight) to ``time-factor-under-load`` (``max-num-seqs`` in flight).

A cost table is far richer (mixed iterations, context, prefix), so the knobs are
a least-squares fit of the table's P50 on two slices of its grid, minimising the
*relative* error (the error the command reports), each with its error reported:

* decode: ``T(n, chunk=0, ctx) = ITL · (1 + (f − 1)(n − 1)/(M − 1))`` over every
  grid ``n_decode`` in ``1..M`` and every ``ctx`` (the simulator has no context
  axis: ``--ctx`` fits one context instead), linear in ``n − 1``: ``ITL`` is the
  intercept, ``f = 1 + slope·(M − 1)/ITL`` (a free intercept below 0 is replaced by
  the fastest decode of the slice, and only the slope fitted);
* prefill: ``T(0, chunk=c) = overhead + c · per_token`` over the grid's chunks
  ``c ≥ 1`` at the first ``ctx`` and no cached prefix (a free intercept below 0 by a
  line through the origin).

A fit whose RMS relative error exceeds :data:`MAX_FIT_RMS` is refused unless forced.
The ``…-std-dev`` knobs (Gaussian jitter in the simulator) are ``(P99 − P50) /
2.326`` averaged over the same points, when the table has a P99.

The file holds only keys of the simulator's ``Configuration`` (its YAML is decoded
without a strict mode, so an unknown key would be silently ignored), durations are
quoted Go duration strings of whole nanoseconds (``time.ParseDuration`` reads them back
exactly), and the ITL std-dev is capped where the simulator's start-up check puts it:
``float32(std) > 0.3 * float32(itl)`` on the *written* nanoseconds is refused.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from servecal.costmodels.export import ExportOptions, Rendered
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError, NoticeWarning

#: ``Φ⁻¹(0.99)``: P99 − P50 of a normal distribution in standard deviations.
Z99 = 2.326
#: The largest RMS relative error of either fit that is written without ``--force``.
MAX_FIT_RMS = 0.25
#: The simulator's cap on the ITL std-dev, as a fraction of the ITL (config.go).
ITL_STD_CAP = 0.3
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class LinearFit:
    """``y ≈ intercept + slope · x`` by least squares of the relative error, and its
    relative errors."""

    intercept: float
    slope: float
    points: int
    rms_rel: float
    max_rel: float

    def describe(self) -> str:
        return f"{self.points} points, RMS error {self.rms_rel:.1%}, max {self.max_rel:.1%}"


def linear_fit(x: np.ndarray, y: np.ndarray, fallback_intercept: float = 0.0) -> LinearFit:
    """Least squares of ``(intercept + slope·x − y) / y`` with an intercept >= 0 (a
    duration): when the free fit's is negative, the intercept is ``fallback_intercept``
    and only the slope is fitted."""
    if not np.all(y > 0):
        raise InputError("cannot fit llm-d-sim knobs: the table has a time <= 0 ms to fit")
    design = np.column_stack([np.ones_like(x), x]) / y[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    if a < 0:
        a, u = float(fallback_intercept), x / y
        b = float(u @ (1.0 - a / y) / (u @ u))
    rel = (a + b * x - y) / y
    return LinearFit(float(a), float(b), int(x.size), float(np.sqrt(np.mean(rel**2))),
                     float(np.max(np.abs(rel))))  # fmt: skip


@dataclass(frozen=True)
class SimProfile:
    """The fitted knobs (ms; the load factor has no unit) and the two fits."""

    max_num_seqs: int
    top_n_decode: int
    decode_ctx: float | None
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
    return max(0.0, float(np.mean((p99 - p50) / Z99)))


def fit_sim_profile(
    table: CostTable, max_num_seqs: int = 256, decode_ctx: float | None = None
) -> SimProfile:
    """Fit the simulator's knobs to ``table`` (see the module doc); ``decode_ctx``: fit
    the decode knobs at that one context instead of over all the table's."""
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
    ctx_axis = np.asarray(axes["ctx"], dtype=float)
    if decode_ctx is not None:
        if not ctx_axis[0] <= decode_ctx <= ctx_axis[-1]:
            raise InputError(
                f"--ctx {decode_ctx:g} is outside the table's ctx axis "
                f"[{ctx_axis[0]:g}, {ctx_axis[-1]:g}]"
            )
        ctx_axis = np.asarray([float(decode_ctx)])
    n, ctx = (a.ravel() for a in np.meshgrid(ns, ctx_axis))
    zero = np.zeros_like(n)
    decode_ms = np.asarray(table.lookup(0.5, n, zero, ctx, 0)[0], dtype=float)
    # the ITL is a time at one request in flight, never 0: else the fastest decode
    decode = linear_fit(n - 1, decode_ms, fallback_intercept=float(decode_ms.min()))
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
        decode_ctx=decode_ctx,
        prefill_overhead_ms=prefill.intercept,
        prefill_per_token_ms=max(0.0, prefill.slope),
        prefill_std_ms=_std(table, np.zeros_like(cs), cs, ctx0),
        itl_ms=itl,
        itl_std_ms=_std(table, n, zero, ctx),
        load_factor=factor,
        decode_fit=decode,
        prefill_fit=prefill,
    )


def check_fit(profile: SimProfile, force: bool = False) -> None:
    """Refuse (:class:`InputError`, one line) a profile whose decode or prefill fit has
    an RMS relative error above :data:`MAX_FIT_RMS`; with ``force``, warn
    (:class:`NoticeWarning`, one ``warning:`` line in the CLI) instead."""
    bad = [
        (what, fit)
        for what, fit in (("decode", profile.decode_fit), ("prefill", profile.prefill_fit))
        if fit.rms_rel > MAX_FIT_RMS
    ]
    if not bad:
        return
    said = "; ".join(f"{what} RMS error {fit.rms_rel:.1%}" for what, fit in bad)
    hint = ""
    if any(what == "decode" for what, _ in bad) and profile.decode_ctx is None:
        hint = " (the simulator has no context axis: fit one context with --ctx N)"
    if not force:
        raise InputError(
            f"llm-d-sim fit too far from the table's P50: {said} > {MAX_FIT_RMS:.0%}{hint}; "
            "--force writes it anyway"
        )
    warnings.warn(
        NoticeWarning(f"llm-d-sim {said} > {MAX_FIT_RMS:.0%}, written anyway (--force)"),
        stacklevel=2,
    )


def to_ns(ms: float) -> int:
    """Milliseconds as whole nanoseconds (a Go ``time.Duration``), at least 0."""
    return max(0, int(round(ms * NS_PER_MS)))


def go_duration(ns: int) -> str:
    """Whole nanoseconds as a Go duration string that ``time.ParseDuration`` reads back
    exactly: ``1.347123ms``, ``404.2us``, ``17ns``, ``0s``."""
    if ns == 0:
        return "0s"
    for unit, per in (("ms", NS_PER_MS), ("us", 1000)):
        if ns >= per:
            whole, frac = divmod(ns, per)
            digits = len(str(per)) - 1
            tail = f"{frac:0{digits}d}".rstrip("0")
            return f"{whole}.{tail}{unit}" if tail else f"{whole}{unit}"
    return f"{ns}ns"


def capped_itl_std_ns(itl_ns: int, std_ns: int) -> int:
    """``std_ns``, or the largest whole-nanosecond std-dev the simulator accepts for
    ``itl_ns``: its check is ``float32(std) > 0.3 * float32(itl)`` in float32."""
    bound = np.float32(ITL_STD_CAP) * np.float32(itl_ns)
    return min(std_ns, int(math.floor(float(bound))))


def sim_config(profile: SimProfile) -> dict[str, int | float | str]:
    """The keys and values the file holds: durations as whole nanoseconds."""
    p = profile
    out: dict[str, int | float | str] = {
        "max-num-seqs": p.max_num_seqs,
        "latency-calculator": "per-token",
        "prefill-overhead": to_ns(p.prefill_overhead_ms),
        "prefill-time-per-token": to_ns(p.prefill_per_token_ms),
    }
    if p.prefill_std_ms is not None:
        out["prefill-time-std-dev"] = to_ns(p.prefill_std_ms)
    itl = to_ns(p.itl_ms)
    out["inter-token-latency"] = itl
    if p.itl_std_ms is not None:
        out["inter-token-latency-std-dev"] = capped_itl_std_ns(itl, to_ns(p.itl_std_ms))
    out["time-factor-under-load"] = round(p.load_factor, 6)
    return out


#: The keys :func:`sim_config` writes that are durations (Go ``time.Duration``).
DURATION_KEYS = frozenset(
    {
        "prefill-overhead",
        "prefill-time-per-token",
        "prefill-time-std-dev",
        "inter-token-latency",
        "inter-token-latency-std-dev",
    }
)


def sim_yaml(profile: SimProfile, source: str) -> str:
    """The profile as the simulator's YAML config (its own key names, nothing else)."""
    p = profile
    where = "every context" if p.decode_ctx is None else f"ctx {p.decode_ctx:g}"
    lines = [
        "# llm-d-inference-sim (v0.10.2) latency profile, fitted by",
        f"# servecal export --format llm-d-sim to the P50s of {source}:",
        f"#   decode ({where}): ITL x load factor (max-num-seqs {p.max_num_seqs}): "
        f"{p.decode_fit.describe()}",
        f"#   prefill: overhead + tokens x per-token: {p.prefill_fit.describe()}",
    ]
    for key, value in sim_config(p).items():
        if key in DURATION_KEYS:
            lines.append(f'{key}: "{go_duration(int(value))}"')
        elif isinstance(value, float):
            lines.append(f"{key}: {value:.6f}")
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def fit_notes(profile: SimProfile) -> list[str]:
    """The fit's errors and what the simulator will make of the knobs, one line each
    (``servecal export`` prints them)."""
    p = profile
    config = sim_config(p)
    itl_ns = int(config["inter-token-latency"])
    where = "every context" if p.decode_ctx is None else f"ctx {p.decode_ctx:g}"
    out = [
        f"decode fit at {where} (ITL {go_duration(itl_ns)}, load factor {p.load_factor:.3f} "
        f"at max-num-seqs {p.max_num_seqs}): {p.decode_fit.describe()} of the table's P50",
        f"prefill fit (overhead {go_duration(int(config['prefill-overhead']))}, "
        f"{go_duration(int(config['prefill-time-per-token']))}/token): "
        f"{p.prefill_fit.describe()} of the table's P50",
    ]
    if p.itl_std_ms is not None and int(config["inter-token-latency-std-dev"]) < to_ns(
        p.itl_std_ms
    ):
        out.append(
            f"ITL std-dev capped at 30% of the ITL (the simulator's limit): the table's "
            f"P99 - P50 implies {go_duration(to_ns(p.itl_std_ms))}"
        )
    if p.top_n_decode < p.max_num_seqs:
        out.append(
            f"the table's n_decode stops at {p.top_n_decode}: the load factor extrapolates "
            f"the decode fit to max-num-seqs {p.max_num_seqs}"
        )
    if math.isclose(p.load_factor, 1.0) and p.decode_fit.slope <= 0:
        out.append("the table's decode time does not grow with the batch: load factor 1")
    whole_ms = itl_ns // NS_PER_MS
    if itl_ns % NS_PER_MS:
        out.append(
            f"the simulator samples latencies in whole ms (v0.10.2 truncates): ITL "
            f"{go_duration(itl_ns)} runs as {whole_ms} ms at one request in flight"
        )
    return out


def render(table: CostTable, options: ExportOptions) -> Rendered:
    """The ``llm-d-sim`` exporter: the fitted knobs as the simulator's YAML."""
    profile = fit_sim_profile(table, options.max_num_seqs, options.decode_ctx)
    check_fit(profile, options.force)
    text = sim_yaml(profile, options.source)
    return Rendered(text.encode(), text.count("\n"), tuple(fit_notes(profile)), "lines")
