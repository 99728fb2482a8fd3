"""Derive the fleet's device truths (A100/H100 × TP 1/2, Llama-3-8B) and fit their tables.

    python scripts/derive_fleet_devices.py --gpu-data DIR [--check]

``--gpu-data`` is the folder of public GPU profiles described in docs/truth.md
(``splitwise/perf_model.csv``, ``aiconfigurator_a100_vllm0.14/``). Writes
``sched/data/fleet_devices.json`` (each device's ``device`` truth overrides, with the
ratios they come from) and ``sched/data/device_<name>_fitted.json`` for every device
but the shipped A100 TP 1 (a cost table fitted on samples of its truth, margin set on
off-grid probes: what ``--predictor fitted`` builds for that truth). docs/capacity.md
explains the choices. What comes from where:

* **H100 / A100**: Splitwise's measured static-batch timings (Mutinifni/splitwise-sim
  @ 8f99e7dc, ``data/perf_model.csv``, MIT): the median over matching
  (TP, prompt, batch) rows of Llama-2-70B of ``prompt_time`` (prefill) and
  ``token_time`` (decode) on H100-80GB over A100-80GB. No H100 Llama-3-8B operator
  profile is public in a form this project can read (aiconfigurator's H100 tables
  are Git LFS objects; Vidur's H100 ``mlp.csv`` files carry no timings), so the
  H100's iteration is the A100 truth's shape with its prefill and decode terms
  scaled by those ratios.
* **TP 2 / TP 1**: the project's own composition of A100 Llama-3-8B iterations from
  aiconfigurator's vLLM 0.14.0 tables (``servecal import aiconfigurator``, vLLM's
  custom all-reduce included): the median over the grid's decode-only points of the
  TP 2 / TP 1 time (decode terms), and over its prefill-only points (prefill terms).
  The same ratio is applied on the H100 (its own all-reduce is not public here).
* KV capacity: a TP 2 replica holds twice a TP 1 replica's tokens (each GPU keeps
  half of every token's KV and half the weights).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[1] / "sched" / "data"
DEVICES_PATH = DATA / "fleet_devices.json"
DECODE = ("decode_fixed", "decode_per_token", "decode_attention")
PREFILL = ("prefill_fixed", "prefill_per_token", "prefill_attention")
KV_TP1 = 500_000


def h100_ratios(gpu: Path) -> dict[str, float]:
    frame = pd.read_csv(gpu / "splitwise" / "perf_model.csv")
    frame = frame[frame["model"] == "llama2-70b"]
    keys = ["tensor_parallel", "prompt_size", "batch_size"]
    med = frame.groupby(["hardware", *keys])[["prompt_time", "token_time"]].median()
    a100, h100 = med.loc["a100-80gb"], med.loc["h100-80gb"]
    both = a100.merge(h100, left_index=True, right_index=True, suffixes=("_a", "_h"))
    return {
        "prefill": float((both["prompt_time_h"] / both["prompt_time_a"]).median()),
        "decode": float((both["token_time_h"] / both["token_time_a"]).median()),
        "rows": int(len(both)),
    }


def tp2_ratios(gpu: Path) -> dict[str, float]:
    from servecal.profiler.importers import import_profile
    from servecal.profiler.importers.collective import CommOptions
    from servecal.profiler.shapes import ModelShape

    folder = gpu / "aiconfigurator_a100_vllm0.14"
    shape = ModelShape.resolve("llama-3-8b")
    frames = [import_profile("aiconfigurator", folder, shape, tp, None, CommOptions())[0]
              for tp in (1, 2)]  # fmt: skip
    keys = ["n_decode", "chunk", "ctx", "prefix"]
    both = frames[0].merge(frames[1], on=keys, suffixes=("_1", "_2"))
    ratio = both["ms_2"] / both["ms_1"]
    decode = (both["chunk"] == 0) & (both["n_decode"] > 0)
    prefill = (both["n_decode"] == 0) & (both["chunk"] > 0)
    return {
        "decode": float(ratio[decode].median()),
        "prefill": float(ratio[prefill].median()),
        "rows": int(len(both)),
    }


def overrides(base: dict[str, float], decode: float, prefill: float) -> dict[str, float]:
    out = {k: round(base[k] * decode, 9) for k in DECODE}
    out.update({k: round(base[k] * prefill, 9) for k in PREFILL})
    return out


def derive(gpu: Path) -> dict[str, Any]:
    from servecal.sched.device_truth import PROFILE_PATH

    base = json.loads(PROFILE_PATH.read_text())["coefficients"]
    h, t = h100_ratios(gpu), tp2_ratios(gpu)
    devices = {
        "A100x1": {"device": "A100", "tp": 1, "overrides": {}, "kv_capacity": KV_TP1},
        "A100x2": {"device": "A100", "tp": 2, "overrides": overrides(base, t["decode"],
                   t["prefill"]), "kv_capacity": 2 * KV_TP1},
        "H100x1": {"device": "H100", "tp": 1, "overrides": overrides(base, h["decode"],
                   h["prefill"]), "kv_capacity": KV_TP1},
        "H100x2": {"device": "H100", "tp": 2, "overrides": overrides(base, h["decode"]
                   * t["decode"], h["prefill"] * t["prefill"]), "kv_capacity": 2 * KV_TP1},
    }  # fmt: skip
    return {
        "schema": "servecal.fleet_devices/1",
        "model": "llama-3-8b",
        "ratios": {"h100_over_a100": h, "tp2_over_tp1": t},
        "sources": {
            "h100_over_a100": "Mutinifni/splitwise-sim @ 8f99e7dc data/perf_model.csv (MIT): "
            "llama2-70b prompt_time and token_time, H100-80GB / A100-80GB",
            "tp2_over_tp1": "servecal import aiconfigurator of ai-dynamo/aiconfigurator @ "
            "095f58a5 a100_sxm vLLM 0.14.0 (Apache-2.0): llama-3-8b TP 2 / TP 1",
        },
        "devices": devices,
    }


def truth_spec(overrides: dict[str, float]) -> str:
    """The ``--truth`` text of a device's truth."""
    if not overrides:
        return "device"
    return "device:" + ",".join(f"{k}={v!r}" for k, v in overrides.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-data", type=Path, required=True)
    parser.add_argument("--check", action="store_true", help="derive and compare, write nothing")
    args = parser.parse_args()
    doc = derive(args.gpu_data)
    print(json.dumps(doc["ratios"], indent=1))
    if args.check:
        same = json.loads(DEVICES_PATH.read_text()) == json.loads(json.dumps(doc))
        print(f"{DEVICES_PATH}: {'matches' if same else 'DIFFERS from'} a fresh derivation")
        return 0 if same else 1
    DEVICES_PATH.write_text(json.dumps(doc, indent=1) + "\n")
    from servecal.sched.device_truth import device_truth
    from servecal.sched.fitted_table import fit_table, probe_margin

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fit_device_table import rounded

    for name, dev in doc["devices"].items():
        if not dev["overrides"]:
            continue
        truth = device_truth(truth_spec(dev["overrides"]).partition(":")[2])
        table = probe_margin(rounded(fit_table(truth)), truth)
        path = DATA / f"device_{name.lower()}_fitted.json"
        table.save(path)
        print(f"wrote {path} ({path.stat().st_size / 1000:.0f} kB)")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
