"""One FlowPrefill-study configuration over seeds: runs, summaries, max TTFT goodput.

Seed ``k`` spawns the same two streams as :mod:`servecal.sched.simulate`
(workload, executor), so every policy sees the same requests and, where its
batches match, the same noise. In the prefill setting a request is good when it
meets its TTFT SLO (TTFT goodput); colocated, when it meets TTFT and TPOT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from servecal.costmodels.errors import InputError
from servecal.sched.flowprefill.driver import MODES, SETTINGS, DriverConfig, OperatorDriver
from servecal.sched.flowprefill.fitted import FIT_PREFIX, fitted_truth
from servecal.sched.flowprefill.operators import GRANULARITIES, OperatorModel
from servecal.sched.flowprefill.registry import driver_policy, engine_policy, uses_engine
from servecal.sched.request import Request
from servecal.sched.result import RunResult
from servecal.sched.simulate import check_run_fields

#: The bracket ``--max-goodput`` searches by default (req/s): FlowPrefill's max TTFT
#: goodput on multislo lies above the device's raw prefill capacity (≈ 105 req/s),
#: since it gives up on already-late long requests (docs/flowprefill.md).
RATE_RANGE = (1.0, 400.0)

#: Offered load of the study when none is given: multislo near the analytic device's
#: prefill capacity (prefill setting) / where decodes start to bind (colocated).
DEFAULT_RATES = {"prefill": 90.0, "colocated": 40.0}


def default_rate(workload: str, setting: str) -> float | None:
    """``None`` (the file's own arrival times) for a trace, else the study's default."""
    return None if workload.startswith("trace:") else DEFAULT_RATES.get(setting, 40.0)


@dataclass(frozen=True)
class FlowConfig:
    """Everything one configuration depends on (written to ``run.json``)."""

    workload: str = "multislo"
    policy: str = "flowprefill"
    setting: str = "prefill"
    rate: float | None = 40.0  # req/s; None replays a trace's own timestamps
    n_requests: int = 2000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    truth: str = "analytic"
    predictor: str = "oracle"
    kv_capacity: int = 500_000
    granularity: str = "attn-mlp"
    mode: str = "event"
    slo_classes: str | None = None
    tpot_slo_ms: float = 100.0

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {'|'.join(SETTINGS)}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {'|'.join(MODES)}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"--granularity must be one of {'|'.join(GRANULARITIES)}")
        check_run_fields(self)

    def describe(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["seeds"] = list(self.seeds)
        return doc

    @property
    def slos(self) -> tuple[str, ...]:
        """SLOs a request must meet to be good in this setting."""
        return ("ttft",) if self.setting == "prefill" else ("ttft", "tpot")


def load_models(config: FlowConfig) -> tuple[Any, Any]:
    """(truth, predictor): the engine's specs, plus ``fit:PATH`` (:mod:`.fitted`)."""
    from servecal.sched.simulate import load_predictor, load_truth

    if config.truth.startswith(FIT_PREFIX):
        truth = fitted_truth(config.truth)
    else:
        truth = load_truth(config.truth)
    return truth, load_predictor(config.predictor, truth)


def validate(config: FlowConfig) -> None:
    """Fail on a bad policy, workload, truth or predictor before any run starts."""
    from servecal.sched.workloads import parse_workload

    parse_workload(config.workload)
    uses_engine(config.policy, config.setting)
    load_models(config)


def workload_requests(config: FlowConfig, seed: int, rate: float | None = None) -> list[Request]:
    """The requests of ``seed`` (the first stream of ``SeedSequence(seed)``)."""
    from servecal.sched.workloads import generate

    workload_ss, _ = np.random.SeedSequence(seed).spawn(2)
    return generate(
        config.workload,
        rate or config.rate,
        n_requests=config.n_requests,
        tpot_slo_ms=config.tpot_slo_ms,
        rng=np.random.default_rng(workload_ss),
        slo_classes=config.slo_classes,
    )


def run_requests(config: FlowConfig, requests: list[Request], seed: int) -> RunResult:
    """Run ``requests`` under ``config`` with the executor stream of ``seed``."""
    from servecal.sched.engine import Engine, EngineConfig

    _, executor_ss = np.random.SeedSequence(seed).spawn(2)
    truth, predictor = load_models(config)
    executor = truth.executor(np.random.default_rng(executor_ss))
    if uses_engine(config.policy, config.setting):
        policy = engine_policy(config.policy)
        assert policy is not None  # uses_engine said so
        engine = Engine(
            requests, policy, predictor, executor, EngineConfig(config.kv_capacity),
            policy_name=config.policy,
        )  # fmt: skip
        return engine.run()
    driver = OperatorDriver(
        requests,
        driver_policy(config.policy),
        predictor,
        executor,
        DriverConfig(
            setting=config.setting,
            mode=config.mode,
            kv_capacity=config.kv_capacity,
            operators=OperatorModel(granularity=config.granularity),
        ),
        policy_name=config.policy,
    )
    return driver.run()


def run_seed(config: FlowConfig, seed: int, rate: float | None = None) -> RunResult:
    """Draw seed ``seed``'s requests (at ``rate`` if given) and run them."""
    return run_requests(config, workload_requests(config, seed, rate), seed)


def summarize_flow(config: FlowConfig, run: RunResult) -> dict[str, Any]:
    """The metrics summary (TTFT-only goodput in the prefill setting) plus counters."""
    from servecal.sched.metrics import summarize

    summary = summarize(run.requests, run.iterations, slos=config.slos)
    summary.update(run.counters)
    return summary


def simulate_flow(
    config: FlowConfig,
    out: str | None = None,
    max_goodput_range: tuple[float, float] | None = None,
    on_run: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run every seed (writing ``out/seed-<k>/`` run folders); return means over seeds.

    With ``max_goodput_range`` also bisect the highest rate at which ≥ 90% of the
    requests are good (mean attainment over the seeds) as ``max_goodput``.
    """
    from pathlib import Path

    from servecal.sched.metrics import mean_over_seeds
    from servecal.sched.runfolder import write_run

    summaries = []
    for seed in config.seeds:
        run = run_seed(config, seed)
        summary = summarize_flow(config, run)
        summaries.append(summary)
        if out is not None:
            write_run(
                Path(out) / f"seed-{seed}",
                run,
                {**config.describe(), "seed": seed},
                summary,
                {"seed": seed, "streams": "SeedSequence(seed).spawn(2): workload, executor"},
            )
        if on_run is not None:
            on_run()
    means = mean_over_seeds(summaries)
    if max_goodput_range is not None:
        means["max_goodput"] = max_goodput_of(config, max_goodput_range, on_run)
    return means


def max_goodput_of(
    config: FlowConfig,
    bracket: tuple[float, float] = RATE_RANGE,
    on_probe: Callable[[], None] | None = None,
) -> float:
    """Highest rate (req/s) with mean attainment ≥ 90% over ``config.seeds``."""
    from servecal.sched.metrics import max_goodput

    def attainment_at(rate: float) -> float:
        values = [
            summarize_flow(config, run_seed(config, s, rate))["attainment"] for s in config.seeds
        ]
        if on_probe is not None:
            on_probe()
        return float(np.mean(values))

    return max_goodput(attainment_at, *bracket)


def with_policy(config: FlowConfig, policy: str) -> FlowConfig:
    """``config`` for another policy (checked)."""
    try:
        return replace(config, policy=policy)
    except ValueError as exc:
        raise InputError(str(exc)) from None
