"""A capacity plan's question, read from TOML: workload, SLOs, target, candidates.

    [workload]
    trace = "azure_conv_head4000.csv"   # or: name = "tenants"  (relative to this file)
    rate = 40                # req/s, the trace's gaps scaled to it; omit: its own times
    requests = 2000          # the first N rows (a contiguous window)
    tpot_slo_ms = 25
    seeds = [0]

    [target]
    attainment = 0.9         # share of requests good (TTFT and TPOT met) at that rate

    [search]
    replicas = [1, 16]       # smallest and largest replica count tried
    policies = ["sloweave", "fixed-512"]
    routers = ["round-robin", "predicted-latency"]

    [[device]]
    name = "A100"
    price_per_gpu_hour = 2.0
    [[device.tp]]            # one entry per TP size: a fleet device shipped with servecal,
    size = 1                 # or truth / predictor / kv_tokens of your own
    fleet = "A100x1"
    speculative = "k=4,accept=0.7"   # optional: its replicas decode speculatively

Every mistake is one :class:`InputError` line naming the key (docs/capacity.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.sched.policies.registry import DRIVER, ENGINE, ROUTER, PolicySpec
from servecal.util.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data"
FLEET_PATH = DATA / "fleet_devices.json"
#: Where each fleet device's table lies (A100 TP 1 is the shipped ``fitted`` table).
SHIPPED_A100 = "A100x1"


@dataclass(frozen=True)
class Hardware:
    """One (device, TP) a replica can be: its price and what it is simulated with."""

    device: str
    tp: int
    price_per_hour: float  # the replica's: tp × the device's price per GPU-hour
    truth: str
    predictor: str
    kv_capacity: int
    speculative: str | None = None
    #: weights' and KV cache's dtype: the entry's stated ones, else what its table
    #: records (None: neither says); a stated one is checked against the table
    dtype: str | None = None
    kv_dtype: str | None = None
    stated: tuple[str, ...] = ()  # which of dtype / kv_dtype the entry stated

    @property
    def name(self) -> str:
        return (
            f"{self.device}x{self.tp}" + self.dtype_suffix + ("+spec" if self.speculative else "")
        )

    @property
    def dtype_suffix(self) -> str:
        """``-fp8`` (weights and KV), ``-bf16-kvfp8``, ``-kvfp8``: the stated dtypes, so two
        entries of one device and TP that differ by dtype are two candidates."""
        weights = short_dtype(self.dtype) if "dtype" in self.stated else None
        kv = short_dtype(self.kv_dtype) if "kv_dtype" in self.stated else None
        if weights is not None and kv in (None, weights):
            return f"-{weights}"
        return (f"-{weights}" if weights else "") + (f"-kv{kv}" if kv else "")


@dataclass(frozen=True)
class Space:
    """The question: the workload side of a :class:`~servecal.sched.cluster.ClusterSpec`
    (``workload``, ``rate``, ``n_requests``, ``tpot_slo_ms``, ``slo_classes``, ``seeds``),
    the ``target`` attainment and the candidates."""

    workload: str
    rate: float | None
    n_requests: int
    tpot_slo_ms: float
    slo_classes: str | None
    seeds: tuple[int, ...]
    target: float
    replicas: tuple[int, int]
    policies: tuple[PolicySpec, ...]
    routers: tuple[PolicySpec, ...]
    hardware: tuple[Hardware, ...]
    #: The command's table flags (how far its cost tables are trusted; not the question).
    trust: TableTrust = field(default=NO_TRUST, compare=False)
    #: disaggregated candidates (:mod:`.disagg_space`): pool pairs and prefill policies
    disaggregated: tuple[Any, ...] = ()
    prefill_policies: tuple[PolicySpec, ...] = ()
    prefix_cache: str = "auto"  # [workload] prefix_cache: auto|on|off (docs/prefix_cache.md)

    def fleet_workload(self, rate: float | None) -> dict[str, Any]:
        """The workload fields of this question's runs at ``rate``: keywords of a
        :class:`~servecal.sched.cluster.spec.FleetWorkload` (a cluster or a
        disaggregated spec)."""
        return {
            "tpot_slo_ms": self.tpot_slo_ms,
            "rate": rate,
            "n_requests": self.n_requests,
            "seeds": self.seeds,
            "slo_classes": self.slo_classes,
            "trust": self.trust,
        }

    @property
    def configs(self) -> list[tuple[Any, PolicySpec, PolicySpec]]:
        """Every (hardware, policy, router), then every (pool pair, prefill policy,
        router), the cheapest replica (or unit) first."""
        combos: list[tuple[Any, PolicySpec, PolicySpec]]
        combos = [(h, p, r) for h in self.hardware for p in self.policies for r in self.routers]
        if self.disaggregated:
            from servecal.sched.cluster.disagg_space import routable

            combos += [(h, p, r) for h in self.disaggregated for p in self.prefill_policies
                       for r in self.routers if routable(p, r)]  # fmt: skip
        return sorted(combos, key=lambda c: c[0].price_per_hour)


#: Other spellings of a dtype, as the fingerprints record it (aiconfigurator's and vLLM's
#: ``fp8`` is e4m3).
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                 "float": "float32", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8"}  # fmt: skip
#: Short names in candidates' names (``H100x1-fp8``).
SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def canonical_dtype(name: str) -> str:
    """``name`` as fingerprints spell it (``bf16`` → ``bfloat16``, ``fp8_e4m3`` → ``fp8``)."""
    return DTYPE_ALIASES.get(name.lower(), name.lower())


def short_dtype(name: str | None) -> str | None:
    return None if name is None else SHORT_DTYPES.get(name, name)


def fleet_device(name: str) -> dict[str, Any]:
    """A device of ``sched/data/fleet_devices.json`` as truth, predictor, KV capacity."""
    doc = json.loads(FLEET_PATH.read_text())
    dev = doc["devices"].get(name)
    if dev is None:
        known = ", ".join(doc["devices"])
        raise InputError(f"fleet = {name!r}: unknown fleet device; known: {known}")
    overrides = dev["overrides"]
    truth = "device" + (
        ":" + ",".join(f"{k}={v!r}" for k, v in overrides.items()) if overrides else ""
    )  # noqa: E501
    table = "fitted" if name == SHIPPED_A100 else str(DATA / f"device_{name.lower()}_fitted.json")
    return {"truth": truth, "predictor": table, "kv_tokens": int(dev["kv_capacity"])}


def _get(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in table:
        raise InputError(f"{where}: missing {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}.{key} = {value!r}: expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"str": "text", "int": "an integer", "float": "a number", "list": "a list",
                        "dict": "a table"}.get(k.__name__, k.__name__) for k in kinds)  # fmt: skip


def _positive(value: float, where: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"{where} = {value!r}: expected a number > 0")
    return float(value)


def _path(text: str, base: Path, where: str) -> str:
    path = Path(text)
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        raise InputError(f"{where} = {text!r}: no such file ({path})")
    return str(path.resolve())


def _policy(name: Any, backend: str, where: str) -> PolicySpec:
    """A name (``"sloweave"``) or an inline table with options (``{name =
    "predicted-latency", quantile = 0.5, use_margin = false}``)."""
    opts: dict[str, str] = {}
    if isinstance(name, dict):
        entry = dict(name)
        name = entry.pop("name", None)
        # options as the command line's --opt text: the registry types and checks them
        opts = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in entry.items()}
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: expected policy names as text, got {name!r}")
    spec = PolicySpec.parse(name, opts)
    if backend not in spec.resolve().backends:
        what = "a router" if backend == ROUTER else "a scheduling policy"
        raise InputError(
            f"{where}: {name!r} is not {what} (it runs on {spec.resolve().backends[0]})"
        )  # noqa: E501
    return spec


def _truth(text: str, base: Path, where: str) -> str:
    """A truth spec with its file (``samples:PATH``, ``fit:PATH``) made absolute, relative
    to the plan file (a pool worker may start elsewhere)."""
    name, sep, arg = text.partition(":")
    if name in ("samples", "fit") and sep:
        return f"{name}:{_path(arg, base, where)}"
    return text


def _predictor(text: str, base: Path, where: str) -> str:
    if text.partition(":")[0] in ("fitted", "fitted-grid", "oracle"):
        return text
    return _path(text.removeprefix("table:"), base, where)


def _hardware(dev: Any, i: int, base: Path) -> list[Hardware]:
    where = f"device[{i}]"
    if not isinstance(dev, dict):
        raise InputError(f"{where}: expected a [[device]] table")
    name = _get(dev, "name", str, where)
    price = _positive(
        _get(dev, "price_per_gpu_hour", (int, float), where), f"{where}.price_per_gpu_hour"
    )  # noqa: E501
    sizes = _get(dev, "tp", list, where)
    if not sizes:
        raise InputError(f"{where}.tp: expected at least one [[device.tp]] entry")
    out = []
    for j, entry in enumerate(sizes):
        at = f"{where}.tp[{j}]"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: expected a table (size = N, fleet = ... or truth/predictor)")
        size = _get(entry, "size", int, at)
        if size < 1:
            raise InputError(f"{at}.size = {size}: expected a TP size >= 1")
        stray = set(entry) - {
            "size",
            "fleet",
            "truth",
            "predictor",
            "kv_tokens",
            "speculative",
            "dtype",
            *KV_BUDGET,
        }
        if stray:
            raise InputError(f"{at}: unknown key {sorted(stray)[0]!r}")
        if "fleet" in entry:
            if {"truth", "predictor"} & set(entry):
                raise InputError(f"{at}: give fleet = ... or truth/predictor, not both")
            found = fleet_device(_get(entry, "fleet", str, at))
        else:
            found = {"truth": _truth(_get(entry, "truth", str, at), base, f"{at}.truth"),
                     "predictor": _predictor(_get(entry, "predictor", str, at), base, f"{at}.predictor"),  # noqa: E501
                     "kv_tokens": 500_000}  # fmt: skip
        dtypes = _dtypes(entry, found["predictor"], at)
        kv = entry.get("kv_tokens", found["kv_tokens"])
        if "kv_memory_gb" in entry or "model" in entry:
            kv = _kv_from_memory(entry, size, dtypes["kv_dtype"] or "bfloat16", at)
        if not isinstance(kv, int) or isinstance(kv, bool) or kv < 1:
            raise InputError(f"{at}.kv_tokens = {kv!r}: expected an integer >= 1")
        spec = _speculative(entry.get("speculative"), f"{at}.speculative")
        out.append(Hardware(name, size, price * size, found["truth"], found["predictor"], kv, spec,
                            **dtypes))  # fmt: skip
    return out


def _dtypes(entry: dict[str, Any], predictor: str, at: str) -> dict[str, Any]:
    """The entry's weight and KV-cache dtypes: stated (``dtype``, ``kv_dtype``), else
    what its table's fingerprint records (checked against the stated ones later, in
    :func:`_check_dtypes`, with the table loaded under the command's trust)."""
    recorded = _recorded_dtypes(predictor)
    out: dict[str, Any] = {"stated": tuple(k for k in ("dtype", "kv_dtype") if k in entry)}
    for key in ("dtype", "kv_dtype"):
        value = entry.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise InputError(f"{at}.{key} = {value!r}: expected a dtype name (bfloat16, fp8, ...)")
        out[key] = canonical_dtype(value) if value is not None else recorded.get(key)
    return out


