"""Fit the ``fitted`` predictor's table for the shipped ``device`` truth and ship it.

    python scripts/fit_device_table.py [--check]

Samples the truth of ``sched/data/device_a100.json`` on ``FIT_GRID`` (20 repeats per
point, ``SeedSequence(FIT_ENTROPY)``: no run draws from it), fits it with
``fit_cost_table`` (per-point quantiles, 5-fold conformal margin; about 10 s) and
writes ``sched/data/device_a100_fitted.json`` with its values rounded to 0.1 µs (the
file stays near 100 kB; rounding is monotone, so the table stays monotone). The
fit is deterministic: rerunning gives the same values (``--check`` verifies that).
Rerun it whenever the truth's file or the recipe in ``sched/fitted_table.py`` changes; the
test suite fails until then (``fit_key`` no longer matches).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servecal.costmodels.table import CostTable
from servecal.sched.device_truth import DeviceTruth
from servecal.sched.fitted_table import SHIPPED_PATH, fit_table

DIGITS = 4  # ms → 0.1 µs


def rounded(table: CostTable) -> CostTable:
    doc = table.to_json()
    doc.pop("content_hash", None)  # the rounded table is hashed anew when saved
    doc["quantiles"] = {q: [round(v, DIGITS) for v in vals] for q, vals in doc["quantiles"].items()}
    return CostTable.from_json(doc, "rounded fitted table")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_PATH)
    parser.add_argument("--check", action="store_true", help="refit and compare, write nothing")
    args = parser.parse_args()
    table = rounded(fit_table(DeviceTruth.load(), progress=print))
    if args.check:
        old = CostTable.load(args.out)
        same = old.to_json()["quantiles"] == table.to_json()["quantiles"] and (
            old.fingerprint.get("fit_key") == table.fingerprint.get("fit_key")
        )
        print(f"{args.out}: {'matches' if same else 'DIFFERS from'} a fresh fit")
        return 0 if same else 1
    table.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1000:.0f} kB): {table}")
    print(f"validation: {table.validation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
