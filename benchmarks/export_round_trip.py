"""A cost table exported to each consumer's format, and what each consumer then predicts.

Exports ``--table`` (default: the imported H100 Llama-3-8B table) as ``dynamo-mocker``,
``aic-fpm`` and ``llm-d-sim``, and for a few batch shapes (``N`` prompts of ``isl``
tokens arriving together, prefilled in one step, then decoded together) prints the
time to first token (the prefill step of ``N · isl`` tokens) and the inter-token
latency (a decode step of ``N`` requests at context ``isl``) as:

* servecal: the table's P50 of those steps;
* the mocker: NVIDIA Dynamo's own engine (``ai-dynamo`` 1.6.1's offline replay on a
  virtual clock, ``N`` requests of ``isl`` prompt and 2 output tokens; in its own
  virtualenv, ``SERVECAL_DYNAMO_PYTHON=$(bash scripts/dynamo_env.sh)``; "n/a" without);
* aiconfigurator: the ``fpm_forward_perf`` row its loader keys the shape to
  (``tests/costmodels/consumer_aic_fpm.py``; the shapes are grid points, where
  aiconfigurator reads the row itself);
* llm-d-inference-sim: its per-token model of the exported knobs (prefill overhead +
  ``isl`` · per-token, ITL, both times the load factor at ``N`` requests), before its
  whole-millisecond truncation.

Then one mixed step (32 decodes at 1,024 and a 512-token chunk), which the mocker prices
as its prefill plus its decode, and the mocker's decode reading (its bilinear rule,
``consumer_dynamo.py``) against the table at 5,000 random batches. Prints a Markdown
table::

    SERVECAL_DYNAMO_PYTHON=$(bash scripts/dynamo_env.sh) python benchmarks/export_round_trip.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tests" / "costmodels"))
from consumer_aic_fpm import load_pair  # noqa: E402
from consumer_dynamo import MockerModel  # noqa: E402
from consumer_llmd import validate  # noqa: E402

from servecal.costmodels.export import export_table  # noqa: E402
from servecal.costmodels.table import CostTable  # noqa: E402

#: (N prompts, isl tokens): one prefill step of N · isl <= 8,192 tokens (the mocker's step).
SHAPES = ((1, 1024), (4, 2048), (8, 1024), (16, 512), (64, 128))
LLMD_CTX = 2048  # the simulator has no context axis: its decode knobs fitted at one


def mocker_replay(npz: Path, isl: int, requests: int) -> tuple[float, float] | None:
    """(mean TTFT, mean ITL) in ms from the mocker's offline replay, run in its own
    virtualenv (``$SERVECAL_DYNAMO_PYTHON``, ``scripts/dynamo_env.sh``); None without it."""
    python = os.environ.get("SERVECAL_DYNAMO_PYTHON")
    if not python:
        return None
    driver = ROOT / "tests" / "costmodels" / "dynamo_driver.py"
    done = subprocess.run([python, str(driver), "replay", str(npz), str(isl), "2", str(requests)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return float(summary["mean_ttft_ms"]), float(summary["mean_itl_ms"])


def llmd_model(yaml_text: str) -> tuple[float, float, float, int]:
    """(prefill overhead, per-token, ITL) in ms and max-num-seqs, with the load factor
    folded into :func:`llmd_times`."""
    cfg = validate(yaml_text)
    ms = 1e-6  # the knobs are nanoseconds
    return (
        float(cfg["prefill-overhead"]) * ms,
        float(cfg["prefill-time-per-token"]) * ms,
        float(cfg["inter-token-latency"]) * ms,
        int(cfg["max-num-seqs"]),
    ), float(cfg["time-factor-under-load"])


def llmd_times(knobs: tuple, factor: float, n: int, isl: int) -> tuple[float, float]:
    overhead, per_token, itl, seqs = knobs
    load = 1.0 + (factor - 1.0) * (n - 1) / max(seqs - 1, 1)
    return (overhead + isl * per_token) * load, itl * load


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=ROOT / "sched/data/imported_h100x1/table.json")
    args = ap.parse_args()
    table = CostTable.load(args.table)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "h100_sxm" / "vllm" / "0.14.0"
        folder.mkdir(parents=True)
        npz = Path(tmp) / "perf_data.npz"
        export_table(table, npz, "dynamo-mocker")
        export_table(table, folder / "fpm_forward_perf.parquet", "aic-fpm",
                     aic_system="h100_sxm", aic_version="0.14.0")  # fmt: skip
        export_table(table, Path(tmp) / "sim.yaml", "llm-d-sim", decode_ctx=LLMD_CTX)
        (cell,) = load_pair(folder, "h100_sxm", "vllm", "0.14.0").values()
        knobs, factor = llmd_model((Path(tmp) / "sim.yaml").read_text())
        print("| N × isl | TTFT servecal | mocker | aic-fpm | llm-d-sim | ITL servecal | mocker "
              "| aic-fpm | llm-d-sim |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for n, isl in SHAPES:
            ttft = float(table.lookup(0.5, 0, n * isl, 0, 0)[0])
            itl = float(table.lookup(0.5, n, 0, isl, 0)[0])
            mock = mocker_replay(npz, isl, n)
            aic_ttft = cell["prefill"][(min(n, 8), n * isl, 0)]  # batches above 8: clamped
            aic_itl = cell["decode"][(n, n * isl)]
            sim_ttft, sim_itl = llmd_times(knobs, factor, n, isl)
            m_ttft, m_itl = (f"{mock[0]:.2f}", f"{mock[1]:.2f}") if mock else ("n/a", "n/a")
            print(f"| {n} × {isl} | {ttft:.2f} | {m_ttft} | {aic_ttft:.2f} | {sim_ttft:.2f} "
                  f"| {itl:.2f} | {m_itl} | {aic_itl:.2f} | {sim_itl:.2f} |")  # fmt: skip
        mixed = float(table.lookup(0.5, 32, 512, 1024, 0)[0])
        model = MockerModel(npz)
        summed = model.prefill_ms(1, 512) + model.decode_ms(32, 32 * 1024, 1024)
        print(f"\nmixed step (32 decodes at 1,024 + a 512-token chunk): servecal {mixed:.2f} ms, "
              f"the mocker's prefill + decode {summed:.2f} ms")  # fmt: skip
        rng = np.random.default_rng(0)
        n = rng.integers(1, 257, 5000)
        ctx = rng.uniform(128, 8192, 5000)
        want, _ = table.lookup(0.5, n, 0, ctx, 0)
        got = np.array([model.decode_ms(int(b), b * c, c) for b, c in zip(n, ctx, strict=True)])
        err = np.abs(got / want - 1)
        print(
            f"the mocker's decode reading off its points, 5,000 random batches (1-256 decodes, "
            f"context 128-8,192): max {100 * err.max():.2f} %, median {100 * np.median(err):.3f} %"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
