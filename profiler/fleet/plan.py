"""A fleet plan: the calibration (and import) jobs to run, read from a TOML or JSON file.

::

    [defaults]                       # every job's value unless it sets its own
    budget = 1800                    # seconds per job (calibrate --budget)
    grid = "grids/gpu.toml"          # a file (relative to the plan) or an inline table

    [[matrix]]                       # the cross product of every list: 2 × 3 × 3 jobs
    device = ["H100", "A100"]
    model = ["llama-3-8b", "qwen2.5-14b", "llama-3-70b"]
    tp = [1, 2, 4]

    [[job]]                          # one job
    device = "cpu"
    model = "tiny"

    [[job]]
    kind = "import"                  # samples composed from an operator profile
    source = "vidur"
    path = "profiles/vidur"
    device = "A100"
    model = "llama-3-8b"

A job's keys are ``servecal calibrate``'s options under the same names (``budget``,
``repeats``, ``grid``, ``layers``, ``dtype``, ``threads``, ``seed``, ``block``,
``kv_layout``, ``tp``, ``model``) plus ``device``: ``cpu``, ``gpu`` (any GPU) or a GPU
type (``H100``, ``A100``, ``L4``: matched against the device name; on Ray, the
node's ``accelerator_type``), ``name`` (default ``<device>-<model>-tp<tp>``, plus
``-<source>`` for an import) and ``cpus`` (CPUs the job holds; default: one per GPU
job, the whole node for a CPU job, since a CPU timing run must own its host).
Import jobs take ``source`` (``aiconfigurator`` or ``vidur``) and ``path`` instead
of the timing options.

Grids and model-shape files are read here, on the driver, and travel inside the
job, so workers need no copy of them; profile folders of import jobs must be
readable from the workers (a shared filesystem on a cluster).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from servecal.profiler.design import AXES, Grid
from servecal.profiler.files import load_mapping
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

KINDS = ("calibrate", "import")
#: Timing options of a calibrate job (``servecal calibrate``'s names).
TIMING_KEYS = ("budget", "repeats", "layers", "dtype", "threads", "seed", "block", "kv_layout")
#: A GPU type as a plan names it: letters and its model number (H100, A100, L4, MI300X).
GPU_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}[0-9][A-Za-z0-9_-]{0,15}")
#: Most torch threads a job may ask for (calibrate refuses more than its host's cores).
MAX_THREADS = 1024
COMMON_KEYS = ("name", "kind", "device", "model", "tp", "grid", "cpus")
IMPORT_KEYS = ("source", "path")
#: The reference iteration of the fleet report's table (inside both default grids).
DEFAULT_REFERENCE = {"n_decode": 16, "chunk": 128, "ctx": 512, "prefix": 0}
#: Spec fields that decide *what* a job measures; the others (budget, threads, block,
#: cpus) only decide how long or how fast, so changing them keeps a finished job.
IDENTITY = frozenset(
    [
        "kind",
        "device",
        "model",
        "shape",
        "tp",
        "grid",
        "repeats",
        "layers",
        "dtype",
        "seed",
        "kv_layout",
        "source",
        "path",
    ]
)

_SLUG = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    """A folder- and partition-safe name: lower case, ``[a-z0-9._-]``."""
    return _SLUG.sub("-", str(text).lower()).strip("-") or "x"


@dataclass(frozen=True)
class JobSpec:
    """One job of a plan, fully resolved (shape and grid read, paths absolute)."""

    name: str
    device: str
    model: str
    shape: dict[str, Any]
    kind: str = "calibrate"
    tp: int = 1
    grid: dict[str, list[int]] | None = None
    budget: float | None = None
    repeats: int | None = None
    layers: int | None = None
    dtype: str | None = None
    threads: int | None = None
    seed: int = 0
    block: int | None = None
    kv_layout: str | None = None
    cpus: float | None = None
    source: str | None = None
    path: str | None = None

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def accelerator_type(self) -> str | None:
        """The GPU type a job must land on (None: CPU, or any GPU)."""
        return None if self.device in ("cpu", "gpu") else self.device.upper()

    @property
    def partition(self) -> dict[str, str | int]:
        """Hive partition values of this job's rows in the combined dataset."""
        return {"device": slug(self.device), "model": slug(self.model), "tp": self.tp}

    def identity(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k in IDENTITY}

    @property
    def identity_hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class FleetPlan:
    """The jobs of a plan file, in file order (matrices expanded), and the report's reference."""

    path: Path
    jobs: tuple[JobSpec, ...]
    reference: dict[str, int]

    def job(self, name: str) -> JobSpec:
        return next(j for j in self.jobs if j.name == name)