def _recorded_dtypes(predictor: str) -> dict[str, str]:
    """``dtype`` / ``kv_dtype`` of a table file's fingerprint (what it records, unchecked:
    a name; ``{}`` for a predictor that is not a table file or records neither)."""
    from servecal.sched.experiment.models import table_path

    path = table_path(predictor)
    if path is None:
        return {}
    try:
        fingerprint = json.loads(Path(path).read_text()).get("fingerprint") or {}
    except (OSError, ValueError, AttributeError):
        return {}  # a broken file is refused with its own line when it is loaded
    return {k: canonical_dtype(str(fingerprint[k])) for k in ("dtype", "kv_dtype")
            if fingerprint.get(k) is not None}  # fmt: skip


#: A ``[[device.tp]]`` entry may give its KV budget as memory instead of ``kv_tokens``:
#: ``kv_memory_gb`` per GPU and the ``model`` shape, at the entry's KV dtype (``kv_dtype``
#: stated, else its table's, else bfloat16).
KV_BUDGET = ("kv_memory_gb", "kv_dtype", "model")


def _kv_from_memory(entry: dict[str, Any], tp: int, kv_dtype: str, at: str) -> int:
    """KV tokens of an entry that gives ``kv_memory_gb`` and ``model``: an fp8 KV cache
    holds twice the tokens a bf16 one does."""
    from servecal.profiler.kvbudget import KVBudget
    from servecal.profiler.shapes import ModelShape

    if "kv_tokens" in entry:
        raise InputError(f"{at}: give kv_tokens or kv_memory_gb, not both")
    memory = _get(entry, "kv_memory_gb", (int, float), at)
    model = ModelShape.resolve(_get(entry, "model", str, at))
    try:
        return KVBudget(memory, model, kv_dtype, tp).tokens
    except InputError as exc:
        raise InputError(f"{at}: {exc}") from None


