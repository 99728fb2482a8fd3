"""The plug-in's settings: ``--additional-config '{"servecal": {...}}'``, then the
environment (``SERVECAL_TABLE``, ``SERVECAL_TPOT_SLO_MS``, ``SERVECAL_RUN_DIR``,
``SERVECAL_ENERGY_METER``).

Every defect is one :class:`PluginConfigError` line that names the key and says
where to set it, so that vLLM refuses to start with a message a person can act on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.sched.policies.sloweave import MARGIN_CONTROLS, REGION_CONTROL
from servecal.util.errors import InputError

#: Key of the plug-in's section in vLLM's ``--additional-config``.
SECTION = "servecal"

#: Environment fallbacks, read when the key is absent from the section.
ENV = {
    "table": "SERVECAL_TABLE",
    "tpot_slo_ms": "SERVECAL_TPOT_SLO_MS",
    "run_dir": "SERVECAL_RUN_DIR",
    "energy_meter": "SERVECAL_ENERGY_METER",
}

#: Per-request SLO keys read from a request's ``SamplingParams.extra_args``
#: (``"vllm_xargs"`` in the OpenAI-compatible API).
REQUEST_SLO_KEYS = ("tpot_slo_ms", "ttft_slo_ms")

#: ``policy`` values: SLOWeave's budget, or vLLM's own scheduling (logged only).
POLICIES = ("sloweave", "vllm")


class PluginConfigError(InputError):
    """The plug-in cannot start: one line saying what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(f"servecal: {message}")


