"""Refuse a spec that cannot run, before any run starts (one :class:`InputError` line).

Every option must apply to the run it is given for: a backend's options go with
that backend, the prefill setting (TTFT only) takes no TPOT target, the torch
backend measures instead of simulating (no truth, no drift), and so on.
"""

from __future__ import annotations

import warnings

from servecal.sched.experiment.models import (
    DEFAULT_TRUTH,
    OracleWarning,
    compare_provenance,
    load_predictor,
    load_truth,
    oracle_notice,
)
from servecal.sched.experiment.spec import TORCH, RunSpec, needs_tpot_target
from servecal.sched.policies.registry import DRIVER, ENGINE
from servecal.util.errors import InputError


def _fail(message: str) -> InputError:
    return InputError(message)


def check(spec: RunSpec, searching: bool = False) -> None:
    """Raise :class:`InputError` if ``spec`` cannot run (``searching``: a max-goodput
    search will probe it at other rates). A spec that plans on the oracle runs, with an
    :class:`OracleWarning` (one ``warning:`` line on the command line)."""
    from servecal.sched.workloads import parse_workload

    parse_workload(spec.workload)
    if spec.slo_classes is not None and not spec.workload.startswith("trace:"):
        raise _fail(f"--slo-classes applies to trace:PATH workloads, not {spec.workload}")
    backend = spec.backend
    spec.policy.build(ENGINE if backend == TORCH else backend)  # names, options, backend
    _check_setting(spec, backend)
    _check_backend_options(spec, backend)
    if backend == TORCH:
        _check_torch(spec, searching)
    _check_models(spec, backend)


def _check_setting(spec: RunSpec, backend: str) -> None:
    """The prefill setting runs on the operator driver with no TPOT target; any other
    needs one when some of the workload's requests carry none."""
    if spec.setting == "prefill":
        if backend != DRIVER:
            raise _fail(f"--setting prefill runs on the operator driver, not the {backend}")
        if spec.tpot_slo_ms is not None:
            raise _fail("--tpot-slo does not apply to --setting prefill (only TTFT is judged)")
    elif spec.tpot_slo_ms is None and needs_tpot_target(spec.workload, spec.slo_classes):
        raise _fail(f"--tpot-slo is required: {spec.workload} has requests without a TPOT SLO")


def _check_backend_options(spec: RunSpec, backend: str) -> None:
    """A backend's own options go with that backend."""
    if spec.driver is not None and backend != DRIVER:
        raise _fail(f"--granularity/--scheduling apply to the operator driver, not the {backend}")
    if spec.torch is not None and backend != TORCH:
        raise _fail(f"--device/--model apply to --backend torch, not the {backend}")
    if backend == DRIVER and (spec.monitor or spec.adaptive_margin):
        raise _fail("--monitor/--adaptive-margin watch the engine's iterations, not the driver's")


def _check_torch(spec: RunSpec, searching: bool) -> None:
    """The torch backend measures: no search, drift, truth or power model, and a table
    to plan on."""
    if searching:
        raise _fail("--backend torch does not search --max-goodput (each probe is a real run)")
    if spec.drift:
        raise _fail("--drift slows the simulated truth down; the torch backend measures")
    if spec.truth != DEFAULT_TRUTH:
        raise _fail("--truth is the simulated executor's; drop it with --backend torch")
    if spec.power is not None:
        raise _fail("--power prices simulated iterations; the torch backend meters its own")
    from servecal.sched.experiment.models import table_path

    if table_path(spec.predictor) is None:
        raise _fail(
            "--backend torch needs --predictor TABLE.json, from servecal calibrate "
            "on the same device and model shape"
        )


def _check_models(spec: RunSpec, backend: str) -> None:
    """The power model, drift, truth and predictor load, and the predictor's provenance
    matches the truth's; planning on the oracle warns."""
    if spec.power not in (None, "none"):
        from servecal.sched.power import load_power_model

        load_power_model(spec.power)
    if spec.drift:
        from servecal.sched.truth import parse_drift

        parse_drift(spec.drift)
    load_truth(spec.truth)
    load_predictor(spec.predictor, spec.truth, spec.trust)
    if backend != TORCH:  # the torch backend measures: its truth is never drawn from
        compare_provenance(spec.predictor, spec.truth, spec.trust)
    notice = oracle_notice(spec.predictor)
    if notice is not None:
        warnings.warn(notice, OracleWarning, stacklevel=3)  # check()'s caller
