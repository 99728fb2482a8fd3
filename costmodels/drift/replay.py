"""Check stored measurements against a cost table: the engine of ``servecal validate``.

Measurements are either a samples file (a fresh ``servecal calibrate``) or a run
folder (its ``iterations.parquet``: predictions are recomputed from the table
given, not taken from the log, so any table can be checked against any run).
Rows inside the table's grid hull are checked with the gate of :mod:`.gate`
(clusters: a samples file's grid points, a run's grid boxes); rows beyond an
edge are counted apart (there the table clamps: a miss means "extend the
calibration", not "the device drifted").
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.drift.extent import point_regions
from servecal.costmodels.drift.gate import Bands, GateConfig, decide, quarters_of
from servecal.costmodels.drift.reference import TABLE_AXES, reference_for
from servecal.costmodels.predictor import PLAN_QUANTILE
from servecal.costmodels.segments import read_table, table_exists
from servecal.util.errors import InputError

RUN_ITERATIONS = "iterations.parquet"
#: Columns of a run's iterations.parquet that a replay needs (actual time: duration_ms).
RUN_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "duration_ms")
QUERY_COLUMNS = ("n_decode", "chunk", "ctx", "prefix")
#: A served engine's first steps (``step`` 0-2 of the plug-in's log: the first forward
#: passes after start, 2-4x a warm step's time) are warm-up, dropped as a calibration
#: drops its own warm-up repeats (``CalibrateConfig.warmup``).
WARMUP_STEPS = 3
#: Regions named in a recommendation before "and N more".
NAME_REGIONS = 4


class CannotDecide(InputError):
    """The measurements cannot be checked against the table at all (none inside its
    grid, too few points): exit 2, like an ``undecided`` verdict."""


def load_measurements(path: str | Path) -> tuple[pd.DataFrame, str]:
    """Rows with ``n_decode, chunk, ctx, prefix, ms`` (+ ``start_ms`` for runs); and the kind.

    A run's idle iterations (``duration_ms = 0``) carry no evidence and are
    dropped, as are a served engine's warm-up steps (:data:`WARMUP_STEPS`, where the
    log numbers its steps); a negative, NaN or infinite value anywhere is an
    :class:`InputError`.
    """
    p = Path(path)
    if p.is_dir():
        it = p / RUN_ITERATIONS
        if not table_exists(it):
            raise InputError(f"{p}: not a run folder (no {RUN_ITERATIONS}) and not a samples file")
        frame = read_table(it)  # one file, or a live server's folder of parts
        for col in RUN_COLUMNS:
            if col not in frame.columns:
                raise InputError(f"{it}: column '{col}': missing")
            _check_column(frame[col], f"{it}: column '{col}'")
        out = frame.rename(columns={"duration_ms": "ms"})
        keep = out["ms"].to_numpy(dtype=float) > 0
        if "step" in out.columns:  # the plug-in's log: steps counted from the engine's start
            keep &= out["step"].to_numpy(dtype=float) >= WARMUP_STEPS
        return out.loc[keep].reset_index(drop=True), "run"
    if not p.exists():
        raise InputError(f"{p}: no such file or folder")
    from servecal.costmodels.samples import read_samples

    return read_samples(p).frame, "samples"


def measured_fingerprint(path: str | Path) -> dict[str, Any]:
    """What the measurements say about the device and model they come from.

    A samples file: its provenance. A run folder: the identity keys its
    ``run.json`` config records (a torch run records its model, hash, dtype), and,
    for a simulated run whose truth replays samples, those samples' provenance.
    """
    from servecal.costmodels.provenance import FINGERPRINT_KEYS
    from servecal.costmodels.samples import read_provenance

    p = Path(path)
    if not p.is_dir():
        return read_provenance(p)
    try:
        doc = json.loads((p / "run.json").read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"{p / 'run.json'}: unreadable ({type(exc).__name__})") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return {}
    fp: dict[str, Any] = {}
    truth = config.get("truth")
    if isinstance(truth, str) and truth.startswith("samples:"):
        source = Path(truth.removeprefix("samples:"))
        if source.is_file():
            fp.update(read_provenance(source))
    fp.update({k: config[k] for k in FINGERPRINT_KEYS if config.get(k) is not None})
    return fp


def plural(unit: str) -> str:
    """``grid point`` → ``grid points``, ``grid box`` → ``grid boxes``."""
    return unit + ("es" if unit.endswith("x") else "s")


def _check_column(column: pd.Series, where: str) -> None:
    if column.dtype == bool or not pd.api.types.is_numeric_dtype(column):
        raise InputError(f"{where}: must be numeric, got {column.dtype}")
    values = column.to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{where}, row {i}: {values[i]} is not a finite value >= 0 ({int(bad.sum())} bad rows)"
        )


def box_edges(values: tuple[int, ...]) -> np.ndarray:
    """A table axis refined with powers of two inside its range: a fitted model may keep
    only an axis's two ends (it is exact along it), but a box must stay narrow enough
    (at most ×2 wide above 1) to hold iterations of similar shape."""
    lo, hi = float(values[0]), float(values[-1])
    ladder = 2.0 ** np.arange(0, int(np.ceil(np.log2(max(hi, 1.0)))) + 1)
    return np.unique(
        np.concatenate([np.asarray(values, float), ladder[(ladder > lo) & (ladder < hi)]])
    )


def grid_boxes(axes: dict[str, tuple[int, ...]], frame: pd.DataFrame) -> np.ndarray:
    """Flat index of the grid box holding each row (lower corner per axis): the table's
    axes, refined by :func:`box_edges`."""
    flat = np.zeros(len(frame), dtype=np.int64)
    for name in TABLE_AXES:
        a = box_edges(tuple(axes[name]))
        x = frame[name].to_numpy(dtype=float)
        i = np.clip(np.searchsorted(a, x, side="right") - 1, 0, max(a.size - 2, 0))
        flat = flat * max(a.size - 1, 1) + i
    return flat


def replay(
    predictor: Any, frame: pd.DataFrame, kind: str = "samples", config: GateConfig | None = None
) -> dict[str, Any]:
    """The gate's verdict on measured rows (see module doc and docs/validate.md).

    Raises :class:`InputError` when nothing can be decided: no row inside the
    table's grid, or fewer grid points than the gate needs.
    """
    config = config or GateConfig()
    if len(frame) == 0:
        raise InputError("no measured rows to validate")
    cols = {c: frame[c].to_numpy(dtype=float) for c in QUERY_COLUMNS}
    args = tuple(cols[c] for c in QUERY_COLUMNS)
    ms = frame["ms"].to_numpy(dtype=float)
    ref = reference_for(predictor)
    inside, median = _medians(predictor, ref, args)
    bound = _bound(predictor, args)
    hit = None if bound is None else ms > bound
    checked = int(inside.sum())
    if checked == 0:
        raise CannotDecide(
            f"none of the {len(frame)} rows lies inside the table's grid "
            f"({_describe_domain(predictor)}): nothing to check"
        )
    rows = np.flatnonzero(inside)
    sub = frame.iloc[rows]
    r = np.log(ms[rows] / median[rows])
    n_dec, chunk = cols["n_decode"][rows], cols["chunk"][rows]
    by_box = kind == "run" and ref is not None
    unit, cluster, quarter = _units(predictor, sub, by_box, n_dec, chunk, config)
    hit_rows = None if hit is None else hit[rows]
    half_spaces = _half_space_inputs(predictor, by_box, cols, rows)
    result = _decide(r, hit_rows, cluster, (n_dec, chunk), config, quarter, unit, half_spaces)
    outside = _outside(hit, inside)
    bands = Bands(config.grid, quarters=quarter is not None).of(n_dec, chunk, quarter)
    for reg in result.regions:
        reg["grid"] = _grid_span(predictor, sub, (bands == reg["index"]).any(axis=1))
    found = _found_regions(predictor, sub, result, hit_rows, unit)
    doc: dict[str, Any] = {
        "verdict": result.verdict,
        "reason": result.reason,
        "false_alarm_bound": config.false_alarm,
        "min_shift": config.min_shift,
        "kind": kind,
        "unit": unit,
        "rows": int(len(frame)),
        "checked": checked,
        "checked_share": checked / len(frame),
        "outside_domain": outside,
        "points": result.clusters,
        "factor": result.factor,
        "median_ratio": math.exp(float(np.median(r))),
        "coverage": None if hit is None else float(1 - hit[rows].mean()),
        "coverage_promised": 1 - config.tail_p0 if hit is not None else None,
        "tests": result.tests,
        "regions": found + result.regions,
        "stability": {
            **result.stability,
            "flipping_rows": [int(rows[i]) for i in result.stability["flipping_rows"]],
        },
    }
    doc["recalibrate"] = [reg["grid"] for reg in doc["regions"] if reg["status"] == "drift"]
    doc["recommendation"] = _recommend(doc)
    return doc


def _half_space_inputs(
    predictor: Any, by_box: bool, cols: dict[str, np.ndarray], rows: np.ndarray
) -> tuple[dict | None, dict | None]:
    """Each checked row's coordinates and the table's grid, for the half-space tests:
    a samples file's grid points only (a run's boxes mix coordinates and its rows are
    not interleaved repeats)."""
    coords = None if by_box else {a: cols[a][rows] for a in QUERY_COLUMNS}
    return coords, getattr(predictor, "axes", None)


def _found_regions(
    predictor: Any, sub: pd.DataFrame, result: Any, hit: np.ndarray | None, unit: str
) -> list[dict[str, Any]]:
    """The regions the per-point tests found, each with the grid span to re-measure."""
    rejected = {"slowdown": result.slowed, "speedup": result.sped_up}
    found = point_regions(
        sub, result.cluster_of_row, rejected, result.cluster_median, hit, plural(unit)
    )
    for reg, mask in zip(found, [m for m in rejected.values() if m.any()], strict=True):
        reg["grid"] = _grid_span(predictor, sub, mask[result.cluster_of_row])
    for reg in result.found:  # the half-spaces whose pooled rows reject
        mine = reg.pop("mask")[result.cluster_of_row]
        reg["coverage"] = None if hit is None else 1.0 - float(hit[mine].mean())
        reg["grid"] = _grid_span(predictor, sub, mine)
        found.append(reg)
    return found


def _decide(
    r: np.ndarray,
    hit: np.ndarray | None,
    cluster: np.ndarray,
    bands: tuple[np.ndarray, np.ndarray],
    config: GateConfig,
    quarter: np.ndarray | None,
    unit: str,
    half_spaces: tuple[dict | None, dict | None],
) -> Any:
    """The gate's decision; too few units to decide is :class:`CannotDecide`, worded in
    the run's unit. ``bands``: each row's n_decode and chunk; ``half_spaces``: each row's
    coordinates (samples only) and the table's grid that cuts them."""
    try:
        return decide(r, hit, cluster, *bands, config, quarter, *half_spaces)
    except ValueError as exc:
        raise CannotDecide(
            f"cannot decide: {str(exc).replace('grid points', plural(unit))}"
        ) from None


