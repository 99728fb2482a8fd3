"""Fit the shipped A100 power model (sched/power.py) from public measurements; write its JSON.

    python scripts/derive_power_model.py [--check]

Reads the copies in ``sched/data/power/`` (sources in docs/energy.md) and writes
``sched/data/power/a100_llama3_8b.json`` (``--check``: compare with it, exit 1 if it
differs). Every parameter is printed with its fit error.

* **Prefill line** ``a + b·log2(rows)``: Splitwise's A100 ``peak_power`` (fraction of
  TDP) of each static batch against the prompt rows it multiplies, in rows of an 8B
  model (``batch × prompt × params per GPU / 8.03e9``: the work one GPU does per row
  scales with the weights it holds), least squares on ``min(1, a + b·log2(rows))``.
* **Decode power** ``decode_w``: ML.ENERGY's vLLM Llama-3-8B runs on an A100-SXM4-40GB
  (chat, six request rates): energy per request × requests per second is the run's
  average power; these runs are decode-dominated, so their mean is the decode level.
* **Idle power** ``idle_w``: one measured idle A100-80GB (see docs/energy.md).
* **Board limit** ``max_w``: the A100-SXM's 400 W TDP (Splitwise's peaks above 1.0
  are sampling transients the power limiter holds on average).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "sched" / "data" / "power"
OUT = DATA / "a100_llama3_8b.json"
TDP_W = 400.0
LLAMA3_8B_PARAMS = 8.03e9
PARAMS = {"llama2-70b": 68.98e9, "bloom-176b": 176.25e9}
IDLE_W = 62.12
SPLITWISE = "Mutinifni/splitwise-sim @ 8f99e7dc, data/perf_model.csv (MIT)"
MLENERGY = (
    "ml-energy/leaderboard @ 2819ae10, data/llm/chat/A100-SXM4-40GB/vLLM/meta-llama/"
    "Meta-Llama-3-8B-Instruct/rate{1..6}.00.json (Apache-2.0)"
)
IDLE = (
    "chuyishang/inference-energy @ 6e617d2b, results_paste.md: 'Idle power: 62.12 W' "
    "on an A100-80GB (DGX), NVML"
)


def prefill_points() -> pd.DataFrame:
    """Median peak power per Splitwise configuration, with its rows in 8B-model rows."""
    d = pd.read_csv(DATA / "splitwise_a100.csv")
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    g = d.groupby(keys, as_index=False).agg(peak=("peak_power", "median"))
    per_gpu = g["model"].map(PARAMS) / g["tensor_parallel"]
    g["rows"] = g["batch_size"] * g["prompt_size"] * per_gpu / LLAMA3_8B_PARAMS
    # one static batch per (model, TP, prompt, batch): the output length does not change
    # the prefill, so keep one row per prefill shape
    return g.drop_duplicates(["model", "tensor_parallel", "prompt_size", "batch_size"])


def fit_prefill(points: pd.DataFrame) -> tuple[float, float, np.ndarray]:
    x = np.log2(points["rows"].to_numpy())
    y = points["peak"].to_numpy()

    def residual(p: np.ndarray) -> np.ndarray:
        return np.minimum(1.0, p[0] + p[1] * x) - y

    fit = least_squares(residual, x0=[0.0, 0.1])
    a, b = (float(v) for v in fit.x)
    return a, b, residual(fit.x)


def decode_points() -> pd.DataFrame:
    m = pd.read_csv(DATA / "mlenergy_a100_llama3_8b.csv")
    m["power_w"] = m["energy_per_request_j"] * m["requests_per_s"]
    return m


def build() -> dict:
    pts = prefill_points()
    a, b, res = fit_prefill(pts)
    dec = decode_points()
    decode_w = float(dec["power_w"].mean())
    dec_res = dec["power_w"] - decode_w
    print(f"prefill line: {len(pts)} Splitwise shapes; a = {a:.4f}, b = {b:.4f} (x TDP)")
    for (_, row), r in zip(pts.iterrows(), res, strict=True):
        print(f"  {row.model} TP{row.tensor_parallel} {row.batch_size}x{row.prompt_size}: "
              f"rows {row['rows']:.0f}, peak {row.peak:.3f}, fit {row.peak + r:.3f}")  # fmt: skip
    print(f"  rmse {np.sqrt(np.mean(res**2)) * TDP_W:.1f} W, max {np.abs(res).max() * TDP_W:.1f} W")
    print(f"decode: {decode_w:.1f} W from {len(dec)} ML.ENERGY runs: "
          + ", ".join(f"{p:.1f}" for p in dec["power_w"]))  # fmt: skip
    print(f"  rmse {np.sqrt(np.mean(dec_res**2)):.1f} W")
    rows_at_floor = 2 ** ((decode_w / TDP_W - a) / b)
    rows_at_max = 2 ** ((1.0 - a) / b)
    print(f"power leaves the decode level at {rows_at_floor:.0f} rows, reaches {TDP_W:.0f} W "
          f"at {rows_at_max:.0f} rows")  # fmt: skip
    return {
        "schema": "servecal.power_model/1",
        "name": "a100-llama3-8b",
        "device": "NVIDIA A100-SXM (400 W), Llama-3-8B, TP 1",
        "setting": {"gpu": "A100", "model": "llama-3-8b", "tp": 1},
        "parameters": {
            "tdp_w": TDP_W,
            "idle_w": IDLE_W,
            "decode_w": round(decode_w, 2),
            "max_w": TDP_W,
            "intercept_w": round(a * TDP_W, 3),
            "slope_w": round(b * TDP_W, 3),
        },
        "sources": {"prefill": SPLITWISE, "decode": MLENERGY, "idle": IDLE},
        "fit": {
            "prefill": {
                "points": int(len(pts)),
                "rmse_w": round(float(np.sqrt(np.mean(res**2))) * TDP_W, 2),
                "max_abs_w": round(float(np.abs(res).max()) * TDP_W, 2),
            },
            "decode": {
                "points": int(len(dec)),
                "rmse_w": round(float(np.sqrt(np.mean(dec_res**2))), 2),
                "max_abs_w": round(float(np.abs(dec_res).max()), 2),
            },
            "rows_leaving_decode_level": round(rows_at_floor, 1),
            "rows_at_board_limit": round(rows_at_max, 1),
            "idle": "one measurement, not fitted",
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped JSON")
    args = parser.parse_args()
    doc = build()
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        same = OUT.is_file() and json.loads(OUT.read_text()) == json.loads(text)
        print("matches" if same else f"differs from {OUT}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    assert math.isfinite(TDP_W)
    sys.exit(main())