def _speculative(text: Any, where: str) -> str | None:
    """A ``[[device.tp]]``'s ``speculative = "k=N,accept=P"`` (None: off)."""
    if text is None:
        return None
    from servecal.sched.speculative import parse_speculative

    if not isinstance(text, str):
        raise InputError(f'{where} = {text!r}: expected a string like "k=4,accept=0.7"')
    try:
        parse_speculative(text)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    return text


def load_space(path: Path, trust: TableTrust = NO_TRUST) -> Space:
    """The plan file at ``path`` (TOML, or the same as JSON); one :class:`InputError` line
    for any mistake. ``trust``: how far its cost tables are trusted (the table flags)."""
    from servecal.profiler.files import load_mapping

    doc = load_mapping(path, "capacity plan")
    base = Path(path).resolve().parent
    for section in ("workload", "search"):
        if not isinstance(doc.get(section), dict):
            raise InputError(f"{path}: missing the [{section}] table")
    stray = set(doc) - {"workload", "target", "search", "device", "disaggregated"}
    if stray:
        raise InputError(f"{path}: unknown table [{sorted(stray)[0]}]")
    workload = _workload(doc["workload"], base)
    target = doc.get("target", {}).get("attainment", 0.9)
    if not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise InputError(f"target.attainment = {target!r}: expected a share in (0, 1]")
    replicas, policies, routers = _search(doc["search"])
    devices = doc.get("device")
    if not isinstance(devices, list) or not devices:
        raise InputError(f"{path}: need at least one [[device]] table")
    hardware = tuple(h for i, d in enumerate(devices) for h in _hardware(d, i, base))
    _check_models(hardware, trust)
    split: dict[str, Any] = {}
    if "disaggregated" in doc:
        from servecal.sched.cluster.disagg_space import load_disaggregated

        pairs, prefill = load_disaggregated(doc["disaggregated"], hardware, _prefill_policy)
        split = {"disaggregated": pairs, "prefill_policies": prefill}
    return Space(**workload, target=float(target), replicas=replicas, policies=policies,
                 routers=routers, hardware=hardware, trust=trust, **split)  # fmt: skip


