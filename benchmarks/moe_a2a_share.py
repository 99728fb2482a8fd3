"""Composed Mixtral-8x7B steps at EP 1/2/4/8 and the share spent in the all-to-all.

Imports aiconfigurator's H100 vLLM 0.24 tables (``servecal import aiconfigurator``'s
MoE composition: attention GEMMs and attention per rank, the fused ``moe`` operator
read at ``tokens × EP`` routed tokens and ``moe_ep_size = EP``, DeepEP's dispatch +
combine per layer) and prints one markdown table like
``benchmarks/tp_collective_share.py``'s: per EP size, the step's time, the
all-to-alls' time, their share, and one layer's dispatch + combine.

    python benchmarks/moe_a2a_share.py sched/data/aiconfigurator_h100_sxm_vllm0.24_mixtral-8x7b
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.shapes import ModelShape

#: (n_decode, chunk, ctx, prefix): decode batches and one mixed step (one rank's).
ITERATIONS = ((1, 0, 1023, 0), (16, 0, 1023, 0), (64, 0, 1023, 0), (256, 0, 1023, 0),
              (64, 512, 1023, 0))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the MoE slice's folder")
    parser.add_argument("--model", default="mixtral-8x7b")
    args = parser.parse_args()
    shape = ModelShape.resolve(args.model)
    print(
        "| step (one rank) | EP | ms | all-to-all ms | share | one layer's dispatch + combine µs |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for n, c, ctx, p in ITERATIONS:
        grid = Grid(n_decode=(n,), chunk=(c,), ctx=(ctx,), prefix=(p,))
        label = f"{n} decodes at ctx {ctx}" + (f" + {c}-token chunk" if c else "")
        for ep in (1, 2, 4, 8):
            frame, _ = import_profile("aiconfigurator", args.folder, replace(shape, ep=ep), 1, grid)
            r = frame.iloc[0]
            one = r.op_a2a_ms / shape.n_layers * 1e3
            print(
                f"| {label} | {ep} | {r.ms:.2f} | {r.op_a2a_ms:.3f} | "
                f"{r.op_a2a_ms / r.ms:.1%} | {one:.1f} |"
            )


if __name__ == "__main__":
    main()
