"""Cut aiconfigurator's vLLM tables of one GPU down to what ``servecal import`` needs for one model.

    python scripts/aiconfigurator_slice.py --mirror DIR [--system h100_sxm] [--model llama-3-8b]
        [--tp 1,2] [--out sched/data/aiconfigurator_SYSTEM_vllm0.14]

aiconfigurator (ai-dynamo/aiconfigurator, Apache-2.0) keeps its per-layer operator
tables as Parquet, one folder per operator
(``aic-core/src/aiconfigurator_core/systems/data/SYSTEM/{gemm,attention,comm}/vllm/
0.14.0/*.parquet``), with bf16, fp8 and other dtypes in one file. The importer
(``servecal import aiconfigurator``) reads one folder of CSVs, one per operator, in
one dtype (docs/profiler.md): it reads neither Parquet nor a file of mixed dtypes (it
would average bf16 and fp8 rows). This writes that folder: the bf16 rows only (the A100
tables servecal was built on are bf16), and of them only the rows the model's
import at the given TP sizes reads:

* GEMM: every ``m`` at the profiled ``(n, k)`` pairs that bracket the model's
  products (QKV, output, gate-up, down, LM head per GPU), so the importer's bilinear
  read gives the same numbers as on the whole table;
* attention: the model's per-GPU head counts; context attention at batch size 1 (all
  the importer reads);
* all-reduce: the TP sizes asked for.

``--mirror`` is a git directory of ai-dynamo/aiconfigurator; ``--commit`` (default
``HEAD``) the revision read. The output's ``SOURCE.md`` names the repository, paths,
commit and licence, and the folder carries the licence text.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pandas as pd

from servecal.profiler.shapes import ModelShape

DATA = "aic-core/src/aiconfigurator_core/systems/data"
VERSION = "0.14.0"
TABLES = {  # output CSV name -> (path under the system folder, dtype filter)
    f"{{system}}_gemm_vllm_{VERSION}_gemm_perf_bf16.csv": (
        f"gemm/vllm/{VERSION}/gemm_perf.parquet",
        {"gemm_dtype": "bfloat16"},
    ),
    f"{{system}}_attention_vllm_{VERSION}_context_attention_perf_bf16.csv": (
        f"attention/vllm/{VERSION}/context_attention_perf.parquet",
        {"attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"},
    ),
    f"{{system}}_attention_vllm_{VERSION}_generation_attention_perf_bf16.csv": (
        f"attention/vllm/{VERSION}/generation_attention_perf.parquet",
        {"attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"},
    ),
    f"{{system}}_comm_vllm_{VERSION}_custom_allreduce_perf_bf16.csv": (
        f"comm/vllm/{VERSION}/custom_allreduce_perf.parquet",
        {"allreduce_dtype": "bfloat16"},
    ),
}


def git_blob(mirror: Path, commit: str, path: str) -> bytes:
    done = subprocess.run(
        ["git", "--git-dir", str(mirror), "show", f"{commit}:{path}"],
        capture_output=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"error: {path} @ {commit}: {done.stderr.decode().strip()}")
    return done.stdout


def brackets(profiled: list[float], wanted: set[float]) -> set[float]:
    """The profiled sizes the importer's linear read of each wanted size touches."""
    keep: set[float] = set()
    for w in wanted:
        below = [p for p in profiled if p <= w]
        above = [p for p in profiled if p >= w]
        keep.add(max(below) if below else min(profiled))
        keep.add(min(above) if above else max(profiled))
    return keep


def gemm_sizes(shape: ModelShape, tp: int) -> list[tuple[int, int]]:
    """``(n, k)`` of every product one GPU runs per layer, and the LM head."""
    hd, heads, kv = shape.head_dim, shape.n_heads // tp, max(1, shape.n_kv_heads // tp)
    return [
        ((heads + 2 * kv) * hd, shape.hidden),
        (shape.hidden, heads * hd),
        (2 * shape.intermediate // tp, shape.hidden),
        (shape.hidden, shape.intermediate // tp),
        (shape.vocab // tp, shape.hidden),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True)
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--system", default="h100_sxm", help="a100_sxm, h100_sxm, ...")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--tp", default="1,2")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    base = f"{DATA}/{args.system}"
    out = args.out or Path(f"sched/data/aiconfigurator_{args.system}_vllm0.14")
    shape = ModelShape.resolve(args.model)
    tps = [int(t) for t in args.tp.split(",")]
    commit = subprocess.run(
        ["git", "--git-dir", str(args.mirror), "rev-parse", args.commit],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    heads = {(shape.n_heads // t, max(1, shape.n_kv_heads // t), shape.head_dim) for t in tps}
    lines = []
    for template, (path, dtypes) in TABLES.items():
        name = template.format(system=args.system)
        frame = pd.read_parquet(io.BytesIO(git_blob(args.mirror, commit, f"{base}/{path}")))
        total = len(frame)
        for column, value in dtypes.items():
            frame = frame[frame[column] == value]
        if "gemm" in name:
            pairs = [p for t in tps for p in gemm_sizes(shape, t)]
            ns = brackets(sorted(frame["n"].unique()), {n for n, _ in pairs})
            ks = brackets(sorted(frame["k"].unique()), {k for _, k in pairs})
            frame = frame[frame["n"].isin(ns) & frame["k"].isin(ks)]
        elif "attention" in name:
            cols = ("num_heads", "num_key_value_heads", "head_dim")
            key = list(zip(*(frame[c] for c in cols), strict=True))
            frame = frame[[k in heads for k in key]]
            if "context" in name:
                frame = frame[frame["batch_size"] == 1]
        else:
            frame = frame[frame["num_gpus"].isin([t for t in tps if t > 1])]
        device = str(frame["device"].iloc[0])
        frame.to_csv(out / name, index=False)
        lines.append(f"| `{name}` | `{base}/{path}` | {len(frame)} of {total} |")
        print(f"{name}: {len(frame)} of {total} rows")
    (out / "LICENSE").write_bytes(git_blob(args.mirror, commit, "LICENSE"))
    (out / "SOURCE.md").write_text(
        f"# aiconfigurator's {args.system} vLLM 0.14.0 operator tables, cut to "
        f"{shape.name} at TP {', '.join(map(str, tps))}\n\n"
        f"From ai-dynamo/aiconfigurator @ {commit}\n(Apache-2.0, the licence text is in "
        "`LICENSE` here). Changed from the original: Parquet converted to CSV;\nonly the "
        "bf16 rows the model's import reads are kept (`scripts/aiconfigurator_slice.py`,\n"
        "which wrote this folder, says which). Latency in ms per layer; measured by\n"
        f"aiconfigurator on an `{device}` through vLLM 0.14.0.\n\n"
        "| file | from | rows kept |\n| --- | --- | --- |\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
