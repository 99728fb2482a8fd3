"""Fit a power model to a GPU calibration's metered samples; write its JSON for --power.

    python scripts/fit_power_from_samples.py SAMPLES --name NAME --device TEXT \
        --max-w 400 --idle-w 62 --out power.json

SAMPLES: a ``servecal calibrate`` samples file whose ``energy_j`` came from NVML (or
RAPL). ``--max-w`` is the board limit, ``--idle-w`` the idle power (a calibration has
no idle gaps to fit it from). See sched/power_fit.py and docs/energy.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servecal.costmodels.samples import read_samples
from servecal.sched.power_fit import fit_power_doc
from servecal.util.atomic import atomic_write_bytes
from servecal.util.errors import InputError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples")
    parser.add_argument("--name", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--max-w", type=float, required=True)
    parser.add_argument("--idle-w", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        frame = read_samples(args.samples).frame
        doc = fit_power_doc(frame, args.name, args.device, args.max_w, args.idle_w, args.samples)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    atomic_write_bytes(Path(args.out), (json.dumps(doc, indent=1) + "\n").encode())
    fit = doc["fit"]["samples"]
    print(f"wrote {args.out}: rms {fit['rmse_w']} W over {fit['points']} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