def _outside(hit: np.ndarray | None, inside: np.ndarray) -> dict[str, Any]:
    """The rows beyond the table's grid: how many, and how many of them the bound covers."""
    out_rows = int((~inside).sum())
    return {
        "rows": out_rows,
        "coverage": None if hit is None or not out_rows else float(1 - hit[~inside].mean()),
    }


def _medians(
    predictor: Any, ref: Any, args: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Which rows lie inside the table's grid, and the predicted median of every row
    (interpolated when the predictor has a reference; rows beyond the grid are
    reported apart)."""
    if ref is not None:
        return ref.domain_mask(*args), ref.many(*args)
    inside = np.ones(len(args[0]), dtype=bool)
    return inside, np.asarray(predictor.predict(*args, q=0.5), dtype=float)


def _units(
    predictor: Any,
    sub: pd.DataFrame,
    by_box: bool,
    n_dec: np.ndarray,
    chunk: np.ndarray,
    config: GateConfig,
) -> tuple[str, np.ndarray, np.ndarray | None]:
    """The unit the gate's tests count (its name, each row's cluster) and, by grid box,
    each row's quarter of the run."""
    if not by_box:
        cluster = sub.groupby(list(QUERY_COLUMNS), sort=False).ngroup().to_numpy()
        return "grid point", cluster, None
    # a run rarely repeats a point: the unit is a grid box (within one region
    # cell, so that it lies in one band) in one quarter of the run's time
    when = sub["start_ms"].to_numpy(dtype=float) if "start_ms" in sub else np.arange(len(sub))
    quarter = quarters_of(when)
    cell = config.grid.indices(n_dec, chunk)
    cluster = (grid_boxes(predictor.axes, sub) * config.grid.size + cell) * 4 + quarter
    return "grid box", cluster, quarter


