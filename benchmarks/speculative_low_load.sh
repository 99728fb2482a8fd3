#!/usr/bin/env bash
# TPOT at a low offered load (20 req/s), SLOWeave and fixed-1024, without speculation and
# with k=4 at acceptance 0.6 and 0.8 (docs/results/2026-12-04-speculative.md).
# Usage: benchmarks/speculative_low_load.sh OUT > table.md
set -euo pipefail
out=${1:?output folder}
echo "| workload | policy | decoding | mean TPOT ms (mean over requests) | P99 TPOT ms | attainment | tokens per decode step |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for w in chat mixed; do
  for p in sloweave fixed-1024; do
    for s in none k=4,accept=0.6 k=4,accept=0.8; do
      flag=(); [ "$s" != none ] && flag=(--speculative "$s")
      dir="$out/$w-$p-${s//[=,]/_}"
      servecal simulate --workload "$w" --policy "$p" --tpot-slo 25 --rate 20 --requests 2000 \
        --seeds 3 --jobs 1 --json "${flag[@]}" --out "$dir" > /dev/null
      python - "$dir" "$w" "$p" "$s" <<'PY'
import json, sys
import numpy as np
import pyarrow.parquet as pq
from pathlib import Path
d, w, p, s = sys.argv[1:]
m = json.loads((Path(d) / "summary.json").read_text())["mean_over_seeds"]
tpot = np.concatenate([pq.read_table(f / "requests.parquet").column("tpot_mean_ms").to_numpy()
                       for f in sorted(Path(d).glob("seed-*"))])
tokens = m.get("tokens_per_decode")
print(f"| {w} | {p} | {s} | {np.nanmean(tpot):.2f} | {m['p99_tpot_ms']:.2f} | "
      f"{m['attainment']:.3f} | {'1' if tokens is None else f'{tokens:.2f}'} |")
PY
    done
  done
done
