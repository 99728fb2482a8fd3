"""The ``device`` truth: docs/spec.md §1's time scale with the shape of a real A100 (docs/truth.md).

One iteration with ``n`` decodes at mean KV length ``ctx`` and a prefill chunk of ``c``
tokens after ``p`` cached ones takes, in ms::

    T = base + 1[n>0]·(decode_fixed + n·(decode_per_token + decode_attention·ctx))
             + 1[c>0]·(prefill_fixed + prefill_per_token·(E(n + c) − E(n))
                       + prefill_attention·c·(p + c/2))

times ``exp(σZ)`` (kernel jitter) and, with probability ``spike_prob``, a stall factor
uniform on ``[spike_lo, spike_hi]``. ``E(T)`` is the measured cost of the linear layers
on ``T`` token rows in token-equivalents: flat while the GEMMs are weight-bound, then a
staircase of tile waves (an extra token costs nothing until it opens a new wave). Every
number comes from ``sched/data/device_a100.json``, written by
``scripts/derive_device_truth.py`` from public A100 profiles; docs/truth.md says which
figure came from which file.

Unlike the ``analytic`` truth this is not any predictor's formula: the default predictor
for it is a cost table fitted on samples of it (:mod:`servecal.sched.fitted_table`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from servecal.costmodels.predictor import PLAN_QUANTILE, largest_fitting
from servecal.sched.power import DEFAULT_POWER_MODEL, PricedExecutor, load_power_model
from servecal.sched.truth import Drift, _Draws, drifted_at_power, truth_options, with_drift
from servecal.util.errors import InputError

if TYPE_CHECKING:  # a simulation never builds a frame: pandas only for draw()'s caller
    import pandas as pd

DEVICE_SCHEMA = "servecal.device_truth/1"
PROFILE_PATH = Path(__file__).resolve().parent / "data" / "device_a100.json"

#: ``device:key=value`` options (numbers); coefficients can be overridden too.
OPTIONS = (
    "sigma",
    "spike_prob",
    "spike_lo",
    "spike_hi",
    "power_w",
    "base",
    "decode_fixed",
    "decode_per_token",
    "decode_attention",
    "prefill_fixed",
    "prefill_per_token",
    "prefill_attention",
    "tile",
)


def _tiled(
    tokens: tuple[int, ...], excess: tuple[float, ...], tile: float
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Steps every ``tile`` rows: each multiple of ``tile`` keeps the cost the profile
    gives it, and every size in between costs what the next multiple costs."""
    k = int(tile)
    if k != tile or k < 1:
        raise ValueError("DeviceTruth tile must be a whole number of token rows >= 1")
    dense = _dense_steps(tokens, excess)
    top = len(dense) - 1
    multiples = tuple(range(k, top + 1, k))
    if not multiples:
        raise ValueError(f"DeviceTruth tile {k} is beyond the profiled sizes ({top})")
    return multiples, tuple(dense[t] for t in multiples)


def _dense_steps(tokens: tuple[int, ...], excess: tuple[float, ...]) -> list[float]:
    """``E(T)`` for every ``T`` in ``0..tokens[-1]``: the value at the smallest profiled
    size ``>= T`` (the kernel for ``T`` rows runs the tiles of that size), made
    non-decreasing (a guard: the derivation already stores an isotonic fit), ``E(0) = 0``."""
    dense = [0.0] * (tokens[-1] + 1)
    running = 0.0
    j = 0
    for t in range(1, tokens[-1] + 1):
        while tokens[j] < t:
            j += 1
        running = max(running, excess[j])
        dense[t] = running
    return dense


