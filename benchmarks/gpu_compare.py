"""What a GPU calibration says, read where its samples come back (no GPU needed).

    python benchmarks/gpu_compare.py --cal CAL_DIR [--layers LAYERS_DIR] \
        [--public sched/data/imported_h100x1/table.json]

``CAL_DIR`` is a ``servecal calibrate`` output (``samples.parquet``), ``LAYERS_DIR`` the
``layers`` stage of ``benchmarks/gpu_smoke.sh`` (``l32/`` and ``l4/``). Prints:

1. held-out accuracy: a table fitted on half the grid points (whole points, drawn
   with ``--seed``), graded with ``evaluate`` on the other half;
2. energy per iteration and per token, from NVML, by regime;
3. the calibrated device beside a table composed from public operator profiles
   (default: aiconfigurator's H100 vLLM profiles for llama-3-8b, shipped with
   servecal): measured median / public P50 per point, by regime and prompt chunk;
4. layer scaling: ``k`` of ``L`` layers timed and scaled against all ``L`` timed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.costmodels import CostTable
from servecal.costmodels.evaluate import evaluate
from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.samples import read_samples

POINT = ["n_decode", "chunk", "ctx", "prefix"]


def regime(frame: pd.DataFrame) -> pd.Series:
    kinds = np.where(
        frame.chunk == 0, "decode only", np.where(frame.n_decode == 0, "prefill only", "mixed")
    )
    return pd.Series(kinds, index=frame.index)


def held_out(frame: pd.DataFrame, provenance: dict, seed: int) -> dict:
    points = frame[POINT].drop_duplicates().reset_index(drop=True)
    rng = np.random.default_rng(seed)
    test = points.iloc[rng.permutation(len(points))[: len(points) // 2]]
    is_test = frame.set_index(POINT).index.isin(test.set_index(POINT).index)
    fitted = fit_cost_table(frame[~is_test], dict(provenance, source="gpu half"), seed=seed)
    metrics = evaluate(fitted.table, frame[is_test])
    keep = ("p50_mape", "p99_coverage", "p99_plus_delta_coverage", "rows", "points")
    return {
        "model": fitted.model,
        "fit_points": len(points) - len(test),
        "test_points": len(test),
    } | {k: v for k, v in metrics.items() if k in keep or k.endswith("mape") or "coverage" in k}


def energy(frame: pd.DataFrame) -> pd.DataFrame:
    tokens = frame.n_decode + frame.chunk
    table = frame.assign(regime=regime(frame), j_per_token=frame.energy_j / tokens)
    return table.groupby("regime")[["energy_j", "j_per_token", "power_w"]].median().round(3)


def against_public(frame: pd.DataFrame, public: CostTable) -> tuple[pd.DataFrame, pd.DataFrame]:
    measured = frame.groupby(POINT).ms.median().reset_index()
    predicted = [float(public.predict(*map(int, row), q=0.5)) for row in measured[POINT].to_numpy()]
    measured["public_ms"] = predicted
    measured["ratio"] = measured.ms / measured.public_ms
    measured["regime"] = regime(measured)
    by_regime = measured.groupby("regime").ratio.describe(percentiles=[0.1, 0.5, 0.9])
    prefills = measured[measured.chunk > 0].groupby(["regime", "chunk"]).ratio.median().unstack(0)
    return by_regime.round(3), prefills.round(3)


def layer_scaling(folder: Path) -> pd.DataFrame:
    full, part = (read_samples(folder / f"l{n}" / "samples.parquet") for n in (32, 4))
    both = full.frame.groupby(POINT).ms.median().to_frame("all_layers_ms")
    both["scaled_ms"] = part.frame.groupby(POINT).ms.median()
    both["scaled / all"] = both.scaled_ms / both.all_layers_ms
    return both.round(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cal", type=Path, required=True)
    parser.add_argument("--layers", type=Path)
    parser.add_argument(
        "--public", type=Path, default=Path("sched/data/imported_h100x1/table.json")
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    samples = read_samples(args.cal / "samples.parquet")
    frame = samples.frame
    print(f"{frame[POINT].drop_duplicates().shape[0]} points, {len(frame)} rows\n")
    print(
        "1. held-out half of the grid points:", held_out(frame, samples.provenance, args.seed), "\n"
    )
    print("2. energy (NVML) per iteration, median by regime:\n", energy(frame), "\n")
    public = CostTable.load(args.public)
    by_regime, by_chunk = against_public(frame, public)
    print(
        f"3. measured / {public.fingerprint.get('device_name')} public P50, by regime:\n", by_regime
    )
    print("   median by prompt chunk:\n", by_chunk, "\n")
    if args.layers:
        print("4. layer scaling:\n", layer_scaling(args.layers))


if __name__ == "__main__":
    main()
