"""Composed Llama-3-70B iterations at TP 1/2/4/8 and the share spent in all-reduces.

Imports aiconfigurator's A100 vLLM 0.14 per-operator tables (``servecal import
aiconfigurator``'s composition: per-GPU GEMMs and attention, ``2·80 + 1``
all-reduces of ``tokens × 8192`` bf16 elements from the ``custom_allreduce`` table,
graph backend for decode-only iterations, eager when the iteration prefills) and
prints one markdown table: per TP degree, the iteration's time, the all-reduces'
time, their share, and one all-reduce's time.

    python benchmarks/tp_collective_share.py aiconfigurator FOLDER
    python benchmarks/tp_collective_share.py vidur FOLDER

The aiconfigurator ``FOLDER`` holds the four ``a100_sxm_*_vllm_0.14.0_*.csv`` tables
(ai-dynamo/aiconfigurator @ 095f58a5, ``aic-core/.../systems/data/a100_sxm/``);
Vidur's holds ``llama3_70b_mlp.csv``, the attention samples and ``network/``
(microsoft/vidur @ 7d475133; one NCCL backend for every iteration).
"""

from __future__ import annotations

import argparse

from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.importers.collective import allreduces_per_iteration
from servecal.profiler.shapes import ModelShape

#: (n_decode, chunk, ctx, prefix): decode batches and one mixed iteration.
ITERATIONS = ((64, 0, 1023, 0), (64, 0, 4095, 0), (256, 0, 1023, 0), (64, 512, 1023, 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("aiconfigurator", "vidur"))
    parser.add_argument("folder", help="the profile's folder")
    args = parser.parse_args()
    shape = ModelShape.from_name("llama-3-70b")
    count = allreduces_per_iteration(shape.n_layers)
    print("| iteration | TP | ms | all-reduces ms | share | one all-reduce µs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, c, ctx, p in ITERATIONS:
        grid = Grid(n_decode=(n,), chunk=(c,), ctx=(ctx,), prefix=(p,))
        label = f"{n} decodes at ctx {ctx}" + (f" + {c}-token chunk" if c else "")
        for tp in (1, 2, 4, 8):
            frame, _ = import_profile(args.kind, args.folder, shape, tp, grid)
            r = frame.iloc[0]
            one = r.op_comm_ms / count * 1e3
            print(
                f"| {label} | {tp} | {r.ms:.2f} | {r.op_comm_ms:.3f} | "
                f"{r.op_comm_ms / r.ms:.1%} | {one:.1f} |"
            )


if __name__ == "__main__":
    main()
