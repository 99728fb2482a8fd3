"""One run: ``run(spec, seed) -> RunResult``, whatever backend executes it.

Seed ``k`` spawns two independent streams from ``numpy.random.SeedSequence(k)``:
the workload's draws and the executor's (noise, or the torch executor's prompt
token ids). The same seed therefore gives the same requests to every policy and
backend, and a run is a pure function of ``(spec, seed)``: it gives the same
numbers in this process, a worker process or a remote task.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from servecal.plugins import Registry
from servecal.sched.experiment.models import load_predictor, load_truth, noise_profile
from servecal.sched.experiment.spec import TORCH, RunSpec
from servecal.sched.policies.registry import DRIVER, ENGINE
from servecal.sched.request import Request
from servecal.sched.result import RunResult

if TYPE_CHECKING:
    from servecal.sched.prefix_cache import PrefixCacheConfig

#: What seed ``k``'s streams are, as written to each run folder.
STREAMS = "SeedSequence(seed).spawn(2): workload, executor"

#: ``on_progress`` of a long run (the torch backend): called with a progress object.
RunProgress = Callable[[Any], None]


def requests_for(spec: RunSpec, seed: int) -> list[Request]:
    """The requests of ``seed`` (the first stream of ``SeedSequence(seed)``)."""
    from servecal.sched.workloads import generate

    workload_ss, _ = np.random.SeedSequence(seed).spawn(2)
    requests = generate(
        spec.workload,
        spec.rate,  # type: ignore[arg-type]  # None replays a trace's own times
        n_requests=spec.n_requests,
        tpot_slo_ms=math.inf if spec.tpot_slo_ms is None else spec.tpot_slo_ms,
        rng=np.random.default_rng(workload_ss),
        slo_classes=spec.slo_classes,
    )
    if spec.prompt_scale == 1.0 and spec.ttft_scale == 1.0:
        return requests
    return [
        replace(
            r,
            prompt_tokens=max(1, round(r.prompt_tokens * spec.prompt_scale)),
            ttft_slo_ms=r.ttft_slo_ms * spec.ttft_scale,
        )
        for r in requests
    ]


def planning_predictor(spec: RunSpec, monitor: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """``(predictor to plan with, observers)``: the spec's predictor, watched by a drift
    monitor when ``spec.monitor``, ``spec.adaptive_margin`` or ``monitor`` asks (its
    margins adapted online with ``adaptive_margin``)."""
    predictor = load_predictor(spec.predictor, spec.truth, spec.trust)
    if not (monitor or spec.monitor or spec.adaptive_margin):
        return predictor, ()
    from servecal.costmodels.drift import watch

    profile = noise_profile(predictor, spec.predictor)
    predictor, drift_monitor = watch(predictor, adaptive=spec.adaptive_margin, profile=profile)
    return predictor, (drift_monitor,)


def _simulated_executor(spec: RunSpec, rng: np.random.Generator, requests: list[Request]) -> Any:
    from servecal.sched.truth import parse_drift

    drift = None
    if spec.drift:  # a share of the run (``30%``) is of the span up to the last arrival
        span = max((r.arrival_ms for r in requests), default=0.0)
        drift = parse_drift(spec.drift).resolved(span)
    executor = load_truth(spec.truth).executor(rng, drift)
    if spec.power is None:
        return executor
    from servecal.sched.power import PricedExecutor, Unpriced, load_power_model

    if spec.power == "none":
        return Unpriced(executor)
    return PricedExecutor(executor, load_power_model(spec.power))


def prefix_cache_config(spec: Any, requests: list[Request]) -> PrefixCacheConfig | None:
    """The engine's prefix cache for ``spec.prefix_cache`` (a run's or a cluster's;
    ``auto``: on when some request carries block ids, with their block size)."""
    from servecal.sched.prefix_cache import PrefixCacheConfig

    with_ids = next((r for r in requests if r.block_ids), None)
    speculative = getattr(spec, "speculative", None) is not None  # not modelled together
    if spec.prefix_cache == "off" or (
        spec.prefix_cache == "auto" and (with_ids is None or speculative)
    ):
        return None
    return PrefixCacheConfig(block_size=512 if with_ids is None else with_ids.block_size)


def _speculative(spec: RunSpec, rng: np.random.Generator) -> Any:
    """The run's speculative decoding, its acceptance streams seeded from the executor
    stream's seed sequence (read, not drawn: the executor's noise is unchanged)."""
    if spec.speculative is None:
        return None
    from servecal.sched.speculative import parse_speculative

    seed = int(rng.bit_generator.seed_seq.generate_state(1)[0])  # type: ignore[attr-defined]
    return parse_speculative(spec.speculative).seeded(seed)


def _on_engine(
    spec: RunSpec,
    requests: list[Request],
    rng: np.random.Generator,
    on_progress: RunProgress,
    stream_dir: str | None = None,
) -> RunResult:
    from servecal.sched.engine import Engine, EngineConfig

    stream_to = None
    if spec.stream_iterations:
        from servecal.sched.iteration_stream import temporary_file

        stream_to = str(temporary_file(stream_dir))

    predictor, observers = planning_predictor(spec)
    engine = Engine(
        requests,
        spec.policy.build(ENGINE),
        predictor,
        _simulated_executor(spec, rng, requests),
        EngineConfig(
            kv_capacity=spec.kv_capacity,
            prefix_cache=prefix_cache_config(spec, requests),
            speculative=_speculative(spec, rng),
            stream_iterations_to=stream_to,
        ),
        observers=observers,
        policy_name=spec.policy.label,
    )
    return engine.run()


def _on_driver(
    spec: RunSpec, requests: list[Request], rng: np.random.Generator, on_progress: RunProgress
) -> RunResult:
    from servecal.sched.experiment.spec import DriverOptions
    from servecal.sched.flowprefill.driver import DriverConfig, OperatorDriver
    from servecal.sched.flowprefill.operators import OperatorModel

    if spec.prefix_cache == "on":
        from servecal.util.errors import InputError

        raise InputError("--prefix-cache on: the prefix cache is the iteration engine's only")
    options = spec.driver or DriverOptions()
    driver = OperatorDriver(
        requests,
        spec.policy.build(DRIVER),
        load_predictor(spec.predictor, spec.truth, spec.trust),
        _simulated_executor(spec, rng, requests),
        DriverConfig(
            setting=spec.setting,
            mode=options.scheduling,
            kv_capacity=spec.kv_capacity,
            operators=OperatorModel(granularity=options.granularity),
        ),
        policy_name=spec.policy.label,
    )
    return driver.run()


def _on_torch(
    spec: RunSpec, requests: list[Request], rng: np.random.Generator, on_progress: RunProgress
) -> RunResult:
    from servecal.sched.torch_executor.backend import run_torch

    return run_torch(spec, requests, rng, on_progress)


def _on_cluster(
    spec: Any, requests: list[Request], rng: np.random.Generator, on_progress: RunProgress
) -> RunResult:
    from servecal.sched.cluster.spec import run_cluster

    return run_cluster(spec, requests, rng, on_progress)


def _on_disaggregated(
    spec: Any, requests: list[Request], rng: np.random.Generator, on_progress: RunProgress
) -> RunResult:
    from servecal.sched.cluster.disagg import run_disaggregated

    return run_disaggregated(spec, requests, rng, on_progress)


#: How each backend runs a spec's requests: ``(spec, requests, rng, on_progress)``;
#: ``cluster``: replicas behind a router (:class:`servecal.sched.cluster.ClusterSpec`);
#: ``disaggregated``: prefill and decode pools (:class:`servecal.sched.cluster.disagg.DisaggSpec`).
RUNNERS = Registry(
    "run backend",
    "--backend",
    "runner(spec, requests, rng, on_progress) -> RunResult",
    user_form="",
)
# fmt: off
RUNNERS.add(ENGINE, "servecal.sched.experiment.run:_on_engine", "the iteration engine on a simulated executor")  # noqa: E501
RUNNERS.add(DRIVER, "servecal.sched.experiment.run:_on_driver", "FlowPrefill's operator-level driver on a simulated executor")  # noqa: E501
RUNNERS.add(TORCH, "servecal.sched.experiment.run:_on_torch", "the iteration engine running real forward passes (--predictor TABLE)")  # noqa: E501
RUNNERS.add("cluster", "servecal.sched.experiment.run:_on_cluster", "replicas behind a router (servecal plan)")  # noqa: E501
RUNNERS.add("disaggregated", "servecal.sched.experiment.run:_on_disaggregated", "prefill and decode pools with the KV moved between them (servecal plan)")  # noqa: E501
# fmt: on


def run(
    spec: RunSpec,
    seed: int,
    on_progress: RunProgress | None = None,
    stream_dir: str | None = None,
) -> RunResult:
    """Run ``spec`` once with ``seed``; ``on_progress`` is passed to a backend that
    reports progress inside a run (the torch backend). ``stream_dir``: where a
    ``spec.stream_iterations`` run writes its iterations file as it goes (beside the
    run folder it goes into; ``None``: the system's temporary folder)."""
    _, executor_ss = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(executor_ss)
    runner = RUNNERS.load(RUNNERS.entries[spec.backend].target)
    streaming = getattr(spec, "stream_iterations", False)  # a cluster spec has none
    more = {"stream_dir": stream_dir} if streaming else {}  # the engine's only
    return runner(spec, requests_for(spec, seed), rng, on_progress or (lambda _: None), **more)


def summarize(spec: RunSpec, result: RunResult) -> dict[str, Any]:
    """The one metrics implementation (judged on ``spec.slos``) plus the run's counters:
    ``plan_calls``, ``slo_exceptions``, ``tpot_attainment`` (TPOT alone, when judged)
    and the backend's own (``RunResult.counters``)."""
    from servecal.sched.metrics import outcome_columns
    from servecal.sched.metrics import summarize as metrics_summary

    requests = result.request_columns
    summary = metrics_summary(requests, result.iteration_columns, slos=spec.slos)
    if "tpot" in spec.slos:  # TPOT alone (the margin experiment): P99 gap met D_i
        summary["tpot_attainment"] = float(outcome_columns(requests, spec.slos)["tpot_met"].mean())
    summary["plan_calls"] = result.plan_calls
    summary["slo_exceptions"] = int(np.sum(requests["slo_exception"]))
    summary.update(result.counters)
    return summary
