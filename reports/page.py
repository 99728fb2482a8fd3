"""Assemble the sections into ``report.html`` and ``report.md`` and write them atomically."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.reports.answer import answer_section
from servecal.reports.blocks import Section, Text
from servecal.reports.calibration import calibration_section
from servecal.reports.calibration_value import calibration_value_section
from servecal.reports.drift import drift_section
from servecal.reports.energy import energy_section
from servecal.reports.fleet import fleet_section
from servecal.reports.labels import relabel
from servecal.reports.loading import ReportInputs, discover
from servecal.reports.render import to_html, to_markdown
from servecal.reports.scheduling import scheduling_section
from servecal.util.atomic import atomic_write_bytes
from servecal.util.folders import make_folder

HTML_NAME = "report.html"
MD_NAME = "report.md"


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path


def _write_atomic(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))  # a normal file's mode (0644), not 0600


def _sample_meter(inputs: ReportInputs) -> str | None:
    """The energy meter of the calibration, when exactly one was given."""
    if len(inputs.calibrations) != 1:
        return None
    meter = inputs.calibrations[0].fingerprint.get("energy_source")
    return str(meter) if meter else None


def _device_and_model(inputs: ReportInputs) -> tuple[str, str]:
    for cal in inputs.calibrations:
        fp = cal.fingerprint
        device = str(fp.get("device_name", fp.get("device", "")))
        model = fp.get("model", fp.get("model_shape", ""))
        if isinstance(model, dict):
            model = model.get("name", "")
        return device, str(model)
    return "", ""


def sections(inputs: ReportInputs, preface: Sequence[str] = ()) -> list[Section]:
    """All report sections, in reading order: the short answer first (when there are
    runs), then a preface section when given, and the detail. Policies are shown by
    their short labels (reports.labels), their options in the answer's legend."""
    inputs = relabel(inputs)
    device, model = _device_and_model(inputs)
    out = []
    answer = answer_section(inputs.runs)
    if answer is not None:
        out.append(answer)
    if preface:
        out.append(Section("setup", "Setup", tuple(Text(p) for p in preface)))
    if inputs.fleets:
        out.append(fleet_section(inputs.fleets))
    out += [calibration_section(inputs.calibrations), scheduling_section(inputs.runs)]
    value = calibration_value_section(inputs.runs)
    if value is not None:
        out.append(value)
    out += [
        energy_section(inputs.runs, device=device, model=model, sample_meter=_sample_meter(inputs)),
        drift_section(inputs.runs),
    ]
    return out


def write_report(
    inputs: ReportInputs,
    out_dir: str | Path,
    title: str = "servecal report",
    preface: Sequence[str] = (),
    sources: Sequence[str | Path] = (),
) -> ReportFiles:
    """Render every section and write ``report.html`` and ``report.md`` into ``out_dir``.

    ``sources`` are the paths the inputs were found under (listed on the page).
    """
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    listed = [str(p) for p in sources] or _inputs_list(inputs)
    meta = [
        f"Generated {stamp}; {len(inputs.runs)} run(s), {len(inputs.calibrations)} calibration(s).",
        *[f"Input: {p}" for p in listed],
    ]
    return write_pages(sections(inputs, preface), out_dir, title, meta)


def write_pages(
    secs: Sequence[Section], out_dir: str | Path, title: str, meta: Sequence[str] = ()
) -> ReportFiles:
    """Write already-built sections as ``report.html`` and ``report.md`` (atomically)."""
    out = Path(out_dir)
    make_folder(out)
    files = ReportFiles(out / HTML_NAME, out / MD_NAME)
    _write_atomic(files.html, to_html(title, meta, secs))
    _write_atomic(files.markdown, to_markdown(title, meta, secs, HTML_NAME))
    return files


def _inputs_list(inputs: ReportInputs, limit: int = 6) -> list[str]:
    paths = [str(f.path) for f in inputs.fleets] + [str(c.path) for c in inputs.calibrations]
    roots = sorted({str(r.path.parent) for r in inputs.runs})
    paths += roots
    return paths if len(paths) <= limit else paths[:limit] + [f"... and {len(paths) - limit} more"]


def build_report(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    title: str = "servecal report",
    preface: Sequence[str] = (),
    trust: TableTrust = NO_TRUST,
) -> ReportFiles:
    """Find runs and calibrations under ``paths`` and write the report into ``out_dir``
    (``trust``: how far the cost tables they name are trusted, the table flags)."""
    inputs = discover(paths, trust)
    return write_report(inputs, out_dir, title=title, preface=preface, sources=paths)