def _fail(where: str, message: str) -> InputError:
    return InputError(f"{where}: {message}")


def _positive_int(value: Any, key: str, where: str, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(where, f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _grid(value: Any, base: Path, where: str) -> dict[str, list[int]]:
    if isinstance(value, str):
        path = Path(value) if Path(value).is_absolute() else base / value
        return Grid.from_file(path).to_dict()
    if isinstance(value, Mapping):
        return Grid.from_dict(dict(value), f"{where}: grid").to_dict()
    raise _fail(where, f"grid must be a file name or a table of {', '.join(AXES)}")


def _shape(model: Any, base: Path, where: str) -> ModelShape:
    if not isinstance(model, str) or not model:
        raise _fail(where, "model must be a shape name or a .json/.toml file")
    if model.endswith((".json", ".toml")) and not Path(model).is_absolute():
        model = str(base / model)
    try:
        return ModelShape.resolve(model)
    except InputError as exc:
        raise _fail(where, str(exc)) from None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _allowed(kind: str) -> set[str]:
    return set(COMMON_KEYS) | set(TIMING_KEYS if kind == "calibrate" else IMPORT_KEYS)


def _with_defaults(defaults: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` over the defaults that apply to its kind (timing options skip import jobs)."""
    kind = entry.get("kind", defaults.get("kind", "calibrate"))
    allowed = _allowed(kind) if kind in KINDS else set(defaults)
    return {**{k: v for k, v in defaults.items() if k in allowed}, **entry}


def _resolve(raw: Mapping[str, Any], base: Path, where: str) -> JobSpec:
    """One job's raw keys (defaults applied) → a checked :class:`JobSpec`."""
    kind = _kind(raw, where)
    device = _device(raw.get("device"), where)
    shape = _shape(raw.get("model"), base, where)
    tp = _positive_int(raw.get("tp", 1), "tp", where)
    try:
        shape.check_tp(tp)
    except InputError as exc:
        raise _fail(where, str(exc).replace("--tp", "tp")) from None
    values: dict[str, Any] = {
        "device": device,
        "model": shape.name,
        "shape": shape.to_dict(),
        "kind": kind,
        "tp": tp,
        "grid": None if raw.get("grid") is None else _grid(raw["grid"], base, where),
    }
    if "cpus" in raw:
        values["cpus"] = _cpus(raw["cpus"], where)
    if kind == "import":
        values.update(_import_source(raw, device, base, where))
    else:
        values.update(_timing(raw, where))
    suffix = f"-{values['source']}" if kind == "import" else ""
    name = _job_name(raw.get("name"), f"{device}-{shape.name}-tp{tp}{suffix}", where)
    return JobSpec(name=name, **values)


def _kind(raw: Mapping[str, Any], where: str) -> str:
    """The job's kind, its keys checked against what that kind takes."""
    kind = raw.get("kind", "calibrate")
    if kind not in KINDS:
        raise _fail(where, f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = _allowed(kind)
    unknown = sorted(set(raw) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise _fail(where, f"unknown key {unknown[0]!r} for {_a(kind)} job; known: {known}")
    return str(kind)


def _device(device: Any, where: str) -> str:
    """``cpu``, ``gpu`` (``cuda`` too) or a GPU type such as ``H100``."""
    if not isinstance(device, str) or not device.strip():
        raise _fail(where, "device is required: cpu, gpu or a GPU type such as H100")
    device = device.strip()
    device = device.lower() if device.lower() in ("cpu", "gpu", "cuda") else device
    device = "gpu" if device == "cuda" else device
    if device not in ("cpu", "gpu") and not GPU_TYPE.fullmatch(device):
        raise _fail(
            where,
            f"device {device!r}: expected cpu, gpu or a GPU type with its model number "
            "(H100, A100, L4, MI300X)",
        )
    return device


def _cpus(cpus: Any, where: str) -> float:
    if not isinstance(cpus, (int, float)) or isinstance(cpus, bool) or cpus <= 0:
        raise _fail(where, f"cpus must be a number > 0, got {cpus!r}")
    return float(cpus)


def _import_source(raw: Mapping[str, Any], device: str, base: Path, where: str) -> dict:
    """An import job's ``source`` and profile ``path`` (resolved against the plan)."""
    from servecal.profiler.importers import SOURCES

    source = raw.get("source")
    if source not in SOURCES:
        raise _fail(where, f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if not isinstance(raw.get("path"), str):
        raise _fail(where, "an import job needs path: the profile folder")
    path = Path(raw["path"]) if Path(raw["path"]).is_absolute() else base / raw["path"]
    if not path.exists():
        raise _fail(where, f"path {str(path)!r}: no such file or folder")
    if device in ("cpu", "gpu"):
        raise _fail(where, "an import job's device is the profiled GPU type (e.g. A100)")
    return {"source": source, "path": str(path.resolve())}


def _job_name(name: Any, default: str, where: str) -> str:
    """The job's (folder) name: given, or ``default`` (device, model, TP; an import adds
    its source: it may sit beside a calibration)."""
    if name is None:
        return slug(default).lower()
    if not isinstance(name, str) or slug(name) != name.lower():
        raise _fail(where, f"name {name!r}: use letters, digits, '.', '_' and '-' only")
    if name.startswith("."):  # ".", "..": the fleet's own folder or above; hidden
        raise _fail(where, f"name {name!r}: must not start with '.' (it names a folder)")
    return name.lower()


def _timing(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    from servecal.profiler.calibrate import DTYPES

    out: dict[str, Any] = {}
    if raw.get("budget") is not None:
        budget = raw["budget"]
        if (
            not isinstance(budget, (int, float))
            or isinstance(budget, bool)
            or not math.isfinite(budget)
            or budget <= 0
        ):
            raise _fail(where, f"budget must be a finite number of seconds > 0, got {budget!r}")
        out["budget"] = float(budget)
    for key, minimum in (("repeats", 2), ("layers", 1), ("threads", 1), ("block", 1)):
        if raw.get(key) is not None:
            out[key] = _positive_int(raw[key], key, where, minimum)
    if out.get("threads", 0) > MAX_THREADS:  # the worker checks its own core count too
        raise _fail(where, f"threads must be at most {MAX_THREADS}, got {out['threads']}")
    if "seed" in raw:
        out["seed"] = _positive_int(raw["seed"], "seed", where, 0)
    if raw.get("dtype") is not None:
        if raw["dtype"] not in DTYPES:
            raise _fail(where, f"dtype must be one of {', '.join(DTYPES)}, got {raw['dtype']!r}")
        out["dtype"] = raw["dtype"]
    if raw.get("kv_layout") is not None:
        if not isinstance(raw["kv_layout"], str):
            raise _fail(where, "kv_layout must be a layout name (contiguous, paged)")
        out["kv_layout"] = raw["kv_layout"]
    return out


def _expand(matrix: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """The cross product of a ``[[matrix]]`` entry's list values (scalars are shared)."""
    keys = list(matrix)
    axes = [v if isinstance(v, list) else [v] for v in matrix.values()]
    for combo in itertools.product(*axes):
        yield dict(zip(keys, combo, strict=True))


def _reference(data: Mapping[str, Any], where: str) -> dict[str, int]:
    report = data.get("report", {})
    if not isinstance(report, Mapping) or set(report) - {"reference"}:
        raise _fail(where, "[report] takes one key: reference = {n_decode, chunk, ctx, prefix}")
    ref = report.get("reference", DEFAULT_REFERENCE)
    if not isinstance(ref, Mapping) or set(ref) != set(AXES):
        raise _fail(where, f"[report] reference needs exactly {', '.join(AXES)}")
    return {a: _positive_int(ref[a], f"reference.{a}", where, 0) for a in AXES}


def load_plan(path: str | Path) -> FleetPlan:
    """Read and check a plan file (one-line :class:`InputError` naming the job on any defect)."""
    path = Path(path)
    data = load_mapping(path, "fleet plan")
    unknown = sorted(set(data) - {"defaults", "job", "matrix", "report"})
    if unknown:
        raise _fail(str(path), f"unknown section {unknown[0]!r}; use defaults, job, matrix, report")
    raw_jobs = _raw_jobs(data, _defaults(data, path), path)
    base = path.resolve().parent
    jobs = [_resolve(raw, base, where) for where, raw in raw_jobs]
    seen: dict[str, str] = {}
    for (where, _), job in zip(raw_jobs, jobs, strict=True):
        if job.name in seen:
            raise _fail(where, f"job name {job.name!r} is used twice; give one a name")
        seen[job.name] = where
    return FleetPlan(path=path, jobs=tuple(jobs), reference=_reference(data, str(path)))


def _defaults(data: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    """The ``[defaults]`` table: keys a job takes, never its name."""
    defaults = data.get("defaults", {})
    if not isinstance(defaults, Mapping):
        raise _fail(str(path), "[defaults] must be a table")
    unknown = sorted(set(defaults) - _allowed("calibrate") - _allowed("import"))
    if unknown or "name" in defaults:
        raise _fail(str(path), f"[defaults] cannot set {(unknown or ['name'])[0]!r}")
    return defaults


def _raw_jobs(
    data: Mapping[str, Any], defaults: Mapping[str, Any], path: Path
) -> list[tuple[str, dict[str, Any]]]:
    """``(where, keys)`` of every job, ``[[matrix]]`` entries expanded, defaults applied."""
    raw_jobs: list[tuple[str, dict[str, Any]]] = []
    for section in ("matrix", "job"):
        entries = data.get(section, [])
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            raise _fail(str(path), f"{section} entries are written [[{section}]]")
        for i, entry in enumerate(entries, start=1):
            where = f"{path}: [[{section}]] {i}"
            if section == "job":
                raw_jobs.append((where, _with_defaults(defaults, entry)))
                continue
            if "name" in entry:
                raise _fail(where, "a matrix entry cannot set name (one per job)")
            raw_jobs += [(where, _with_defaults(defaults, c)) for c in _expand(entry)]
    if not raw_jobs:
        raise _fail(str(path), "no job: add [[job]] or [[matrix]] entries")
    return raw_jobs


def fingerprint_mismatches(spec: JobSpec, fingerprint: Mapping[str, Any]) -> list[str]:
    """Where a job's measured fingerprint disagrees with its plan entry (empty: agrees)."""
    checks = (_device_mismatch, _model_mismatch, _tp_mismatch, _setting_mismatches)
    return [line for check in checks for line in check(spec, fingerprint)]


def _device_mismatch(spec: JobSpec, fingerprint: Mapping[str, Any]) -> list[str]:
    device = str(fingerprint.get("device", ""))
    name = str(fingerprint.get("device_name", ""))
    ran = name or device or "?"
    if spec.on_cpu and device != "cpu":
        return [f"device: planned cpu, ran on {ran}"]
    if spec.device == "gpu" and spec.kind == "calibrate" and not device.startswith("cuda"):
        return [f"device: planned a GPU, ran on {ran}"]
    if spec.accelerator_type and _squash(spec.device) not in _squash(name):
        return [f"device: planned {spec.device}, ran on {ran}"]
    return []


def _squash(name: str) -> str:
    """``nvidiah10080gbhbm3`` for "NVIDIA H100 80GB HBM3": letters and digits only."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _model_mismatch(spec: JobSpec, fingerprint: Mapping[str, Any]) -> list[str]:
    planned_hash = ModelShape(**spec.shape).hash
    measured_hash = fingerprint.get("model_hash")
    if measured_hash is None:
        return ["model: the fingerprint records no model hash"]
    if measured_hash != planned_hash:
        measured = f"{fingerprint.get('model')} ({measured_hash})"
        return [f"model: planned {spec.model} ({planned_hash}), measured {measured}"]
    return []


def _tp_mismatch(spec: JobSpec, fingerprint: Mapping[str, Any]) -> list[str]:
    tp = fingerprint.get("tp", 1)
    return [f"tp: planned {spec.tp}, measured {tp}"] if tp != spec.tp else []


def _setting_mismatches(spec: JobSpec, fingerprint: Mapping[str, Any]) -> list[str]:
    """dtype, layers timed and (a calibration's) KV layout."""
    out = []
    for key, recorded in (("dtype", "dtype"), ("layers", "layers_timed")):
        want = getattr(spec, key)
        if want is not None and fingerprint.get(recorded) not in (None, want):
            out.append(f"{key}: planned {want}, measured {fingerprint.get(recorded)}")
    if spec.kind == "calibrate":
        layout = fingerprint.get("kv_layout", "contiguous")
        if (spec.kv_layout or "contiguous") != layout:
            out.append(f"kv_layout: planned {spec.kv_layout or 'contiguous'}, measured {layout}")
    return out
