"""Measured shape of each workload: what ``python -m servecal.sched.workloads`` prints.

The docs quote these numbers next to the command, so they are measured on the
code as it is, never copied by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servecal.sched.workloads.generate import generate


def describe(
    name: str, rate: float = 10.0, n_requests: int = 20000, seed: int = 0, tpot_slo_ms: float = 25.0
) -> dict[str, Any]:
    """Sample ``n_requests`` of ``name`` at ``rate`` and summarise lengths, SLOs and arrivals."""
    reqs = generate(
        name, rate, n_requests=n_requests, tpot_slo_ms=tpot_slo_ms, rng=np.random.default_rng(seed)
    )
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    ttft = np.array([r.ttft_slo_ms for r in reqs])
    arrival_s = np.array([r.arrival_ms for r in reqs]) / 1000.0
    per_second = np.bincount(arrival_s.astype(int))
    classes, counts = np.unique([r.slo_class for r in reqs], return_counts=True)
    return {
        "workload": name,
        "requests": len(reqs),
        "prompt_median": float(np.median(prompt)),
        "prompt_mean": float(prompt.mean()),
        "prompt_p99": float(np.percentile(prompt, 99)),
        "output_median": float(np.median(output)),
        "output_mean": float(output.mean()),
        "ttft_slo_median_ms": float(np.median(ttft)),
        "rate_measured": (len(reqs) - 1) / (arrival_s[-1] - arrival_s[0]),
        # Variance/mean of arrivals per second: 1 for Poisson, larger for bursts.
        "dispersion_1s": float(per_second.var() / per_second.mean()),
        "classes": {str(c): int(k) / len(reqs) for c, k in zip(classes, counts, strict=True)},
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`describe` rows."""
    head = (
        "| workload | prompt median / mean / P99 | output median / mean | TTFT SLO median ms "
        "| rate req/s | dispersion (1 s) | classes |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        classes = ", ".join(f"{k} {v:.0%}" for k, v in r["classes"].items())
        lines.append(
            f"| {r['workload']} | {r['prompt_median']:.0f} / {r['prompt_mean']:.0f} / "
            f"{r['prompt_p99']:.0f} | {r['output_median']:.0f} / {r['output_mean']:.0f} | "
            f"{r['ttft_slo_median_ms']:.0f} | {r['rate_measured']:.2f} | "
            f"{r['dispersion_1s']:.2f} | {classes} |"
        )
    return "\n".join(lines)