def _bound(predictor: Any, args: tuple[np.ndarray, ...]) -> np.ndarray | None:
    """``P99 + δ`` per row, or None for a table without a tail (medians only)."""
    lookup = getattr(predictor, "lookup_bound", None)
    if lookup is not None:
        if getattr(predictor, "margin_info", None) is None:
            return None
        return np.asarray(lookup(*args), dtype=float)
    p99 = np.asarray(predictor.predict(*args, q=PLAN_QUANTILE), dtype=float)
    return p99 + np.asarray(predictor.margin(*args), dtype=float)


def _describe_domain(predictor: Any) -> str:
    domain = getattr(predictor, "domain", None)
    if not domain:
        return "no grid"
    return ", ".join(f"{a} {lo}..{hi}" for a, (lo, hi) in domain.items())


def _grid_span(predictor: Any, rows: pd.DataFrame, mask: np.ndarray) -> dict[str, list[int]]:
    """Per axis, the grid values bracketing the rows of one region (what to re-measure)."""
    axes = getattr(predictor, "axes", None)
    span: dict[str, list[int]] = {}
    for name in QUERY_COLUMNS:
        x = rows[name].to_numpy(dtype=float)[mask]
        lo, hi = float(x.min()), float(x.max())
        if axes is None:
            span[name] = [int(lo), int(hi)]
            continue
        a = np.asarray(axes[name])
        i = max(int(np.searchsorted(a, lo, side="right")) - 1, 0)
        j = min(int(np.searchsorted(a, hi, side="left")), a.size - 1)
        span[name] = [int(a[i]), int(a[j])]
    return span


