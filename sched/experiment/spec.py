"""What one run depends on: :class:`RunSpec`, and the checks that refuse a bad one.

A spec is frozen and picklable: a sweep ships it to a worker process (or a Ray
task) and the worker builds everything from it, so the same spec and seed give
the same run wherever it executes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.sched.experiment.models import DEFAULT_PREDICTOR, DEFAULT_TRUTH
from servecal.sched.policies.registry import DRIVER, ENGINE, PolicySpec
from servecal.util.errors import InputError

#: Where a run executes: the iteration engine on a simulated executor, FlowPrefill's
#: operator-level driver, or the iteration engine running real forward passes.
TORCH = "torch"
BACKENDS = (ENGINE, DRIVER, TORCH)
#: ``colocated``: decodes share the device, good = TTFT and TPOT met; ``prefill``: a
#: prefill-only instance (requests leave with their first token), good = TTFT met.
SETTINGS = ("colocated", "prefill")
#: ``--prefix-cache``: ``auto`` (on when the workload's requests carry prefix identity),
#: ``on`` or ``off`` (every prompt prefilled whole, as before the cache existed).
PREFIX_CACHE_MODES = ("auto", "on", "off")

#: Offered load (req/s) when none is given, per (workload, setting): the operating
#: points derived in docs/engine.md (the engine study) and docs/flowprefill.md
#: (multislo). Any other synthetic workload: ``FALLBACK_RATE``; a trace: its own times.
DEFAULT_RATES: dict[tuple[str, str], float] = {
    ("chat", "colocated"): 60.0,
    ("mixed", "colocated"): 60.0,
    ("long", "colocated"): 35.0,
    ("bursty", "colocated"): 30.0,
    ("multislo", "colocated"): 40.0,
    ("multislo", "prefill"): 90.0,
}
FALLBACK_RATE = 10.0
#: Most requests one run holds: its per-request arrays (arrivals, lengths, results,
#: a few hundred bytes a request) stay a few GB; an absurd ``--requests`` is refused
#: before anything of its size is allocated.
MAX_REQUESTS = 10_000_000


def default_rate(workload: str, setting: str = "colocated") -> float | None:
    """The documented offered load of ``workload`` in ``setting``; ``None`` for a trace."""
    if workload.startswith("trace:"):
        return None
    return DEFAULT_RATES.get((workload, setting), FALLBACK_RATE)


@dataclass(frozen=True)
class DriverOptions:
    """Operator-level driver only: ``granularity`` (``layer|attn-mlp|fine``: where a
    prefill can park) and ``scheduling`` (``event``: wake on events; ``iteration``:
    at every operator boundary, for comparison)."""

    granularity: str = "attn-mlp"
    scheduling: str = "event"

    def __post_init__(self) -> None:
        from servecal.sched.flowprefill.driver import MODES
        from servecal.sched.flowprefill.operators import GRANULARITIES

        if self.granularity not in GRANULARITIES:
            raise ValueError(f"--granularity must be one of {'|'.join(GRANULARITIES)}")
        if self.scheduling not in MODES:
            raise ValueError(f"--scheduling must be one of {'|'.join(MODES)}")


@dataclass(frozen=True)
class TorchOptions:
    """Torch backend only: ``device`` (``auto|cpu|cuda:N``), ``model`` (shape; default
    the table's), ``block_size`` (KV block tokens), ``max_seqs`` (requests holding KV
    at once)."""

    device: str = "auto"
    model: str | None = None
    block_size: int = 16
    max_seqs: int = 512

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.max_seqs < 1:
            raise ValueError("block_size and max_seqs must be >= 1")


@dataclass(frozen=True)
class RunSpec:
    """Everything a run depends on (written to each run folder's ``run.json``).

    * ``workload``: a name (``chat``, ``multislo``, …) or ``trace:PATH``;
      ``slo_classes`` stamps a workload's classes onto a trace; ``prompt_scale``
      scales every prompt and ``ttft_scale`` every TTFT SLO (the demo's scaled runs).
    * ``policy``: a :class:`PolicySpec` (built-in name or ``MODULE:CLASS``, options).
    * ``tpot_slo_ms``: the TPOT target of classes without their own (``None``: no
      TPOT target, as in the prefill setting); ``rate`` req/s (``None``: a trace's
      own times); ``n_requests``; ``seeds`` (seed ``k`` spawns the workload's and
      the executor's streams from ``SeedSequence(k)``).
    * ``truth`` and ``predictor``: names from :mod:`.models`; ``drift``
      (``AT:FACTOR[:REGION]``) slows the simulated truth down; ``power``: a power
      model (sched/power.py) pricing every simulated iteration's energy instead of the
      truth's own (``None``: the truth's own — the device truth's A100 model, a samples
      file's measured energy; ``"none"``: no energy).
    * ``backend``: ``engine``, ``operator-driver`` or ``torch``; ``setting``:
      ``colocated`` or ``prefill`` (operator driver only); ``kv_capacity`` tokens;
      ``driver``/``torch``: that backend's options (``None`` for the others).
    * ``speculative``: ``k=N,accept=P[/P...][,draft=TABLE]`` decodes with speculative
      decoding (engine backend only; :mod:`servecal.sched.speculative`); ``None``: off.
    * ``monitor``: attach the drift monitor; ``adaptive_margin``: plan with margins
      it adapts online.
    * ``trust``: how far the command trusts a cost table ``predictor`` names (its
      table flags, :class:`~servecal.costmodels.provenance.TableTrust`); it decides
      whether a table loads, never what a run computes, so it is not part of the
      run's configuration (``describe``, equality).
    * ``prefix_cache``: ``auto|on|off``, the engine's KV block cache of prompt
      prefixes (docs/prefix_cache.md); ``auto`` is on when requests carry block ids.
    * ``stream_iterations``: the engine writes iteration rows to the run folder in
      batches as it runs instead of keeping them (:mod:`servecal.sched.iteration_stream`);
      how a run is stored, never what it computes: not part of its configuration.
    """

    workload: str
    policy: PolicySpec
    tpot_slo_ms: float | None = None
    rate: float | None = None
    n_requests: int = 2000
    seeds: tuple[int, ...] = (0,)
    truth: str = DEFAULT_TRUTH
    predictor: str = DEFAULT_PREDICTOR
    backend: str = ENGINE
    setting: str = "colocated"
    drift: str | None = None
    power: str | None = None
    kv_capacity: int = 500_000
    slo_classes: str | None = None
    prompt_scale: float = 1.0
    ttft_scale: float = 1.0
    monitor: bool = False
    adaptive_margin: bool = False
    driver: DriverOptions | None = None
    torch: TorchOptions | None = field(default=None)
    trust: TableTrust = field(default=NO_TRUST, compare=False)
    prefix_cache: str = "auto"
    speculative: str | None = None
    stream_iterations: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        _check_prefix_cache(self.prefix_cache)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {'|'.join(BACKENDS)}, got {self.backend!r}")
        if self.setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {'|'.join(SETTINGS)}")
        if self.tpot_slo_ms is not None and not self.tpot_slo_ms > 0:
            raise ValueError("tpot_slo_ms must be > 0")
        if self.rate is None and not self.workload.startswith("trace:"):
            raise ValueError("rate is required for a synthetic workload")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate must be > 0")
        _check_requests(self.n_requests)
        if not self.seeds:
            raise ValueError("need at least one seed")
        if self.kv_capacity < 1:
            raise ValueError("kv_capacity must be >= 1")
        if not (self.prompt_scale > 0 and self.ttft_scale > 0):
            raise ValueError("prompt_scale and ttft_scale must be > 0")
        _check_speculative(self.speculative, self.backend)
        if self.stream_iterations:
            _check_streaming(self)

    @property
    def slos(self) -> tuple[str, ...]:
        """The SLOs a request must meet to be good in this setting."""
        return ("ttft",) if self.setting == "prefill" else ("ttft", "tpot")

    @property
    def models(self) -> str:
        """``truth device · predictor fitted``: the pair a run was simulated and planned on,
        as every printed table and report names it."""
        from servecal.sched.experiment.models import models_label

        return models_label(None if self.backend == TORCH else self.truth, self.predictor)

    def at_rate(self, rate: float) -> RunSpec:
        """The same run at another offered load (a max-goodput probe)."""
        return replace(self, rate=rate)

    def describe(self) -> dict[str, Any]:
        """Plain JSON for ``run.json``: every field; the policy by name, with all its
        option values in ``policy_options`` and the label rows use (``policy_label``:
        the name and the options given, e.g. ``sloweave[multi_prefill=True]``)."""
        doc = asdict(self)
        del doc["trust"], doc["stream_iterations"]
        doc["policy"] = self.policy.name
        doc["policy_label"] = self.policy.label  # name + the options given, as rows say
        doc["policy_options"] = self.policy.resolve().describe()
        doc["seeds"] = list(self.seeds)
        if doc["speculative"] is None:  # run.json as before speculative decoding
            del doc["speculative"]
        return doc


def _check_streaming(spec: RunSpec) -> None:
    """``--stream-iterations``: the engine's alone, and not with what adds columns
    per iteration (the drift monitor) or prices decodes from the rows (speculative)."""
    if spec.backend != ENGINE:
        raise ValueError(f"--stream-iterations runs on the engine backend only, not {spec.backend}")
    if spec.monitor or spec.adaptive_margin:
        raise ValueError("--stream-iterations with --monitor/--adaptive-margin is not supported")
    if spec.speculative is not None:
        raise ValueError("--stream-iterations with --speculative is not supported")


def _check_prefix_cache(mode: str) -> None:
    if mode not in PREFIX_CACHE_MODES:
        raise ValueError(f"--prefix-cache must be one of {'|'.join(PREFIX_CACHE_MODES)}")


def _check_speculative(text: str | None, backend: str) -> None:
    """``--speculative`` parses and runs on the engine (a bad value is one line)."""
    if text is None:
        return
    from servecal.sched.speculative import parse_speculative

    parse_speculative(text)
    if backend != ENGINE:
        raise ValueError("--speculative runs on the engine backend only")


def choose_backend(policy: PolicySpec, setting: str, requested: str | None = None) -> str:
    """Where ``policy`` runs in ``setting``: ``requested`` if given (and possible); in
    the prefill setting the operator driver; colocated, the engine when the policy has
    an engine form (decodes fused into iterations, as vLLM does), else the driver."""
    forms = policy.resolve().backends
    if requested is not None and requested not in BACKENDS:
        raise InputError(f"--backend {requested!r}: expected {'|'.join(BACKENDS)}")
    if requested is not None:
        need = ENGINE if requested == TORCH else requested
        if need not in forms:
            raise InputError(f"policy {policy.name} runs on {' or '.join(forms)}, not {requested}")
        return requested
    if setting == "prefill":
        if DRIVER not in forms:
            raise InputError(
                f"policy {policy.name} runs on the engine only, which always decodes: "
                "use --setting colocated"
            )
        return DRIVER
    return ENGINE if ENGINE in forms else DRIVER


def needs_tpot_target(workload: str, slo_classes: str | None) -> bool:
    """Whether some request of ``workload`` takes the run's TPOT target (a class
    without its own TPOT SLO, or a trace without ``--slo-classes``)."""
    from servecal.sched.workloads import parse_workload
    from servecal.sched.workloads.generate import TraceWorkload
    from servecal.sched.workloads.spec import slo_classes_named

    parsed = parse_workload(workload)
    if isinstance(parsed, TraceWorkload):
        if slo_classes is None:
            return True
        classes = slo_classes_named(slo_classes)
    else:
        classes = parsed.classes
    return any(c.tpot_slo_ms is None for c in classes)


def _check_requests(n_requests: int) -> None:
    """At least one request, and no more than one run holds: an absurd count is refused
    before any array of its size exists."""
    if n_requests < 1:
        raise ValueError("n_requests must be >= 1")
    if n_requests > MAX_REQUESTS:
        raise ValueError(
            f"--requests {n_requests:,}: more than one run holds "
            f"(at most {MAX_REQUESTS:,}): split it into seeds or runs"
        )
