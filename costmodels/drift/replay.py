"""Replay stored measurements against a cost table: the engine of ``servecal validate``.

Measurements are either a samples file (a fresh ``servecal calibrate``) or a run
folder (its ``iterations.parquet``: predictions are recomputed from the table
given, not taken from the log, so any table can be checked against any run).
Rows go through a :class:`DriftMonitor` one by one; a run in its own time order,
a samples file shuffled with a fixed seed (a calibration sweep visits points in
design order, and a monitor fed one point's repeats in a row would read that
point's model error as a change over time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.costmodels.drift.monitor import DriftConfig, DriftMonitor
from servecal.costmodels.drift.profile import MIN_RESIDUALS, NoiseProfile
from servecal.costmodels.drift.reference import reference_for
from servecal.costmodels.errors import InputError
from servecal.costmodels.predictor import PLAN_QUANTILE

RUN_ITERATIONS = "iterations.parquet"
#: Columns of a run's iterations.parquet that a replay needs (actual time: duration_ms).
RUN_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "duration_ms")
PROGRESS_EVERY = 10_000


def load_measurements(path: str | Path) -> tuple[pd.DataFrame, str]:
    """Rows with ``n_decode, chunk, ctx, prefix, ms`` (+ ``start_ms`` for runs); and the kind."""
    p = Path(path)
    if p.is_dir():
        it = p / RUN_ITERATIONS
        if not it.is_file():
            raise InputError(f"{p}: not a run folder (no {RUN_ITERATIONS}) and not a samples file")
        try:
            frame = pd.read_parquet(it)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise InputError(f"{it}: cannot read ({type(exc).__name__})") from None
        for col in RUN_COLUMNS:
            if col not in frame.columns:
                raise InputError(f"{it}: column '{col}': missing")
        out = frame.rename(columns={"duration_ms": "ms"})
        keep = out["ms"].to_numpy(dtype=float) > 0  # idle iterations carry no evidence
        return out.loc[keep].reset_index(drop=True), "run"
    if not p.exists():
        raise InputError(f"{p}: no such file or folder")
    from servecal.costmodels.samples import read_samples

    return read_samples(p).frame, "samples"


def replay(
    predictor: Any,
    frame: pd.DataFrame,
    kind: str = "samples",
    profile: NoiseProfile | None = None,
    config: DriftConfig | None = None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Verdict of ``predictor`` on measured rows (see module doc).

    Without ``profile`` the noise scale is taken from the rows themselves (a MAD,
    which a shift does not move) and the centre is the P50 promise, 0. For a cost
    table the median is its interpolated P50 and rows beyond its grid are left
    out of the tests (counted in ``outside_domain``): see ``reference``.
    ``progress(rows_done)`` is called every :data:`PROGRESS_EVERY` rows.
    """
    if len(frame) < MIN_RESIDUALS:
        raise InputError(
            f"need at least {MIN_RESIDUALS} measured rows to validate, got {len(frame)}"
        )
    cols = {c: frame[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")}
    args = (cols["n_decode"], cols["chunk"], cols["ctx"], cols["prefix"])
    p50 = np.asarray(predictor.predict(*args, q=0.5), dtype=float)
    p99 = np.asarray(predictor.predict(*args, q=PLAN_QUANTILE), dtype=float)
    margin = np.asarray(predictor.margin(*args), dtype=float)
    ms = frame["ms"].to_numpy(dtype=float)
    ref = reference_for(predictor)
    inside = np.ones(len(frame), dtype=bool)
    median = p50
    if ref is not None:  # interpolated median; rows beyond the grid are reported apart
        inside = ref.domain_mask(*args)
        median = ref.many(*args)
    if inside.sum() < MIN_RESIDUALS:
        raise InputError(
            f"only {int(inside.sum())} of {len(frame)} rows lie inside the table's grid; "
            f"need {MIN_RESIDUALS} to validate"
        )
    resid = np.log(ms[inside] / median[inside])
    if profile is None:
        profile = NoiseProfile.from_residuals(
            resid, center=0.0, source="scale from the rows checked; centre = P50"
        )
    monitor = DriftMonitor(profile, config, reference=ref)
    if kind == "run":
        order = np.arange(len(frame))
        start = frame["start_ms"].to_numpy(dtype=float) if "start_ms" in frame else None
    else:
        order = np.random.default_rng(seed).permutation(len(frame))
        start = None
    n_i, c_i = cols["n_decode"].astype(np.int64), cols["chunk"].astype(np.int64)
    ctx_i, pre_i = cols["ctx"], cols["prefix"]
    for step, i in enumerate(order):
        monitor.observe(
            {
                "index": step,
                "start_ms": float(start[i]) if start is not None else 0.0,
                "n_decode": int(n_i[i]),
                "chunk": int(c_i[i]),
                # the monitor's median is the table's at this context and prefix
                "ctx": float(ctx_i[i]),
                "prefix": float(pre_i[i]),
                "pred_p50": float(p50[i]),
                "pred_p99": float(p99[i]),
                "margin": float(margin[i]),
                "actual_ms": float(ms[i]),
            }
        )
        if progress is not None and (step + 1) % PROGRESS_EVERY == 0:
            progress(step + 1)
    s = monitor.summary()["drift"]
    drifted = s["state"] == "drift"
    return {
        "verdict": "drifted" if drifted else "valid",
        "kind": kind,
        "rows": int(len(frame)),
        "factor": s["factor"],
        "median_ratio": math.exp(float(np.median(resid))),
        "coverage": float(np.mean((ms <= p99 + margin)[inside])),
        "outside_domain": s["outside_domain"],
        "coverage_promised": s["coverage_promised"],
        "alarms": s["alarms"],
        "regions": [r for r in s["regions"] if r["status"] != "ok"] if drifted else [],
        "recommendation": s["recommendation"],
        "noise": s["noise"],
    }
