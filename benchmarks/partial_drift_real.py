"""Issue 38's partial drift on a real CPU calibration: calibrate, slow the rows with
chunk >= 64 by 15%, validate both against the calibration's own table.

    python benchmarks/partial_drift_real.py OUT [--budget 40] [--factor 1.15] [--skip-calibrate]

Writes OUT/cal (``servecal calibrate --device cpu --model tiny``) and OUT/slow (the
drifted copy, same provenance), prints each verdict, its exit code and the half-space
test's best p-value. Timing on a shared host: the noise is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import numpy as np

from servecal.costmodels.samples import read_provenance, read_samples, write_samples


def validate(table: Path, samples: Path) -> tuple[int, dict]:
    run = subprocess.run(
        ["servecal", "validate", str(table), str(samples), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return run.returncode, json.loads(run.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=40)
    ap.add_argument("--factor", type=float, default=1.15)
    ap.add_argument("--skip-calibrate", action="store_true")
    args = ap.parse_args()
    cal, slow = args.out / "cal", args.out / "slow"
    print(f"load average at start: {os.getloadavg()}")
    if not args.skip_calibrate:
        subprocess.run(["servecal", "calibrate", "--device", "cpu", "--model", "tiny",
                        "--budget", str(args.budget), "--out", str(cal)], check=True)  # fmt: skip
    src = cal / "samples.parquet"
    frame = read_samples(src).frame
    upper = frame["chunk"] >= 64
    slow.mkdir(parents=True, exist_ok=True)
    ms = np.where(upper, frame["ms"] * args.factor, frame["ms"])
    write_samples(frame.assign(ms=ms), slow / "samples.parquet", read_provenance(src))
    print(f"{len(frame)} rows on {frame.groupby(['n_decode', 'chunk', 'ctx', 'prefix']).ngroups}"
          f" points; chunk >= 64: {upper.mean():.1%} of rows x{args.factor}")  # fmt: skip
    for name, samples in (("unchanged", src), ("drifted", slow / "samples.parquet")):
        code, doc = validate(cal / "costtable.json", samples)
        half = min((t for t in doc["tests"] if t["scope"] == "half-spaces"),
                   key=lambda t: t["p_value"])  # fmt: skip
        print(f"{name:<10} verdict {doc['verdict']:<9} (exit {code})  factor x{doc['factor']:.3f}"
              f"  best half-space {half['test']} {half['region']}: p = {half['p_value']:.2g}"
              f" (rejects at {half['critical']:.2g})")  # fmt: skip
        print(f"           {doc['recommendation']}")


if __name__ == "__main__":
    main()