@dataclass(frozen=True)
class DeviceTruth:
    """Iteration cost with context-dependent attention, GEMM steps, jitter and stalls."""

    base: float
    decode_fixed: float
    decode_per_token: float
    decode_attention: float  # ms per decode per KV token
    prefill_fixed: float
    prefill_per_token: float
    prefill_attention: float  # ms per chunk token per attended token (prefix + c/2)
    step_tokens: tuple[int, ...] = field(repr=False)
    step_excess: tuple[float, ...] = field(repr=False)
    sigma: float = 0.0
    spike_prob: float = 0.0
    spike_lo: float = 2.0
    spike_hi: float = 3.0
    power_w: float | None = None
    #: the power model pricing its iterations (sched/power.py; ``None``: no energy
    #: unless ``power_w``): an A100 Llama-3-8B's, like the time shape
    power: str | None = DEFAULT_POWER_MODEL
    _dense: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in fields(self)[:7]:
            if not getattr(self, f.name) >= 0:
                raise ValueError(f"DeviceTruth.{f.name} must be >= 0")
        if self.prefill_per_token <= 0:
            raise ValueError("DeviceTruth.prefill_per_token must be > 0")
        t, e = self.step_tokens, self.step_excess
        if not t or len(t) != len(e) or list(t) != sorted(set(t)) or t[0] < 1:
            raise ValueError("DeviceTruth steps: need matching, increasing token counts >= 1")
        if self.sigma < 0:
            raise ValueError("DeviceTruth.sigma must be >= 0")
        if not 0 <= self.spike_prob < 1:
            raise ValueError("DeviceTruth.spike_prob must be in [0, 1)")
        if not 1 <= self.spike_lo <= self.spike_hi:
            raise ValueError("DeviceTruth spikes need 1 <= spike_lo <= spike_hi")
        if self.power_w is not None and self.power_w < 0:
            raise ValueError("DeviceTruth.power_w must be >= 0")
        object.__setattr__(self, "_dense", _dense_steps(t, e))

    # ------------------------------------------------------------ construction
    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        power: str | None = DEFAULT_POWER_MODEL,
        **overrides: float,
    ) -> DeviceTruth:
        """The truth of a ``servecal.device_truth/1`` file (default: the shipped A100 one),
        with any parameter of :data:`OPTIONS` overridden and ``power`` its power model.
        ``tile=K`` coarsens the linear layers' steps to one every ``K`` token rows: ``T``
        rows cost what the next multiple of ``K`` costs (a GEMM whose tiles are ``K`` rows
        tall)."""
        doc = _read_profile(Path(path) if path is not None else PROFILE_PATH)
        unknown = set(overrides) - set(OPTIONS)
        if unknown:
            raise ValueError(f"unknown DeviceTruth option(s) {sorted(unknown)}")
        tokens = tuple(int(t) for t in doc["steps"]["tokens"])
        excess = tuple(float(e) for e in doc["steps"]["excess"])
        tile = overrides.pop("tile", 0)
        if tile:
            tokens, excess = _tiled(tokens, excess, tile)
        params: dict[str, Any] = {**doc["coefficients"], **doc["noise"]}
        params.update(overrides)
        return cls(step_tokens=tokens, step_excess=excess, power=power, **params)

    @property
    def energy_source(self) -> str:
        if self.power_w is not None:
            return "model"  # constant power × duration, as asked for
        return "none" if self.power is None else load_power_model(self.power).source

    def describe(self) -> dict[str, Any]:
        """Every timing parameter (steps summarised by their hash), for run.json and the
        fitted table's key; the power model is not one (it prices, it does not time)."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("_dense", "power")}
        doc.pop("step_tokens")
        doc.pop("step_excess")
        doc["steps_sha256"] = _sha256([list(self.step_tokens), list(self.step_excess)])
        return {"kind": "device", **doc}

    def content_hash(self) -> str:
        """sha256 (hex) of every parameter: equal hashes, equal truths."""
        return _sha256(self.describe())

    # ------------------------------------------------------------ the median
    def _excess(self, tokens: int) -> float:
        dense = self._dense
        top = len(dense) - 1
        if tokens <= top:
            return dense[tokens]
        return dense[top] + (tokens - top)  # beyond the profile: slope 1 (β's fit)

    def median_ms(self, n_decode: int, chunk: int, ctx: float = 0.0, prefix: float = 0.0) -> float:
        """The noiseless cost of one iteration (scalars; the executor's hot path)."""
        t = self.base
        if n_decode > 0:
            t += self.decode_fixed + n_decode * (
                self.decode_per_token + self.decode_attention * ctx
            )
        if chunk > 0:
            e = self._excess(n_decode + chunk) - self._excess(n_decode)
            t += (
                self.prefill_fixed
                + self.prefill_per_token * e
                + self.prefill_attention * chunk * (prefix + 0.5 * chunk)
            )
        return t

    def median(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """:meth:`median_ms` over arrays (broadcast)."""
        n, c, x, p = np.broadcast_arrays(
            *(np.asarray(a, dtype=float) for a in (n_decode, chunk, ctx, prefix))
        )
        dense = np.asarray(self._dense)
        top = len(dense) - 1

        def excess(tokens: np.ndarray) -> np.ndarray:
            t = tokens.astype(np.int64)
            return dense[np.minimum(t, top)] + np.maximum(t - top, 0)

        e = excess(n + c) - excess(n)
        return (
            self.base
            + (n > 0)
            * (self.decode_fixed + n * (self.decode_per_token + self.decode_attention * x))
            + (c > 0)
            * (
                self.prefill_fixed
                + self.prefill_per_token * e
                + self.prefill_attention * c * (p + 0.5 * c)
            )
        )

    # ------------------------------------------------------------ noise
    def spike_factor(self, u: Any) -> Any:
        """The stall factor for a uniform draw ``u < spike_prob`` (``u / p`` is uniform)."""
        return self.spike_lo + (self.spike_hi - self.spike_lo) * (u / self.spike_prob)

    def draw(self, points: pd.DataFrame, repeats: int, rng: np.random.Generator) -> pd.DataFrame:
        """Samples (``servecal.samples/1`` columns) of ``repeats`` iterations per point, from
        the same distribution the executor draws from."""
        if repeats < 1:
            raise ValueError("repeats must be >= 1")
        rows = points.loc[points.index.repeat(repeats)].reset_index(drop=True)
        cols = [rows[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
        z = rng.standard_normal(len(rows))
        u = rng.random(len(rows))
        ms = self.median(*cols) * np.exp(self.sigma * z)
        spike = u < self.spike_prob
        if spike.any():
            ms[spike] *= self.spike_factor(u[spike])
        rows["ms"] = ms
        rows["energy_j"] = np.nan if self.power_w is None else self.power_w * rows["ms"] / 1000.0
        rows["rep"] = np.tile(np.arange(repeats), len(points))
        return rows

    def executor(self, rng: np.random.Generator, drift: Drift | None = None) -> Any:
        """The executor drawing from this truth, slowed by ``drift``; priced by
        :attr:`power` unless a constant ``power_w`` is given (energy from the drifted
        duration either way)."""
        if self.power_w is not None or self.power is None:
            return drifted_at_power(_DeviceExecutor(self, rng), drift, self.power_w)
        step = with_drift(_DeviceExecutor(self, rng), drift)
        return PricedExecutor(step, load_power_model(self.power))

    def oracle(self) -> DeviceOracle:
        """The predictor that knows this truth's median and jitter (not its stalls)."""
        return DeviceOracle(self)


class _DeviceExecutor:
    """:meth:`DeviceTruth.median_ms` inlined (the engine's hot path: no method calls, no
    numpy per iteration; draws come 4,096 at a time)."""

    energy_source = "none"  # the step cost alone: priced around it

    def __init__(self, truth: DeviceTruth, rng: np.random.Generator) -> None:
        t = truth
        self._coef = (t.base, t.decode_fixed, t.decode_per_token, t.decode_attention)
        self._prefill = (t.prefill_fixed, t.prefill_per_token, t.prefill_attention)
        self._dense = t._dense
        self._top = len(t._dense) - 1
        self._sigma = t.sigma
        self._spike_p = t.spike_prob
        self._spike = t.spike_factor
        self._noisy = t.sigma > 0 or t.spike_prob > 0
        self._draws = _Draws(rng)

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        base, dfix, dper, datt = self._coef
        t = base
        if n_decode > 0:
            t += dfix + n_decode * (dper + datt * ctx)
        if chunk > 0:
            pfix, pper, patt = self._prefill
            dense, top = self._dense, self._top
            hi = n_decode + chunk
            e = dense[hi] if hi <= top else dense[top] + (hi - top)
            e -= dense[n_decode] if n_decode <= top else dense[top] + (n_decode - top)
            t += pfix + pper * e + patt * chunk * (prefix + 0.5 * chunk)
        if self._noisy:
            z, u = self._draws.next()
            t *= math.exp(self._sigma * z)
            if u < self._spike_p:
                t *= self._spike(u)
        return t, None


@dataclass(frozen=True)
class DeviceOracle:
    """Exact quantiles of a :class:`DeviceTruth` without its stalls: ``median · exp(σ·Φ⁻¹(q))``,
    margin 0. A reference to grade fitted tables against, never a default."""

    truth: DeviceTruth

    def _scale(self, q: float) -> float:
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {q}")
        s = self.truth.sigma
        return 1.0 if s == 0 or q == 0.5 else math.exp(s * NormalDist().inv_cdf(q))

    def predict(
        self,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
        q: float = 0.5,
    ) -> float | np.ndarray:
        scale = self._scale(q)
        args = (n_decode, chunk, ctx, prefix)
        if all(np.isscalar(a) for a in args):
            n, c, x, p = (float(a) for a in args)  # type: ignore[arg-type]
            return self.truth.median_ms(int(n), int(c), x, p) * scale
        return self.truth.median(n_decode, chunk, ctx, prefix) * scale

    def margin(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> float | np.ndarray:
        if all(np.isscalar(a) for a in (n_decode, chunk, ctx, prefix)):
            return 0.0
        shape = np.broadcast(*(np.asarray(a) for a in (n_decode, chunk, ctx, prefix))).shape
        return np.zeros(shape)

    def max_chunk(
        self,
        n_decode: int,
        ctx: int,
        prefix: int,
        budget_ms: float,
        limit: int,
        q: float = PLAN_QUANTILE,
        use_margin: bool = True,
    ) -> int:
        """Largest ``c <= limit`` whose quantile fits ``budget_ms`` (the cost is
        non-decreasing in ``c``, so a binary search is exact)."""
        scale = self._scale(q)
        median = self.truth.median_ms
        return largest_fitting(
            lambda c: median(n_decode, c, ctx, prefix) * scale <= budget_ms, int(limit)
        )


def _sha256(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


_PROFILES: dict[Path, dict[str, Any]] = {}


def _read_profile(path: Path) -> dict[str, Any]:
    """Parse and check a ``servecal.device_truth/1`` file once per process."""
    path = path.resolve()
    if path in _PROFILES:
        return _PROFILES[path]
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a device truth file ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != DEVICE_SCHEMA:
        raise InputError(f"{path}: field 'schema': expected {DEVICE_SCHEMA!r}")
    for key in ("coefficients", "noise", "steps"):
        if not isinstance(doc.get(key), dict):
            raise InputError(f"{path}: field '{key}': missing or not an object")
    _PROFILES[path] = doc
    return doc


def excess_at(truth: DeviceTruth, tokens: int) -> float:
    """``E(tokens)`` of ``truth`` (for tests and docs)."""
    return truth._excess(int(tokens))


def step_edges(truth: DeviceTruth, lo: int, hi: int, min_jump: float) -> list[int]:
    """Token counts in ``(lo, hi]`` where ``E`` jumps by more than ``min_jump``."""
    dense = truth._dense
    hi = min(hi, len(dense) - 1)
    return [t for t in range(lo + 1, hi + 1) if dense[t] - dense[t - 1] > min_jump]


def device_truth(options: str = "") -> DeviceTruth:
    """``--truth device[:OPTIONS]``: the shipped A100-shaped truth, any parameter of
    :data:`OPTIONS` overridden (``device:sigma=0.05,spike_prob=0.002``); ``power=NAME``
    picks its power model (sched/power.py; ``power=none``: no energy)."""
    numbers, power = [], DEFAULT_POWER_MODEL
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key == "power":
            power = None if value == "none" else value
        else:
            numbers.append(item)
    kwargs = truth_options("device", ",".join(numbers), OPTIONS)
    if power is not None:  # a bad name is one line now, not in a worker
        try:
            load_power_model(power)
        except InputError as exc:
            raise InputError(
                f"--truth device:{options}: {exc}".replace(": --power ", ": power ")
            ) from None
    try:
        return DeviceTruth.load(power=power, **kwargs)
    except ValueError as exc:
        raise InputError(f"--truth device:{options}: {exc}") from None
