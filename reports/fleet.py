"""Fleet section: one row per job of a ``servecal fleet`` folder, across devices and models.

Per job: the planned device, model and TP; the table's P50 of one reference
iteration (the plan's ``[report] reference``, by default 16 decodes + a 128-token
chunk at ctx 512); the held-out P50 MAPE and P99 + δ coverage recorded at fit;
joules per 1,000 tokens of that iteration where the calibration measured energy;
and whether the job's fingerprint (read from its folder) agrees with its plan
entry. Failed and unfinished jobs are listed with their one-line errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from servecal.reports.blocks import Section, Table, Text, fmt, pct
from servecal.reports.loading import FleetData

AXES = ("n_decode", "chunk", "ctx", "prefix")
COLUMNS = (
    "job",
    "device",
    "model",
    "TP",
    "status",
    "ran on",
    "P50 at reference (ms)",
    "held-out P50 MAPE",
    "held-out P99 + δ coverage",
    "J / 1,000 tokens",
    "fingerprint",
)


def _reference(fleet: FleetData) -> dict[str, int]:
    from servecal.profiler.fleet.plan import DEFAULT_REFERENCE

    ref = fleet.index.get("reference")
    return dict(ref) if isinstance(ref, dict) and set(ref) == set(AXES) else DEFAULT_REFERENCE


def _at_reference(fleet: FleetData, entry: dict[str, Any], ref: dict[str, int]) -> tuple[str, str]:
    """(P50 ms, J per 1,000 tokens) of the reference iteration from the job's table."""
    if entry.get("status") != "ok" or not entry.get("table"):
        return "—", "—"
    path = fleet.path / entry["table"]
    if not path.is_file():
        return "missing table", "—"
    from servecal.costmodels import CostTable

    table = CostTable.load(path, trust=fleet.trust)
    if any(not lo <= ref[a] <= hi for a, (lo, hi) in table.domain.items()):
        return "outside grid", "—"
    args = [ref[a] for a in AXES]
    p50 = float(table.predict(*args, q=0.5))
    tokens = ref["n_decode"] + ref["chunk"]
    joules = float(table.energy(*args)) if table.has_energy else math.nan
    per_k = "—" if math.isnan(joules) or tokens == 0 else fmt(1000.0 * joules / tokens)
    return fmt(p50), per_k


def _fingerprint(fleet: FleetData, entry: dict[str, Any]) -> list[str]:
    """The job's disagreements with its plan entry (its samples' fingerprint first)."""
    import json

    from servecal.costmodels.samples import find_fingerprint
    from servecal.profiler.fleet.plan import JobSpec, fingerprint_mismatches

    fp = entry.get("fingerprint") or {}
    path = find_fingerprint(fleet.path / str(entry.get("folder", "")) / "samples.parquet")
    if path is not None and path.is_file():
        try:
            fp = json.loads(path.read_text())
        except (OSError, ValueError):
            return [f"{path}: unreadable"]
    try:
        spec = JobSpec.from_dict(entry["spec"])
    except (KeyError, TypeError, ValueError):
        return ["no plan entry recorded in the index"]
    return fingerprint_mismatches(spec, fp)


def _ran_on(entry: dict[str, Any]) -> str:
    fp = entry.get("fingerprint") or {}
    name = str(fp.get("device_name") or "—")
    where = entry.get("where") or {}
    host = where.get("host")
    return f"{name} @ {host}" if host else name


def fleet_rows(fleet: FleetData) -> tuple[list[tuple[str, ...]], dict[str, list[str]]]:
    """The table's rows and, per job, its fingerprint disagreements (only jobs with some)."""
    ref = _reference(fleet)
    rows, flagged = [], {}
    for name, entry in fleet.jobs.items():
        m = entry.get("metrics") or {}
        p50, joules = _at_reference(fleet, entry, ref)
        issues = _fingerprint(fleet, entry) if entry.get("status") == "ok" else []
        if issues:
            flagged[name] = issues
        rows.append(
            (
                name,
                str(entry.get("device", "?")),
                str(entry.get("model", "?")),
                str(entry.get("tp", "?")),
                str(entry.get("status", "?")),
                _ran_on(entry),
                p50,
                pct(m.get("p50_mape")),
                pct(m.get("p99_coverage")),
                joules,
                ("disagrees" if issues else "agrees") if entry.get("status") == "ok" else "—",
            )
        )
    return rows, flagged


def fleet_section(fleets: Sequence[FleetData]) -> Section:
    """The Fleet section (one table per fleet folder given)."""
    blocks: list = []
    for fleet in fleets:
        ref = _reference(fleet)
        rows, flagged = fleet_rows(fleet)
        label = ", ".join(f"{a} {ref[a]}" for a in AXES)
        blocks.append(
            Table(
                f"Jobs of {fleet.path}",
                COLUMNS,
                tuple(rows),
                f"Reference iteration: {label}. MAPE and coverage are the held-out figures "
                "recorded when each table was fitted (coverage is absent for tables fitted "
                "from medians, e.g. imports). J per 1,000 tokens only where energy was measured.",
            )
        )
        for name, issues in flagged.items():
            blocks.append(Text(f"{name}: fingerprint disagrees with the plan: {'; '.join(issues)}"))
        bad = {n: e for n, e in fleet.jobs.items() if e.get("status") != "ok"}
        for name, entry in bad.items():
            why = entry.get("error") or f"status {entry.get('status')}"
            blocks.append(Text(f"{name} did not finish: {why}"))
        if bad:
            blocks.append(
                Text(
                    f"Rerun the plan with --out {fleet.path} to retry "
                    f"{', '.join(bad)}; finished jobs are kept."
                )
            )
    return Section("fleet", "Fleet", tuple(blocks))