@dataclass(frozen=True)
class PluginConfig:
    """What the plug-in needs; each field is a key of the ``servecal`` section.

    * ``table``: the cost table (``servecal fit`` output). Required.
    * ``tpot_slo_ms``: the TPOT SLO ``D_i`` a request gets unless its ``extra_args``
      carry ``tpot_slo_ms``. Required.
    * ``ttft_slo_ms``: TTFT SLO written to the run folder for reports (not planned on).
    * ``run_dir``: where the online-validation run folder goes (None: no log).
    * ``flush_every``, ``flush_s``: the run log appends a segment every ``flush_every``
      steps and at least every ``flush_s`` seconds (the most a hard stop loses).
    * ``policy``: ``"sloweave"`` sets each step's token budget; ``"vllm"`` leaves
      vLLM's own scheduling untouched and only logs its steps (the baseline, measured
      with the same instrumentation).
    * ``energy_meter``: where the run log's per-step joules come from: ``auto`` (NVML
      on the engine's GPUs, else the host's RAPL package counter), ``nvml``, ``rapl``,
      or ``none``; a meter that cannot be opened leaves energy "unavailable". Or
      ``MODULE:NAME``: a class (or factory) of no arguments whose object has
      ``read_j()`` and ``source`` (``energy.EnergyMeter``), e.g. the dry-run
      ``servecal.integrations.vllm.energy:ConstantPowerMeter``.
    * ``c_max``: largest prefill chunk; None = the step's token cap
      (vLLM's ``max_num_scheduled_tokens``, normally ``max_num_batched_tokens``).
    * ``quantile``, ``use_margin``: plan on ``T̂_q + δ`` (SLOWeave's default P99 + δ).
    * ``multi_prefill``, ``max_prefills``: SLOWeave's multi-prefill option: the chunk
      may span up to ``max_prefills`` prompts (off, as in the engine policy: one
      prompt per step; on admits bursts of short prompts faster).
    * ``check_model``: refuse a table whose fingerprint names another model shape.
    * ``margin_control``: SLOWeave's ``margin_control``, as in the engine policy:
      ``region`` (default) scales the budget online from the SLO's gap misses and
      corrects it per region of the chunk by the table's measured error, one
      controller per engine kept across steps; ``slo`` keeps one scale for every
      chunk; ``fixed`` plans on the whole budget.
    """

    table: Path
    tpot_slo_ms: float
    ttft_slo_ms: float | None = None
    run_dir: Path | None = None
    flush_every: int = 1000
    flush_s: float = 5.0
    policy: str = "sloweave"
    energy_meter: str = "auto"
    c_max: int | None = None
    quantile: float = PLAN_QUANTILE
    use_margin: bool = True
    multi_prefill: bool = False
    max_prefills: int = 8
    check_model: bool = True
    margin_control: str = REGION_CONTROL

    def __post_init__(self) -> None:
        self._check_numbers()
        self._check_names()

    def _check_numbers(self) -> None:
        if not (math.isfinite(self.tpot_slo_ms) and self.tpot_slo_ms > 0):
            raise PluginConfigError(f"'tpot_slo_ms' must be a number > 0, got {self.tpot_slo_ms}")
        if self.ttft_slo_ms is not None and not self.ttft_slo_ms > 0:
            raise PluginConfigError(f"'ttft_slo_ms' must be > 0, got {self.ttft_slo_ms}")
        if self.flush_every < 1:
            raise PluginConfigError(f"'flush_every' must be >= 1, got {self.flush_every}")
        if not (math.isfinite(self.flush_s) and self.flush_s > 0):
            raise PluginConfigError(f"'flush_s' must be a number > 0, got {self.flush_s}")
        if self.c_max is not None and self.c_max < 1:
            raise PluginConfigError(f"'c_max' must be >= 1, got {self.c_max}")
        if self.max_prefills < 1:
            raise PluginConfigError(f"'max_prefills' must be >= 1, got {self.max_prefills}")
        if not 0.0 < self.quantile < 1.0:
            raise PluginConfigError(f"'quantile' must be in (0, 1), got {self.quantile}")

    def _check_names(self) -> None:
        from servecal.integrations.vllm.energy import ENERGY_METERS

        module, sep, attr = self.energy_meter.partition(":")
        if self.energy_meter not in ENERGY_METERS and not (sep and module and attr):
            raise PluginConfigError(
                f"'energy_meter' must be one of {', '.join(ENERGY_METERS.names())} or MODULE:NAME "
                f"(a meter class), got {self.energy_meter!r}"
            )
        if self.policy not in POLICIES:
            raise PluginConfigError(
                f"'policy' must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        if self.margin_control not in MARGIN_CONTROLS:
            raise PluginConfigError(
                f"'margin_control' must be one of {', '.join(MARGIN_CONTROLS)}, "
                f"got {self.margin_control!r}"
            )

    def describe(self) -> dict[str, Any]:
        """JSON-friendly fields (for ``run.json``)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


_TYPES: dict[str, tuple[type, ...]] = {
    "table": (str,),
    "tpot_slo_ms": (int, float),
    "ttft_slo_ms": (int, float),
    "run_dir": (str,),
    "flush_every": (int,),
    "flush_s": (int, float),
    "policy": (str,),
    "energy_meter": (str,),
    "c_max": (int,),
    "quantile": (float,),
    "use_margin": (bool,),
    "multi_prefill": (bool,),
    "max_prefills": (int,),
    "check_model": (bool,),
    "margin_control": (str,),
}


def _where(key: str) -> str:
    env = f" or {ENV[key]}" if key in ENV else ""
    return f'set "{key}" in --additional-config \'{{"{SECTION}": {{...}}}}\'{env}'


def _typed(key: str, value: Any, source: str) -> Any:
    want = _TYPES[key]
    ok = isinstance(value, want) and not (isinstance(value, bool) and bool not in want)
    if not ok:
        names = " or ".join(t.__name__ for t in want)
        raise PluginConfigError(f"'{key}' from {source} must be {names}, got {value!r}")
    if key in ("table", "run_dir"):
        return Path(value).expanduser()
    return float(value) if float in want and int in want else value


def _from_env(key: str, raw: str) -> Any:
    if key == "tpot_slo_ms":
        try:
            return float(raw)
        except ValueError:
            raise PluginConfigError(f"{ENV[key]}={raw!r} is not a number") from None
    return raw


def _values(
    section: Mapping[str, Any], known: list[str], environ: Mapping[str, str]
) -> dict[str, Any]:
    """Each key given in the section, else in its environment variable, typed."""
    values: dict[str, Any] = {}
    for key in known:
        if key in section and section[key] is not None:
            values[key] = _typed(key, section[key], "--additional-config")
        elif key in ENV and environ.get(ENV[key]):
            values[key] = _typed(key, _from_env(key, environ[ENV[key]]), ENV[key])
    return values


def load_config(
    additional_config: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> PluginConfig:
    """The plug-in's settings from vLLM's ``additional_config`` and ``environ``."""
    environ = os.environ if environ is None else environ
    extra = additional_config if isinstance(additional_config, Mapping) else {}
    section = extra.get(SECTION, {})
    if not isinstance(section, Mapping):
        raise PluginConfigError(
            f"--additional-config '{SECTION}' must be an object, got {type(section).__name__}"
        )
    known = [f.name for f in fields(PluginConfig)]
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise PluginConfigError(
            f"unknown key '{unknown[0]}' in --additional-config '{SECTION}' "
            f"(known: {', '.join(known)})"
        )
    values = _values(section, known, environ)
    for key in ("table", "tpot_slo_ms"):
        if key not in values:
            raise PluginConfigError(f"no '{key}' given: {_where(key)}")
    run_dir = values.get("run_dir")
    if run_dir is not None and run_dir.exists() and any(run_dir.iterdir()):
        # the log's parts would mix with another run's: never someone else's files
        raise PluginConfigError(
            f"run_dir {run_dir} exists and is not empty (an earlier run?): "
            "give each server start a new folder"
        )
    return PluginConfig(**values)
