"""Find and read what a report is made from: run folders and calibration folders.

A *run* folder holds ``run.json``, ``iterations.parquet`` and ``requests.parquet``
(docs/design.md "Engine"); a *calibration* folder holds ``samples.parquet`` and/or
``costtable.json`` with ``samples.fingerprint.json`` (older folders: ``fingerprint.json``;
docs/design.md "Samples", "Cost table").
A path given by the user may be either, or any folder above them (a ``compare``
output with one run per policy × workload × target × seed): it is searched. A
*fleet* folder (``servecal fleet``: ``index.json`` with one entry per job) is read
as a fleet, and its job folders as calibrations.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from servecal.costmodels.predictor import Predictor
from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.costmodels.segments import read_table, table_exists
from servecal.util.errors import InputError

RUN_FILES = ("run.json", "iterations.parquet", "requests.parquet")
RUN_SCHEMA = "servecal.run/1"
FLEET_INDEX = "index.json"
ITERATION_COLUMNS = ("start_ms", "duration_ms", "n_decode", "chunk")
REQUEST_COLUMNS = ("rid", "arrival_ms", "first_token_ms", "tpot_p99_ms")

#: The only energy sources a report names; anything else is reported verbatim.
ENERGY_SOURCES = {
    "nvml": "NVML",
    "rapl": "RAPL",
    "table": "estimated from the cost table's energy column",
    "costtable": "estimated from the cost table's energy column",
    "estimated": "estimated from the cost table's energy column",
    "samples": "bootstrapped from the calibration samples' energy",
    "model": "modelled as constant power × iteration time (not measured)",
    "none": "unavailable",
    "unavailable": "unavailable",
    "": "unavailable",
}


def energy_source_name(raw: Any) -> str:
    """The report's wording for an energy source recorded in ``run.json``.

    ``model:NAME`` (a simulated run priced by a power model, sched/power.py) keeps the
    model's name; ``measured:METER`` (the torch executor) and ``nvml``/``rapl`` name
    the meter; a meter of tests (``fake``) says so."""
    if raw is None:
        return "unavailable"
    if isinstance(raw, dict):
        raw = raw.get("source", raw.get("name"))
        if raw is None:
            return "unavailable"
    key = str(raw).strip().lower()
    if key.startswith("model:"):
        return f"modelled: power model {str(raw).strip()[6:]} (not measured)"
    if key.startswith("measured:"):
        key = key[9:]
    if key.startswith("fake"):
        return "fake meter (a test's, not a device's)"
    for prefix, name in ENERGY_SOURCES.items():
        if prefix and key.startswith(prefix):
            return name
    return ENERGY_SOURCES.get(key, str(raw))


def _first(mapping: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in mapping and mapping[k] is not None:
            return mapping[k]
    return default


@dataclass(frozen=True)
class RunData:
    """One simulated or real run: its config, summary and the two logs."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    iterations: pd.DataFrame
    requests: pd.DataFrame
    energy_source: str = "unavailable"
    drift: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: How the page shows the policy (reports.labels' short label), when relabelled.
    label: str | None = None

    @property
    def policy(self) -> str:
        """The policy as the page shows it: the short label when relabelled, else the
        full one."""
        return self.label if self.label is not None else self.full_policy

    @property
    def full_policy(self) -> str:
        """The policy's label (name and the options given), as compare's rows name it."""
        return str(_first(self.config, "policy_label", "policy", "policy_name", default="?"))

    @property
    def workload(self) -> str:
        return str(_first(self.config, "workload", "workload_name", default="?"))

    @property
    def tpot_slo_ms(self) -> float:
        value = _first(self.config, "tpot_slo_ms", "tpot_slo", "tpot_target_ms", default=math.nan)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else math.nan
        return float(value)

    @property
    def seed(self) -> int:
        return int(_first(self.config, "seed", default=0))

    @property
    def truth(self) -> str | None:
        """The simulated truth the run drew its iteration times from (as named)."""
        value = self.config.get("truth")
        return None if value is None else str(value)

    @property
    def predictor(self) -> str | None:
        """The predictor the policy planned with (as named)."""
        value = self.config.get("predictor")
        return None if value is None else str(value)

    @property
    def rate(self) -> float:
        """Offered load (req/s); NaN for a trace at its own times or when unrecorded."""
        value = self.config.get("rate")
        return math.nan if value is None else float(value)

    @property
    def search(self) -> dict[str, Any] | None:
        """The max-goodput search of this (spec, seed), when one ran (``goodput_search``)."""
        value = self.meta.get("goodput_search")
        return value if isinstance(value, dict) else None

    @property
    def has_drift(self) -> bool:
        return "drift_state" in self.iterations.columns or bool(self.drift)


@dataclass(frozen=True)
class CalibrationData:
    """Measured samples, the fitted table (any predictor) and the device fingerprint."""

    path: Path
    samples: pd.DataFrame
    predictor: Predictor | None
    fingerprint: dict[str, Any]
    table_json: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None


@dataclass(frozen=True)
class FleetData:
    """A fleet folder's index (``servecal.fleet-index/1``) and where it lies."""

    path: Path
    index: dict[str, Any]
    #: How far its job tables are trusted (the report command's table flags).
    trust: TableTrust = NO_TRUST

    @property
    def jobs(self) -> dict[str, dict[str, Any]]:
        return dict(self.index.get("jobs", {}))


@dataclass(frozen=True)
class ReportInputs:
    runs: tuple[RunData, ...] = ()
    calibrations: tuple[CalibrationData, ...] = ()
    fleets: tuple[FleetData, ...] = ()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object at the top level")
    return data


def _read_parquet(path: Path, required: Sequence[str]) -> pd.DataFrame:
    df = read_table(path)  # one file, or a live server's folder of parts
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column {missing[0]!r}")
    return df


def _numbers(value: Any, where: str) -> Any:
    """A run summary as numbers: ``null`` (how run folders store NaN) reads as NaN;
    text where a number belongs is refused, naming the key."""
    if isinstance(value, dict):
        return {k: _numbers(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v, where) for v in value]
    if value is None:
        return math.nan
    if isinstance(value, str):
        raise InputError(f"{where}: expected a number, got text {value[:40]!r}")
    return value


@functools.lru_cache(maxsize=64)
def _table_fingerprint(path: str, mtime: float, allow_edited: bool) -> dict[str, Any]:
    from servecal.costmodels import CostTable

    return CostTable.load(path, allow_edited=allow_edited).fingerprint


def _compare_run_table(folder: Path, config: dict[str, Any], trust: TableTrust) -> None:
    """Warn (or under ``--strict`` refuse) when the cost table a run planned with was
    measured on another device or model than the run's own measurements."""
    spec = config.get("predictor")
    if not isinstance(spec, str) or not spec.endswith(".json") or not Path(spec).is_file():
        return
    from servecal.costmodels.drift.replay import measured_fingerprint
    from servecal.costmodels.provenance import compare_fingerprints

    table_fp = _table_fingerprint(spec, Path(spec).stat().st_mtime, trust.allow_edited)
    compare_fingerprints(
        table_fp, measured_fingerprint(folder), spec, str(folder), trust.refuse_mismatch
    )


def _observer_drift(observers: Any) -> dict[str, Any] | None:
    """The drift monitor's summary among the engine's observer summaries, if any."""
    if not isinstance(observers, dict):
        return None
    for summary in observers.values():
        if isinstance(summary, dict) and isinstance(summary.get("drift"), dict):
            return summary["drift"]
    return None


def load_run(folder: Path, trust: TableTrust = NO_TRUST) -> RunData:
    """Read one run folder; a missing file or column is one-line :class:`InputError`."""
    for name in RUN_FILES:
        if not table_exists(folder / name):
            raise InputError(f"{folder}: not a run folder (no {name})")
    info = _read_json(folder / "run.json")
    schema = info.get("schema", RUN_SCHEMA)  # a run.json without the field is version 1
    if schema != RUN_SCHEMA:
        raise InputError(
            f"{folder / 'run.json'}: field 'schema': {schema!r}, this servecal reads "
            f"{RUN_SCHEMA!r} (a newer servecal wrote it?)"
        )
    config = info.get("config", {})
    if not isinstance(config, dict):
        raise InputError(f"{folder / 'run.json'}: 'config' must be an object")
    summary = info.get("summary", {})
    if not isinstance(summary, dict):
        raise InputError(f"{folder / 'run.json'}: 'summary' must be an object")
    summary = _numbers(summary, f"{folder / 'run.json'}: summary")
    energy = _first(info, "energy_source", "energy", default=config.get("energy_source"))
    drift = info.get("drift") or _observer_drift(info.get("observers"))
    iterations = _read_parquet(folder / "iterations.parquet", ITERATION_COLUMNS)
    requests = _read_parquet(folder / "requests.parquet", REQUEST_COLUMNS)
    if "preemptions" in requests.columns and "recomputes" not in requests.columns:
        # a requests table without "recomputes" counts recompute preemptions as "preemptions"
        requests = requests.rename(columns={"preemptions": "recomputes"}).assign(parks=0)
    _compare_run_table(folder, config, trust)
    if not summary:  # no summary recorded: the one metrics implementation fills it in
        from servecal.sched.metrics import summarize

        summary = summarize(requests, iterations)
    return RunData(
        path=folder,
        config=config,
        summary=summary,
        iterations=iterations,
        requests=requests,
        energy_source=energy_source_name(energy),
        drift=drift if isinstance(drift, dict) else None,
        meta={k: v for k, v in info.items() if k not in ("config", "summary", "drift")},
    )


def load_calibration(folder: Path, trust: TableTrust = NO_TRUST) -> CalibrationData:
    """Read a calibration folder (samples and/or cost table, fingerprint)."""
    samples_path = folder / "samples.parquet"
    table_path = folder / "costtable.json"
    if not samples_path.is_file():
        raise InputError(f"{folder}: calibration folder without samples.parquet")
    from servecal.costmodels.samples import find_fingerprint, read_samples

    read = read_samples(samples_path)
    predictor = None
    table_json: dict[str, Any] = {}
    fp_path = find_fingerprint(samples_path)
    if table_path.is_file():
        from servecal.costmodels import CostTable

        table_json = _read_json(table_path)
        measured = _read_json(fp_path) if fp_path is not None else read.provenance
        predictor = CostTable.load(
            table_path, fingerprint=measured, other=str(samples_path), trust=trust
        )
    fingerprint = (
        _read_json(fp_path)
        if fp_path is not None
        else table_json.get("fingerprint") or read.provenance
    )
    return CalibrationData(
        path=folder,
        samples=read.frame,
        predictor=predictor,
        fingerprint=fingerprint if isinstance(fingerprint, dict) else {},
        table_json=table_json,
    )


def load_fleet(folder: Path, trust: TableTrust = NO_TRUST) -> FleetData:
    """Read a fleet folder's ``index.json``."""
    from servecal.profiler.fleet import read_index

    return FleetData(path=folder, index=read_index(folder / FLEET_INDEX), trust=trust)


def _is_fleet(folder: Path) -> bool:
    if not (folder / FLEET_INDEX).is_file():
        return False
    from servecal.profiler.fleet import is_index

    try:
        return is_index(json.loads((folder / FLEET_INDEX).read_text()))
    except (OSError, ValueError):
        return False


def _candidates(root: Path) -> Iterable[Path]:
    if (root / "run.json").is_file() or (root / "samples.parquet").is_file():
        yield root
        return
    if _is_fleet(root):
        yield root  # and its job folders below
    # hidden folders are never runs: a writer's temporaries are ``.NAME.xxxx.tmp``
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        yield from _candidates(child)


def discover(paths: Sequence[str | Path], trust: TableTrust = NO_TRUST) -> ReportInputs:
    """All runs and calibrations under the given paths (each searched recursively);
    ``trust``: how far the cost tables they name are trusted (the table flags)."""
    runs: list[RunData] = []
    cals: list[CalibrationData] = []
    fleets: list[FleetData] = []
    for raw in paths:
        root = Path(raw)
        if not root.exists():
            raise InputError(f"{root}: no such file or folder")
        if not root.is_dir():
            raise InputError(f"{root}: expected a run or calibration folder, got a file")
        found = list(_candidates(root))
        if not found:
            raise InputError(
                f"{root}: no run (run.json), calibration (samples.parquet) or fleet "
                "(index.json) in it"
            )
        for folder in found:
            if (folder / "run.json").is_file():
                runs.append(load_run(folder, trust))
            elif (folder / "samples.parquet").is_file():
                cals.append(load_calibration(folder, trust))
            else:
                fleets.append(load_fleet(folder, trust))
    return ReportInputs(runs=tuple(runs), calibrations=tuple(cals), fleets=tuple(fleets))
