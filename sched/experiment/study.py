"""What ``servecal compare`` runs: a study, every policy × workload × TPOT target.

A :class:`Study` names the grid and the :class:`~.spec.RunSpec` fields every run of
it shares; :func:`study_specs` turns it into one checked spec per cell (each on the
backend its policy takes in the study's setting), and :func:`study_folder` says where
a cell's run folders go. The command only parses flags and prints; ``simulate`` builds
its one spec with :func:`run_spec` the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecal.sched.experiment.check import check
from servecal.sched.experiment.spec import (
    RunSpec,
    choose_backend,
    default_rate,
    needs_tpot_target,
)
from servecal.sched.policies.registry import DRIVER, PolicySpec
from servecal.util.errors import InputError

#: TPOT targets (ms) when none are given and some workload needs one (docs/spec.md §1's).
DEFAULT_TARGETS = (10.0, 25.0, 50.0)


def run_spec(
    workload: str,
    policy: PolicySpec,
    tpot_slo_ms: float | None,
    rate: float | None,
    backend: str,
    **fields: Any,
) -> RunSpec:
    """One run's spec; ``rate`` ``None``: the workload's default rate in ``fields``'
    setting (a trace: its own times). ``fields``: every other :class:`RunSpec` field."""
    setting = fields.get("setting", "colocated")
    return RunSpec(
        workload=workload,
        policy=policy,
        tpot_slo_ms=tpot_slo_ms,
        rate=rate if rate is not None else default_rate(workload, setting),
        backend=backend,
        **fields,
    )


@dataclass(frozen=True)
class Study:
    """A grid of runs: ``workloads`` × ``policies`` × ``targets`` (TPOT ms; empty: the
    :data:`DEFAULT_TARGETS` when some workload needs one, else no target).

    ``rates``: a workload's offered load (absent: its default); ``shared``: the
    :class:`RunSpec` fields every run takes (``setting``, ``n_requests``, ``seeds``,
    ``truth``, ``predictor``, ...); ``driver``: the operator driver's options, for
    the policies that run there.
    """

    workloads: tuple[str, ...]
    policies: tuple[PolicySpec, ...]
    targets: tuple[float | None, ...] = ()
    rates: Mapping[str, float | None] = field(default_factory=dict)
    shared: Mapping[str, Any] = field(default_factory=dict)
    driver: Any = None

    @property
    def setting(self) -> str:
        return str(self.shared.get("setting", "colocated"))

    def tpot_targets(self) -> tuple[float | None, ...]:
        """The TPOT targets the study runs at."""
        if self.targets:
            return self.targets
        slo_classes = self.shared.get("slo_classes")
        needed = self.setting != "prefill" and any(
            needs_tpot_target(w, slo_classes) for w in self.workloads
        )
        return DEFAULT_TARGETS if needed else (None,)


def study_specs(study: Study, searching: bool = False) -> list[RunSpec]:
    """One checked spec per TPOT target × workload × policy (in that order); a spec that
    cannot run, or driver options no policy of the study uses, is refused before any
    run starts."""
    if not study.workloads or not study.policies:
        raise InputError("need at least one workload and one policy")
    specs = []
    for target in study.tpot_targets():
        for workload in study.workloads:
            for policy in study.policies:
                specs.append(_cell(study, workload, policy, target, searching))
    if study.driver is not None and not any(s.backend == DRIVER for s in specs):
        raise InputError(
            "--granularity/--scheduling apply to the operator driver; no policy runs there"
        )
    return specs


def _cell(
    study: Study, workload: str, policy: PolicySpec, target: float | None, searching: bool
) -> RunSpec:
    backend = choose_backend(policy, study.setting)
    driver = study.driver if backend == DRIVER else None
    rate = study.rates.get(workload)
    try:
        spec = run_spec(workload, policy, target, rate, backend, driver=driver, **study.shared)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    check(spec, searching=searching)
    return spec


def study_folder(out: Path, spec: RunSpec) -> Path:
    """Where a cell's run folders go: ``OUT/WORKLOAD/POLICY/tpot-T`` (``tpot-none``)."""
    target = "tpot-none" if spec.tpot_slo_ms is None else f"tpot-{spec.tpot_slo_ms:g}"
    return out / spec.workload / spec.policy.label / target


def study_folders(out: Path, specs: Sequence[RunSpec]) -> list[Path]:
    return [study_folder(out, s) for s in specs]