def _span_text(span: dict[str, list[int]]) -> str:
    return ", ".join(f"{k} {lo}" if lo == hi else f"{k} {lo}-{hi}" for k, (lo, hi) in span.items())


def _recommend(doc: dict[str, Any]) -> str:
    """The verdict as one sentence: undecided (and why), the table holds, or what to
    recalibrate; rows beyond the grid add a note."""
    out = doc["outside_domain"]
    tail = ""
    if out["rows"]:
        cov = "" if out["coverage"] is None else f", {out['coverage']:.1%} within P99 + margin"
        tail = f"; {out['rows']} rows lie beyond the table's grid{cov}: extend the calibration grid"
    checked = (
        f"{doc['checked']} of {doc['rows']} rows on {doc['points']} {plural(doc['unit'])} checked"
    )
    if doc["verdict"] == "undecided":
        return f"cannot decide ({checked}): {doc['reason']}" + tail
    if doc["verdict"] == "valid":
        return _holds(doc, checked) + tail
    return _recalibrate(doc, checked) + tail


def _holds(doc: dict[str, Any], checked: str) -> str:
    """The table holds: by how much the median moved, and the false-alarm bound."""
    tol = doc["min_shift"]
    if 1 - tol <= doc["factor"] <= 1 + tol:
        shift = f"median shift ×{doc['factor']:.3f}, within ±{tol:.0%}"
    else:  # the median moved, but on too few points for any test to be sure
        shift = (
            f"median shift ×{doc['factor']:.3f}, beyond ±{tol:.0%} but on too few "
            f"{plural(doc['unit'])} past the tolerance for a test to reject: measure more"
        )
    return f"the table holds ({checked}; {shift}; false-alarm bound {doc['false_alarm_bound']:.0%})"


def _recalibrate(doc: dict[str, Any], checked: str) -> str:
    """Drift: the whole table when it moved everywhere (or only in time), else the
    regions that moved, and since when in the run."""
    drifted = [r for r in doc["regions"] if r["status"] == "drift"]
    rejected = [t["test"] for t in doc["tests"] if t["rejected"]]
    since = [r for r in drifted if r["axis"] == "time"]
    moved = [r for r in drifted if r["axis"] != "time"]
    when = f"; it moved from {since[0]['region']} of the run on" if since else ""
    if _moved_everywhere(doc, rejected, moved):
        what = "the tail" if rejected == ["tail"] else f"shift ×{doc['factor']:.3f}"
        return f"recalibrate the whole table: {what} ({checked}){when}"
    return "recalibrate " + _regions_text(moved) + when


def _moved_everywhere(doc: dict[str, Any], rejected: list[str], moved: list[dict]) -> bool:
    """No region moved on its own, or at least half the regions shifted the way a
    rejecting test says (a half-space found from the data overlaps the bands: not counted)."""
    tol = math.log1p(doc["min_shift"])
    direction = 1 if "slowdown" in rejected else (-1 if "speedup" in rejected else 0)
    regions = [r for r in doc["regions"] if r["axis"] != "half-space"]
    shifted = [r for r in regions if direction * math.log(r["factor"]) > tol]
    return not moved or bool(direction and 2 * len(shifted) >= len(regions))


def _regions_text(moved: list[dict]) -> str:
    """The first :data:`NAME_REGIONS` regions that moved, each with its factor, coverage
    and grid span, and how many more."""
    parts = [
        f"{r['region']} (×{r['factor']:.3f}"
        + ("" if r["coverage"] is None else f", {r['coverage']:.1%} covered")
        + f"; grid {_span_text(r['grid'])})"
        for r in moved[:NAME_REGIONS]
    ]
    more = f" and {len(moved) - NAME_REGIONS} more regions" if len(moved) > NAME_REGIONS else ""
    return "; ".join(parts) + more
