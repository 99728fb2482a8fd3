"""What a served run folder keeps when an operator stops the server.

Serves servecal's ``tiny`` shape with random weights on the CPU vLLM engine
(``$SERVECAL_VLLM_CPU_PYTHON``, docs/vllm.md) with the plug-in and vLLM's default
``--shutdown-timeout 0``, sends ``--requests`` requests over loopback one after the
other, and as soon as the last one has its last token stops the server: ``--stop``
``term-group`` (SIGTERM to the process group: an operator, timeout(1), systemd,
Kubernetes), ``term-api`` / ``int-api`` (SIGTERM / SIGINT to the API process alone)
or ``kill-group`` (SIGKILL). ``--flush-s`` longer than the run (the default) means no
flush came before the stop. Prints the steps and requests the folder holds beside
what was served. Needs a cost table for the shape (``--table``)::

    python benchmarks/vllm_stop.py --table cal/costtable.json --stop term-group
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from servecal.costmodels.segments import read_table
from servecal.integrations.bench.client import send_workload, served_model
from servecal.integrations.bench.server import ServerSpec, _ready, free_port, write_model_folder
from servecal.sched.workloads.generate import generate
from servecal.util.errors import InputError

STOPS = {
    "term-group": (signal.SIGTERM, True),
    "term-api": (signal.SIGTERM, False),
    "int-api": (signal.SIGINT, False),
    "kill-group": (signal.SIGKILL, True),
}


def serve_and_stop(table: Path, stop: str, n: int, flush_s: float, root: Path) -> dict:
    """One server, ``n`` requests, the stop; what was served and what the folder holds."""
    model = write_model_folder("tiny", root / "model")
    run_dir = root / "run"
    spec = ServerSpec(model_dir=model, table=table, tpot_slo_ms=50, run_dir=run_dir,
                      python=os.environ["SERVECAL_VLLM_CPU_PYTHON"],
                      max_num_batched_tokens=256, flush_s=flush_s, dtype="float32")  # fmt: skip
    port = free_port()
    cmd = spec.command(port)
    i = cmd.index("--shutdown-timeout")
    del cmd[i : i + 2]  # vLLM's default: 0 s
    with open(root / "server.txt", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    while not _ready(url):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: see {root / 'server.txt'}")
        time.sleep(0.5)
    reqs = generate("mixed", 2.0, n, tpot_slo_ms=50, rng=np.random.default_rng(1))
    reqs = [replace(r, prompt_tokens=min(r.prompt_tokens, 300),
                    output_tokens=min(r.output_tokens, 20)) for r in reqs]  # fmt: skip
    got = send_workload(url, served_model(url)[0], reqs, 1, 600)
    sig, group = STOPS[stop]
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    proc.wait(timeout=300)
    time.sleep(2.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers
    kept: dict = {}
    for name in ("iterations", "requests"):
        try:
            kept[name] = read_table(run_dir / f"{name}.parquet")
        except InputError:
            kept[name] = None
    steps = kept["iterations"]
    return {
        "stop": stop,
        "served_requests": sum(g.complete for g in got),
        "prompt_tokens": sum(r.prompt_tokens for r in reqs),
        "decode_tokens": sum(r.output_tokens - 1 for r in reqs),
        "kept_steps": 0 if steps is None else len(steps),
        "kept_chunk_tokens": 0 if steps is None else int(steps["chunk"].sum()),
        "kept_decode_tokens": 0 if steps is None else int(steps["n_decode"].sum()),
        "kept_requests": 0 if kept["requests"] is None else len(kept["requests"]),
        "closed": json.loads((run_dir / "run.json").read_text())["log"]["closed"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, required=True)
    ap.add_argument("--stop", choices=sorted(STOPS), default="term-group")
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--flush-s", type=float, default=3600.0)
    args = ap.parse_args()
    if "SERVECAL_VLLM_CPU_PYTHON" not in os.environ or not args.table.is_file():
        print("error: need $SERVECAL_VLLM_CPU_PYTHON and an existing --table", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = serve_and_stop(args.table.resolve(), args.stop, args.requests, args.flush_s,
                             Path(tmp))  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
