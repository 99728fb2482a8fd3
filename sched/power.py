"""Power models: what one iteration of a given composition draws, for simulated energy.

A simulated iteration has no meter, so its energy is *modelled* and says so: the energy
source of a run priced here is ``model:NAME``. The model (docs/energy.md) is

    P(n, c) = clip(a + b·log2(n + c), decode_w, max_w)     while an iteration runs
    P       = idle_w                                        between iterations

``n + c`` is the number of token rows the iteration's linear layers multiply: a few
rows are weight-bound (the GPU streams weights and waits on memory: ``decode_w``, flat
in the batch size, as Splitwise measured), many rows are compute-bound (prefill climbs
towards the board limit ``max_w``). ``a, b`` come from Splitwise's A100 prefill peaks,
``decode_w`` from ML.ENERGY's vLLM Llama-3-8B runs on an A100, ``idle_w`` from a
measured idle A100; ``scripts/derive_power_model.py`` fits them and records the fit
errors in the model's JSON. Context length enters through the iteration's duration
(long attention is memory-bound: it takes longer at the same power), not its power.

:class:`PricedExecutor` wraps any executor and replaces its energy with the model's,
idle gaps included (charged to the iteration after the gap), so a run's iteration
energies sum to the device energy from its first iteration's start to its last one's
end. It never mixes: every iteration of a priced run is priced.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecal.plugins import Registry
from servecal.util.errors import InputError

POWER_SCHEMA = "servecal.power_model/1"
DATA_DIR = Path(__file__).resolve().parent / "data" / "power"
#: The shipped A100 Llama-3-8B model's file (scripts/derive_power_model.py writes it).
A100_LLAMA3_8B = DATA_DIR / "a100_llama3_8b.json"
#: Shipped power models by name (``--power NAME``), each naming its JSON file's path by
#: import path; a path to a JSON file works too.
POWER_MODELS = Registry(
    "power model", "--power", "a power model JSON file (docs/energy.md)", user_form="PATH"
)
# fmt: off
POWER_MODELS.add("a100-llama3-8b", "servecal.sched.power:A100_LLAMA3_8B", "an A100-SXM4-80GB serving Llama-3-8B, fitted from Splitwise's and ML.ENERGY's measurements")  # noqa: E501
# fmt: on
#: The device truth's default: it has an A100 Llama-3-8B's shape (docs/truth.md).
DEFAULT_POWER_MODEL = "a100-llama3-8b"
#: Row counts whose power is tabled once (beyond: computed per iteration).
_TABLED = 16384


@dataclass(frozen=True)
class PowerModel:
    """Iteration power from its composition; see the module docstring."""

    name: str
    device: str
    tdp_w: float
    idle_w: float
    decode_w: float
    max_w: float
    intercept_w: float  # a: power at one row on the rising (compute-bound) line
    slope_w: float  # b: watts per doubling of the rows
    meta: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _table: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key in ("tdp_w", "idle_w", "decode_w", "max_w"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"PowerModel.{key} must be finite and >= 0, got {value!r}")
        if not self.idle_w <= self.decode_w <= self.max_w:
            raise ValueError("PowerModel needs idle_w <= decode_w <= max_w")
        if not (math.isfinite(self.intercept_w) and math.isfinite(self.slope_w)):
            raise ValueError("PowerModel intercept_w and slope_w must be finite")
        if self.slope_w < 0:
            raise ValueError("PowerModel.slope_w must be >= 0 (more rows never draw less)")
        table = [self.decode_w] + [self._power(rows) for rows in range(1, _TABLED + 1)]
        object.__setattr__(self, "_table", table)

    @property
    def source(self) -> str:
        """The energy source a run priced by this model records: ``model:NAME``."""
        return f"model:{self.name}"

    def _power(self, rows: float) -> float:
        p = self.intercept_w + self.slope_w * math.log2(rows)
        return min(self.max_w, max(self.decode_w, p))

    def power_w(self, n_decode: int, chunk: int) -> float:
        """Watts while an iteration of ``n_decode`` decodes and a ``chunk``-token prefill runs."""
        rows = n_decode + chunk
        if rows <= _TABLED:
            return self._table[rows]
        return self._power(rows)

    def iteration_j(self, n_decode: int, chunk: int, ms: float) -> float:
        """Joules of one iteration lasting ``ms``."""
        return self.power_w(n_decode, chunk) * ms / 1000.0

    def describe(self) -> dict[str, Any]:
        """The parameters and where they came from (for ``run.json`` and docs)."""
        return {
            "name": self.name,
            "device": self.device,
            "tdp_w": self.tdp_w,
            "idle_w": self.idle_w,
            "decode_w": self.decode_w,
            "max_w": self.max_w,
            "intercept_w": self.intercept_w,
            "slope_w": self.slope_w,
            **self.meta,
        }


def power_model_from_doc(doc: Any, where: str) -> PowerModel:
    """A :class:`PowerModel` from a parsed ``servecal.power_model/1`` document."""
    if not isinstance(doc, dict) or doc.get("schema") != POWER_SCHEMA:
        raise InputError(f"{where}: field 'schema': expected {POWER_SCHEMA!r}")
    params = doc.get("parameters")
    if not isinstance(params, dict):
        raise InputError(f"{where}: field 'parameters': missing or not an object")
    names = ("tdp_w", "idle_w", "decode_w", "max_w", "intercept_w", "slope_w")
    values: dict[str, float] = {}
    for key in names:
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: field 'parameters.{key}': expected a number")
        values[key] = float(value)
    name, device = doc.get("name"), doc.get("device")
    if not isinstance(name, str) or not name or not isinstance(device, str):
        raise InputError(f"{where}: fields 'name' and 'device' must be strings")
    meta = {k: doc[k] for k in ("setting", "sources", "fit") if k in doc}
    try:
        return PowerModel(name, device, meta=meta, **values)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


_LOADED: dict[str, PowerModel] = {}


def load_power_model(spec: str) -> PowerModel:
    """``--power NAME`` (a shipped model, :data:`POWER_MODELS`) or a JSON file's path."""
    if spec in _LOADED:
        return _LOADED[spec]
    path = Path(
        POWER_MODELS.load(POWER_MODELS.entries[spec].target) if spec in POWER_MODELS else spec
    )
    if spec not in POWER_MODELS and not path.is_file():
        known = ", ".join(POWER_MODELS.names())
        raise InputError(f"--power {spec!r}: expected one of {known} or a power model JSON file")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a power model file ({type(exc).__name__})") from None
    _LOADED[spec] = model = power_model_from_doc(doc, str(path))
    return model


