"""Draw a synthetic workload: arrivals, then a class per request, then its lengths and SLOs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servecal.sched.request import Request
from servecal.sched.workloads.build import build_requests, clip_to_context
from servecal.sched.workloads.classes import draw_classes, stamp_slos
from servecal.sched.workloads.spec import WORKLOADS, WorkloadSpec, slo_classes_named
from servecal.util.errors import InputError

TRACE_PREFIX = "trace:"


@dataclass(frozen=True)
class TraceWorkload:
    """``trace:PATH``: replay a trace file (see :func:`load_trace`)."""

    path: Path

    @property
    def name(self) -> str:
        return f"{TRACE_PREFIX}{self.path}"


def parse_workload(spec: str) -> WorkloadSpec | TraceWorkload:
    """``chat|mixed|long|bursty|…`` (any key of ``WORKLOADS``, with ``+prefix`` for its
    shared-prefix variant: :mod:`.shared_prefix`) or ``trace:PATH``.

    Raises :class:`InputError` (one line) for an unknown name or a missing trace file.
    """
    spec = spec.strip()
    if spec.startswith(TRACE_PREFIX):
        path = Path(spec[len(TRACE_PREFIX) :])
        if not (path.is_file() or (path / "requests.parquet").exists()):  # or a run folder
            raise InputError(f"workload {spec}: trace file {path} not found")
        return TraceWorkload(path)
    base = spec.removesuffix("+prefix")  # the shared-prefix variant draws the base
    if base in WORKLOADS:
        return WORKLOADS[base]
    names = "|".join(WORKLOADS)
    raise InputError(f"unknown workload {spec!r}: expected {names}[+prefix] or trace:PATH")


def draw_requests(
    spec: WorkloadSpec,
    rate: float,
    *,
    tpot_slo_ms: float,
    rng: np.random.Generator,
    n_requests: int | None = None,
    duration_s: float | None = None,
) -> list[Request]:
    """Draw ``spec`` at mean ``rate`` req/s (draw order: arrivals, classes, lengths)."""
    if not tpot_slo_ms > 0:  # inf: no TPOT target (a prefill-only study)
        raise InputError(f"tpot_slo_ms must be a positive number, got {tpot_slo_ms}")
    arrival = spec.arrivals.times_ms(rate, rng, n_requests=n_requests, duration_s=duration_s)
    n = arrival.size
    which = draw_classes(spec.classes, n, rng)
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    for k, cls in enumerate(spec.classes):
        rows = np.flatnonzero(which == k)
        prompt[rows] = cls.prompt.sample(rows.size, rng)
        output[rows] = cls.output.sample(rows.size, rng)
    prompt, output = clip_to_context(prompt, output, spec.context_limit)
    ttft, tpot, names = stamp_slos(spec.classes, which, prompt, tpot_slo_ms)
    return build_requests(arrival, prompt, output, ttft, tpot, names)


def generate(
    name: str,
    rate: float,
    n_requests: int | None = None,
    duration_s: float | None = None,
    *,
    tpot_slo_ms: float,
    rng: np.random.Generator,
    slo_classes: str | None = None,
) -> list[Request]:
    """Requests of workload ``name`` at mean ``rate`` req/s, sorted by arrival.

    ``name`` is anything :func:`parse_workload` accepts; ``trace:PATH`` replays the
    file with its arrivals rescaled to ``rate`` and the default TTFT rule. Stops after
    ``n_requests`` or at ``duration_s``, whichever comes first. Classes that carry
    their own TPOT SLO keep it; the others get ``tpot_slo_ms``.

    ``slo_classes`` (``--slo-classes``, trace replay only) names a workload whose
    classes are stamped onto the trace's requests by share, e.g. ``multislo``.
    """
    from servecal.sched.workloads.shared_prefix import SHARED_SUFFIX, with_shared_prefixes

    if name.strip().endswith(SHARED_SUFFIX) and not name.startswith(TRACE_PREFIX):
        base = name.strip()[: -len(SHARED_SUFFIX)]
        drawn = generate(base, rate, n_requests, duration_s, tpot_slo_ms=tpot_slo_ms, rng=rng)
        limit = parse_workload(base).context_limit  # type: ignore[union-attr]
        return with_shared_prefixes(drawn, rng, context_limit=limit)
    workload = parse_workload(name)
    if isinstance(workload, TraceWorkload):
        from servecal.sched.workloads.trace import load_trace

        return load_trace(
            workload.path,
            rate,
            tpot_slo_ms=tpot_slo_ms,
            ttft_slo_ms=None,
            rng=rng,
            n_requests=n_requests,
            duration_s=duration_s,
            slo_classes=None if slo_classes is None else slo_classes_named(slo_classes),
        )
    if slo_classes is not None:
        raise InputError(f"--slo-classes applies to trace:PATH workloads, not {name}")
    return draw_requests(
        workload,
        rate,
        tpot_slo_ms=tpot_slo_ms,
        rng=rng,
        n_requests=n_requests,
        duration_s=duration_s,
    )