def _prefill_policy(name: Any, where: str) -> PolicySpec:
    """A prefill pool's policy: an engine policy, or a driver one (FlowPrefill)."""
    try:
        return _policy(name, ENGINE, where)
    except InputError:
        return _policy(name, DRIVER, where)


def _workload(w: dict[str, Any], base: Path) -> dict[str, Any]:
    """The ``[workload]`` table as :class:`Space`'s workload fields."""
    workload, rate = _workload_source(w, base)
    n = w.get("requests", 2000)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(f"workload.requests = {n!r}: expected an integer >= 1")
    tpot = _positive(_get(w, "tpot_slo_ms", (int, float), "workload"), "workload.tpot_slo_ms")
    seeds = w.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise InputError(f"workload.seeds = {seeds!r}: expected a list of integers")
    slo_classes = w.get("slo_classes")
    if slo_classes is not None and not isinstance(slo_classes, str):
        raise InputError(f"workload.slo_classes = {slo_classes!r}: expected a workload name")
    stray = set(w) - {"trace", "name", "rate", "requests", "tpot_slo_ms", "seeds", "slo_classes",
                      "prefix_cache"}  # fmt: skip
    if stray:
        raise InputError(f"[workload]: unknown key {sorted(stray)[0]!r}")
    cache = w.get("prefix_cache", "auto")
    if cache not in ("auto", "on", "off"):
        raise InputError(f"workload.prefix_cache = {cache!r}: expected auto, on or off")
    return {"workload": workload, "rate": rate, "n_requests": n, "tpot_slo_ms": tpot,
            "slo_classes": slo_classes, "seeds": tuple(seeds), "prefix_cache": cache}  # fmt: skip