class PricedExecutor:
    """Any executor's iterations, their energy priced by a :class:`PowerModel`.

    The wrapped executor's own energy (samples, constant power) is dropped, not
    mixed in: ``energy_source`` is the model's. An iteration's energy is its running
    power × duration plus ``idle_w`` × the gap since the previous iteration ended.
    """

    __slots__ = ("_inner", "_model", "_table", "_idle", "_end", "energy_source")

    def __init__(self, inner: Any, model: PowerModel) -> None:
        self._inner = inner.execute
        self._model = model
        self._table = model._table
        self._idle = model.idle_w
        self._end: float | None = None
        self.energy_source = model.source

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        ms, _ = self._inner(n_decode, chunk, ctx, prefix, now_ms)
        rows = n_decode + chunk
        watts = self._table[rows] if rows <= _TABLED else self._model._power(rows)
        joules = watts * ms
        end = self._end
        if end is not None and now_ms > end:
            joules += self._idle * (now_ms - end)
        self._end = now_ms + ms
        return ms, joules / 1000.0


class Unpriced:
    """Any executor's iterations without energy (``--power none``)."""

    __slots__ = ("_inner", "energy_source")

    def __init__(self, inner: Any) -> None:
        self._inner = inner.execute
        self.energy_source = "none"

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        return self._inner(n_decode, chunk, ctx, prefix, now_ms)[0], None
