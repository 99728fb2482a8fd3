"""Import the shipped aiconfigurator slices into plan devices: samples and a fitted table.

    python scripts/derive_imported_devices.py [--check]

For A100 and H100 (``sched/data/aiconfigurator_{a100,h100}_sxm_vllm0.14/``, written by
``scripts/aiconfigurator_slice.py``) at TP 1 and 2, into
``sched/data/imported_{a100,h100}x{T}/``:

* ``table.json`` (a plan's ``predictor``): ``servecal import aiconfigurator --model
  llama-3-8b --tp T`` on the profiler's GPU grid, then ``servecal fit --family table``:
  the table a team would build from the profile (P50 only: the profiles are medians);
* ``samples.csv`` with its ``samples.fingerprint.json`` (a plan's ``truth = "samples:..."``):
  the same import on :data:`TRUTH_GRID`, denser in decodes and chunk sizes. A samples
  truth answers an iteration with its nearest measured point, so on the GPU grid a
  400-token chunk would cost what a 512-token one does; on this grid the nearest
  point is within ~12% in chunk and decodes up to 256 of each. Only the columns a
  samples truth reads are kept, ``ms`` to 0.1 µs (CSV: the package ships CSV and
  JSON data, and ``servecal import`` writes Parquet whatever ``--out`` is named).

The same for the H100 at TP 1 from aiconfigurator's vLLM 0.24.0 tables
(``sched/data/aiconfigurator_h100_sxm_vllm0.24_llama-3-8b/``), once with bf16 weights and
KV cache and once with fp8 weights and an fp8 KV cache (``--dtype``, ``--kv-dtype``), into
``sched/data/imported_h100x1_vllm0.24_{bf16,fp8}/``: the dtype candidates of
``examples/capacity/azure_fp8.toml``.

``--check`` re-derives into a temporary folder and says whether the shipped files are
the same (a table's fit times and creation time aside); ``--only NAME`` derives (or
checks) one device folder.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "sched" / "data"
#: The truth's import grid: the GPU grid's ctx and prefix, denser in decodes and chunks.
TRUTH_GRID = {
    "n_decode": [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256],
    "chunk": [0, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 288, 320, 384, 448, 512, 576,
              640, 768, 896, 1024, 1280, 1536, 2048, 3072, 4096],
    "ctx": [128, 512, 1024, 2048, 4096, 8192],
    "prefix": [0, 1024, 4096],
}  # fmt: skip
SAMPLE_COLUMNS = ("n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep")
SYSTEMS = {"a100": "aiconfigurator_a100_sxm_vllm0.14", "h100": "aiconfigurator_h100_sxm_vllm0.14"}
QUANT_PROFILE = "aiconfigurator_h100_sxm_vllm0.24_llama-3-8b"
#: Every device folder: (profile, TP, weight dtype, KV-cache dtype).
DEVICES = {
    **{f"imported_{gpu}x{tp}": (profile, tp, "bfloat16", "bfloat16")
       for gpu, profile in SYSTEMS.items() for tp in (1, 2)},
    "imported_h100x1_vllm0.24_bf16": (QUANT_PROFILE, 1, "bfloat16", "bfloat16"),
    "imported_h100x1_vllm0.24_fp8": (QUANT_PROFILE, 1, "fp8", "fp8"),
}  # fmt: skip


def servecal(*args: str) -> None:
    done = subprocess.run(  # from the root: the profile path recorded is the repository's
        [sys.executable, "-m", "servecal", *args], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode:
        sys.exit(f"error: servecal {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")


def derive(out_root: Path, only: str | None = None) -> list[Path]:
    written = []
    for name, (profile, tp, dtype, kv_dtype) in DEVICES.items():
        if only is not None and name != only:
            continue
        out = out_root / name
        out.mkdir(parents=True, exist_ok=True)
        dtypes = [] if (dtype, kv_dtype) == ("bfloat16", "bfloat16") else [
            "--dtype", dtype, "--kv-dtype", kv_dtype]  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            (tmp_path / "grid.json").write_text(json.dumps(TRUTH_GRID))
            for part, grid in (
                ("table", []),
                ("truth", ["--grid", str(tmp_path / "grid.json")]),
            ):
                (tmp_path / part).mkdir()
                servecal("import", "aiconfigurator", f"sched/data/{profile}", "--model",
                         "llama-3-8b", "--tp", str(tp), "--out",
                         str(tmp_path / part / "samples.parquet"), *grid, *dtypes)  # fmt: skip
            servecal("fit", str(tmp_path / "table" / "samples.parquet"), "--out",
                     str(out / "table.json"), "--family", "table")  # fmt: skip
            frame = pd.read_parquet(tmp_path / "truth" / "samples.parquet")
            frame = frame[list(SAMPLE_COLUMNS)].assign(ms=frame["ms"].round(4))
            frame.to_csv(out / "samples.csv", index=False)
            fingerprint = (tmp_path / "truth" / "samples.fingerprint.json").read_text()
            (out / "samples.fingerprint.json").write_text(fingerprint)
        written += [out / "samples.csv", out / "samples.fingerprint.json", out / "table.json"]
    if only is not None and not written:
        sys.exit(f"error: --only {only}: no such device; known: {', '.join(DEVICES)}")
    return written


#: What a refit changes in a table without changing the table.
VOLATILE = frozenset({"created", "fit_s", "final_fit_s"})


def _stable(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def same(a: Path, b: Path) -> bool:
    if a.suffix == ".json":
        return _stable(json.loads(a.read_text())) == _stable(json.loads(b.read_text()))
    return filecmp.cmp(a, b, shallow=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="re-derive and compare, write nothing")
    parser.add_argument("--only", default=None, help="one device folder (default: every one)")
    args = parser.parse_args()
    if not args.check:
        for path in derive(DATA, args.only):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = derive(Path(tmp), args.only)
        differ = [p.relative_to(tmp) for p in fresh
                  if not same(p, DATA / p.relative_to(tmp))]  # fmt: skip
    print("same" if not differ else "differ: " + ", ".join(map(str, differ)))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
