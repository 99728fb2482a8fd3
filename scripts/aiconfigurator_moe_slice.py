"""Cut aiconfigurator's vLLM 0.24.0 tables of one GPU down to one MoE model's import.

    python scripts/aiconfigurator_moe_slice.py --data DIR [--system h100_sxm]
        [--model mixtral-8x7b] [--ep 1,2,4,8] [--out FOLDER]

(default ``--out``: ``sched/data/aiconfigurator_SYSTEM_vllm0.24_MODEL``).

``--data`` is the ``systems/data`` folder of the installed ``aiconfigurator-core``
package (``pip install aiconfigurator==0.12.0 aiconfigurator-core``: 0.12.0 ships the
vLLM 0.24.0 tables, with the ``moe`` operator and DeepEP's all-to-all). Written, bf16
only, as the dense slice (``scripts/aiconfigurator_slice.py``) does: the GEMMs that
bracket the model's products (its attention projections, router and LM head), its
attention heads, the ``moe`` rows of its expert shape (hidden, expert width, top-k,
experts) at the EP sizes asked and MoE-TP 1, every routing distribution, and the
``moe_a2a`` table (dispatch and combine of DeepEP, µs).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

import pandas as pd

from servecal.profiler.shapes import ModelShape

VERSION = "0.24.0"
_dense = importlib.util.spec_from_file_location(
    "aiconfigurator_slice", Path(__file__).with_name("aiconfigurator_slice.py")
)
assert _dense is not None and _dense.loader is not None
dense = importlib.util.module_from_spec(_dense)
_dense.loader.exec_module(dense)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--system", default="h100_sxm")
    parser.add_argument("--model", default="mixtral-8x7b")
    parser.add_argument("--ep", default="1,2,4,8")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shape = ModelShape.resolve(args.model)
    eps = [int(e) for e in args.ep.split(",")]
    base = args.data / args.system
    out = args.out or Path(f"sched/data/aiconfigurator_{args.system}_vllm0.24_{shape.name}")
    out.mkdir(parents=True, exist_ok=True)
    heads = (shape.n_heads, shape.n_kv_heads, shape.head_dim)
    bf16_attention = {"attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}
    tables = {
        "gemm_perf": ("gemm", {"gemm_dtype": "bfloat16"}),
        "context_attention_perf": ("attention", bf16_attention),
        "generation_attention_perf": ("attention", bf16_attention),
        "moe_perf": ("moe", {"moe_dtype": "bfloat16"}),
        "moe_a2a_perf": ("comm", {}),
    }  # fmt: skip
    lines = []
    for table, (folder, dtypes) in tables.items():
        path = f"{folder}/vllm/{VERSION}/{table}.parquet"
        frame = pd.read_parquet(base / path)
        total = len(frame)
        for column, value in dtypes.items():
            frame = frame[frame[column] == value]
        if table == "gemm_perf":
            pairs = dense.gemm_sizes(shape, 1)[:2] + [
                (shape.experts, shape.hidden),
                (shape.vocab, shape.hidden),
            ]
            ns = dense.brackets(sorted(frame["n"].unique()), {n for n, _ in pairs})
            ks = dense.brackets(sorted(frame["k"].unique()), {k for _, k in pairs})
            frame = frame[frame["n"].isin(ns) & frame["k"].isin(ks)]
        elif "attention" in table:
            cols = ("num_heads", "num_key_value_heads", "head_dim")
            key = list(zip(*(frame[c] for c in cols), strict=True))
            frame = frame[[k == heads for k in key]]
            if "context" in table:
                frame = frame[frame["batch_size"] == 1]
        elif table == "moe_perf":
            frame = frame[
                (frame["hidden_size"] == shape.hidden)
                & (frame["inter_size"] == shape.expert_intermediate)
                & (frame["topk"] == shape.top_k)
                & (frame["num_experts"] == shape.experts)
                & (frame["moe_tp_size"] == 1)
                & frame["moe_ep_size"].isin(eps)
            ]
        if frame.empty:
            raise SystemExit(f"error: {path}: no rows for {shape.name}")
        name = f"{args.system}_{folder}_vllm_{VERSION}_{table}_bf16.csv"
        frame.to_csv(out / name, index=False)
        source = f"aiconfigurator_core/systems/data/{args.system}/{path}"
        lines.append(f"| `{name}` | `{source}` | {len(frame)} of {total} |")
        print(f"{name}: {len(frame)} of {total} rows")
    device = str(frame["device"].iloc[0])
    licence = Path(__file__).parents[1] / "sched/data/aiconfigurator_h100_sxm_vllm0.14/LICENSE"
    shutil.copy(licence, out / "LICENSE")
    (out / "SOURCE.md").write_text(
        f"# aiconfigurator's {args.system} vLLM {VERSION} operator tables, cut to "
        f"{shape.name} (EP {', '.join(map(str, eps))})\n\n"
        "From the PyPI package `aiconfigurator-core` 0.12.0 (ai-dynamo/aiconfigurator,\n"
        "Apache-2.0, the licence text is in `LICENSE` here). Changed from the original:\n"
        "Parquet converted to CSV; only the bf16 rows this model's import reads are kept\n"
        "(`scripts/aiconfigurator_moe_slice.py`, which wrote this folder, says which).\n"
        "Latency in ms per layer (`moe_a2a`: µs per dispatch or combine); measured by\n"
        f"aiconfigurator on an `{device}` through vLLM {VERSION}.\n\n"
        "| file | from | rows kept |\n| --- | --- | --- |\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