def _workload_source(w: dict[str, Any], base: Path) -> tuple[str, float | None]:
    """The workload (a trace's path made absolute, or a named workload) and its rate
    (``None``: a trace's own times)."""
    if ("trace" in w) == ("name" in w):
        raise InputError("[workload]: give trace = PATH or name = WORKLOAD (one of them)")
    if "trace" in w:
        workload = "trace:" + _path(_get(w, "trace", str, "workload"), base, "workload.trace")
    else:
        from servecal.sched.workloads import parse_workload

        workload = _get(w, "name", str, "workload")
        parse_workload(workload)  # an unknown name is one line
    rate = w.get("rate")
    if rate is None and not workload.startswith("trace:"):
        raise InputError("[workload]: a named workload needs rate = REQ_PER_S")
    if rate is not None:
        if not isinstance(rate, (int, float)) or isinstance(rate, bool):
            raise InputError(f"workload.rate = {rate!r}: expected a number")
        rate = _positive(rate, "workload.rate")
    return workload, rate


def _search(
    s: dict[str, Any],
) -> tuple[tuple[int, int], tuple[PolicySpec, ...], tuple[PolicySpec, ...]]:
    """The ``[search]`` table: the replica bounds, the policies and the routers."""
    bounds = _get(s, "replicas", list, "search")
    if (
        len(bounds) != 2
        or not all(isinstance(b, int) for b in bounds)
        or not 1 <= bounds[0] <= bounds[1]
    ):  # noqa: E501
        raise InputError(f"search.replicas = {bounds!r}: expected [MIN, MAX] with 1 <= MIN <= MAX")
    policies = tuple(
        _policy(p, ENGINE, "search.policies") for p in _get(s, "policies", list, "search")
    )  # noqa: E501
    routers = tuple(
        _policy(r, ROUTER, "search.routers") for r in _get(s, "routers", list, "search")
    )  # noqa: E501
    if not policies or not routers:
        raise InputError("[search]: need at least one policy and one router")
    return (bounds[0], bounds[1]), policies, routers


def _check_models(hardware: tuple[Hardware, ...], trust: TableTrust) -> None:
    """Load every truth and table now: a bad one is one line before any simulation;
    a table of another device, model or TP than its truth is refused (warned with
    ``--allow-mismatch``), as ``simulate`` refuses the same pair."""
    from servecal.sched.experiment.models import compare_provenance, load_predictor, load_truth

    names = [h.name for h in hardware]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"[[device]]: two candidates are both {twice[0]!r} (give them other "
                         "names, or state the dtype that tells them apart)")  # fmt: skip
    for h in hardware:
        load_truth(h.truth)
        table = load_predictor(h.predictor, h.truth, trust)
        compare_provenance(h.predictor, h.truth, trust)
        _check_dtypes(h, table, trust)


def _check_dtypes(h: Hardware, table: Any, trust: TableTrust) -> None:
    """A stated dtype must be the one the candidate's table and truth were measured in
    (a bf16 table cannot plan an fp8 deployment): a difference, or a table or samples
    truth that records none, is refused like a fingerprint mismatch (one line, exit 2;
    ``--allow-mismatch``: a warning)."""
    import warnings

    from servecal.costmodels.provenance import FingerprintMismatchWarning
    from servecal.sched.experiment.models import table_path, truth_fingerprint

    sides = []
    if table_path(h.predictor) is not None:
        sides.append((str(table_path(h.predictor)), getattr(table, "fingerprint", None) or {}))
    truth_fp, source = truth_fingerprint(h.truth)
    if h.truth.partition(":")[0] in ("samples", "fit"):
        sides.append((source, truth_fp or {}))
    if not sides:
        sides.append((h.predictor, {}))  # a built-in predictor: it records no dtype
    for key in h.stated:
        want = getattr(h, key)
        for name, fingerprint in sides:
            have = fingerprint.get(key)
            have = None if have is None else canonical_dtype(str(have))
            if have == want:
                continue
            what = "records no " + key if have is None else f"was measured with {key} {have!r}"
            message = f"{h.name}: {key} = {want!r} stated, but {name} {what}"
            if trust.refuse_mismatch:
                raise InputError(message + "; refused (pass --allow-mismatch to plan it anyway)")
            warnings.warn(message, FingerprintMismatchWarning, stacklevel=2)
