"""One simulated configuration over seeds: what ``servecal simulate`` runs.

Seed ``k`` spawns two independent streams from ``numpy.random.SeedSequence(k)``:
the workload's draws and the executor's noise. The same seed therefore gives the
same requests to every policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import Predictor
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.observe import Observer
from servecal.sched.policies import SLOWeaveConfig, parse_policy
from servecal.sched.result import RunResult
from servecal.sched.truth import AnalyticTruth, SampledTruth, parse_drift, parse_truth


def check_run_fields(config: Any) -> None:
    """The checks every run configuration shares (``workload, rate, n_requests, seeds,
    tpot_slo_ms``); raises ``ValueError`` naming the field."""
    if not config.tpot_slo_ms > 0:
        raise ValueError("tpot_slo_ms must be > 0")
    if config.rate is None and not config.workload.startswith("trace:"):
        raise ValueError("rate is required for a synthetic workload")
    if config.rate is not None and not config.rate > 0:
        raise ValueError("rate must be > 0")
    if config.n_requests < 1:
        raise ValueError("n_requests must be >= 1")
    if not config.seeds:
        raise ValueError("need at least one seed")


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one simulated configuration depends on (written to ``run.json``)."""

    workload: str
    policy: str
    tpot_slo_ms: float
    rate: float | None  # req/s; None replays a trace's own timestamps
    n_requests: int = 2000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    truth: str = "analytic"
    predictor: str = "oracle"
    drift: str | None = None
    kv_capacity: int = EngineConfig().kv_capacity
    sloweave: SLOWeaveConfig = field(default_factory=SLOWeaveConfig)
    #: attach a drift monitor (costmodels.drift) as an observer of every iteration
    monitor: bool = False
    #: plan with margins adapted online by quantile tracking (implies ``monitor``)
    adaptive_margin: bool = False

    def __post_init__(self) -> None:
        check_run_fields(self)

    def describe(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["seeds"] = list(self.seeds)
        return doc


def parse_range(text: str) -> tuple[float, float]:
    """``--rate-range LO:HI`` (req/s): the bracket a max-goodput bisection searches."""
    lo, _, hi = text.partition(":")
    try:
        bounds = (float(lo), float(hi))
    except ValueError:
        raise InputError(f"--rate-range {text!r}: expected LO:HI in req/s, e.g. 1:200") from None
    if not 0 < bounds[0] < bounds[1] or not np.isfinite(bounds[1]):
        raise InputError(f"--rate-range {text!r}: need 0 < LO < HI")
    return bounds


_TRUTHS: dict[str, AnalyticTruth | SampledTruth] = {}


def load_truth(spec: str) -> AnalyticTruth | SampledTruth:
    """Parse (and, for ``samples:PATH``, read once per process) a truth model."""
    if spec not in _TRUTHS:
        _TRUTHS[spec] = parse_truth(spec)
    return _TRUTHS[spec]


def load_predictor(spec: str, truth: AnalyticTruth | SampledTruth) -> Predictor:
    """``oracle`` (the analytic truth's own formula and noise) or a cost table path."""
    if spec == "oracle":
        if not isinstance(truth, AnalyticTruth):
            raise InputError("--predictor oracle needs --truth analytic; give a cost table JSON")
        return truth.oracle()
    from servecal.costmodels import CostTable

    if not Path(spec).is_file():
        raise InputError(f"--predictor {spec}: expected 'oracle' or a cost table JSON file")
    table = CostTable.load(spec)
    if isinstance(truth, SampledTruth):  # the table should describe the device measured
        from servecal.costmodels.provenance import compare_fingerprints
        from servecal.costmodels.samples import read_provenance

        compare_fingerprints(table.fingerprint, read_provenance(truth.path), spec, truth.path)
    return table


def run_seed(
    config: SimulationConfig,
    seed: int,
    rate: float | None = None,
    observers: tuple[Observer, ...] = (),
) -> RunResult:
    """Run ``config`` once with ``seed`` (at ``rate`` instead of ``config.rate`` if given).

    ``observers`` are passed to the engine (e.g. a drift monitor)."""
    from servecal.sched.workloads import generate

    workload_ss, executor_ss = np.random.SeedSequence(seed).spawn(2)
    requests = generate(
        config.workload,
        rate or config.rate,
        n_requests=config.n_requests,
        tpot_slo_ms=config.tpot_slo_ms,
        rng=np.random.default_rng(workload_ss),
    )
    truth = load_truth(config.truth)
    drift = parse_drift(config.drift) if config.drift else None
    predictor = load_predictor(config.predictor, truth)
    if config.monitor or config.adaptive_margin:
        from servecal.costmodels.drift import watch

        predictor, monitor = watch(predictor, adaptive=config.adaptive_margin)
        observers = (*observers, monitor)
    engine = Engine(
        requests,
        parse_policy(config.policy, config.sloweave),
        predictor,
        truth.executor(np.random.default_rng(executor_ss), drift),
        EngineConfig(kv_capacity=config.kv_capacity),
        observers=observers,
        policy_name=config.policy,
    )
    return engine.run()


def summarize_run(result: RunResult) -> dict[str, Any]:
    """The one metrics implementation, plus the engine's own counters."""
    from servecal.sched.metrics import request_outcomes, summarize

    summary = summarize(result.requests, result.iterations)
    # TPOT alone (the margin experiment): requests whose P99 inter-token gap met D_i
    summary["tpot_attainment"] = float(request_outcomes(result.requests)["tpot_met"].mean())
    summary["plan_calls"] = result.plan_calls
    summary["slo_exceptions"] = int(result.requests["slo_exception"].sum())
    return summary


def simulate(
    config: SimulationConfig,
    out: str | Path | None = None,
    max_goodput_range: tuple[float, float] | None = None,
    on_run: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run every seed; write ``out/seed-<k>/`` run folders; return the means over seeds.

    With ``max_goodput_range=(lo, hi)`` also bisect on the rate for the highest one
    with ≥ 90% attainment (mean over the seeds), as ``max_goodput``.
    """
    from servecal.sched.metrics import max_goodput, mean_over_seeds
    from servecal.sched.runfolder import write_run

    summaries = []
    for seed in config.seeds:
        result = run_seed(config, seed)
        summary = summarize_run(result)
        summaries.append(summary)
        if out is not None:
            write_run(
                Path(out) / f"seed-{seed}",
                result,
                {**config.describe(), "seed": seed},
                summary,
                {"seed": seed, "streams": "SeedSequence(seed).spawn(2): workload, executor"},
            )
        if on_run is not None:
            on_run()
    means = mean_over_seeds(summaries)
    if max_goodput_range is not None:

        def attainment_at(rate: float) -> float:
            values = [summarize_run(run_seed(config, s, rate))["attainment"] for s in config.seeds]
            if on_run is not None:
                on_run()
            return float(np.mean(values))

        means["max_goodput"] = max_goodput(attainment_at, *max_goodput_range)
    return means
