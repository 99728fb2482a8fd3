"""servecal's whole ``simulate`` against Vidur's, side by side, on the same requests.

Run::

    python benchmarks/vidur_side_by_side.py TRACE.csv VIDUR_A100_DIR \\
        --vidur-python /work/venvs/vidur/bin/python \\
        [--servecal-python /work/venvs/servecal/bin/python] [--requests 2000] [--rate 4] \\
        [--budget 512] [--alternations 5]

* ``TRACE.csv``: the Azure LLM inference trace, conversation
  (``TIMESTAMP,ContextTokens,GeneratedTokens``; ``sched/data/azure_conv_head4000.csv``
  is its first 4,000 rows). Its first ``--requests`` rows, their arrival gaps scaled so
  the mean rate is ``--rate`` req/s (as ``servecal simulate --rate`` does), each
  request's prompt trimmed so prompt + output fit Vidur's model (4,096 tokens: Vidur's
  own trace replay trims the same way), are written once in both formats: servecal
  reads ``prompt_tokens,output_tokens,arrival_s``, Vidur ``Date,Time,PromptTokenCount,
  CompletionTokenCount``. Both simulators get exactly these requests.
* ``VIDUR_A100_DIR``: Vidur's A100 profiles (microsoft/vidur @ 7d475133, MIT):
  ``llama2_7b_mlp.csv``, ``llama2_7b_attention_samples.txt`` (1,029 rows of its
  Llama-2-7B attention profile; the whole 10.7 MB file is not available offline) and
  ``network/a100_dgx_{all_reduce,send_recv}.csv``. Vidur 0.0.26 fetches its profiles
  from Hugging Face datasets; this script lays them out as such a dataset in a scratch
  Hugging Face cache and runs Vidur with ``HF_HUB_OFFLINE=1``, so it reads them there.
  Vidur trains its random-forest predictors once (untimed, cached in the scratch
  folder), as servecal's table is fitted once (untimed).
* servecal: ``servecal import aiconfigurator sched/data/aiconfigurator_a100_sxm_vllm0.14
  --model llama-3-8b`` and ``servecal fit`` once (untimed), then the timed
  ``servecal simulate --workload trace:REQUESTS --requests N --seeds 1 --policy
  budget-BUDGET --truth samples:SAMPLES --predictor TABLE --tpot-slo 100 --out RUN
  --json``: vLLM's token budget (decodes first, then prompts in arrival order).
* Vidur: ``python -m vidur.main`` with the trace-replay generator on those requests,
  one A100 replica, Llama-2-7B (its A100 profile), the Sarathi scheduler with chunk
  size BUDGET (its token budget per iteration), batch cap 128, the random-forest
  predictor. Its iterations are the batches it ran (``batch_metrics``' rows or, when
  it writes none, the ``batch`` events of its log).

Each simulator runs from its own virtual environment, as a user installs it:
``--vidur-python`` (``pip install vidur==0.0.26``) and ``--servecal-python`` (``pip
install .`` into a fresh virtualenv; default: this interpreter). A development
interpreter with many packages and ``.pth`` start-up hooks (an editable install's
finder) charges every process it starts ~0.1 CPU s that an installed servecal does not
pay (docs/results/2026-12-04-vidur-side-by-side.md).

Each alternation runs both as fresh processes (startup, loading, the run and its output
included), the order flipping every alternation, after one untimed warm-up of each.
Printed per run: wall and CPU seconds (CPU: the child's own ``rusage``), iterations,
iterations per second; then the medians and servecal's speed over Vidur's (iterations
per second, and whole-run wall time for the same requests), and the host's load.
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AIC_A100 = ROOT / "sched" / "data" / "aiconfigurator_a100_sxm_vllm0.14"
#: Vidur's name for the model whose A100 profile it ships, and its context length.
VIDUR_MODEL = "meta-llama/Llama-2-7b-hf"
VIDUR_MAX_TOKENS = 4096
#: Model shape of Vidur's Llama-2-7B profile rows (its attention.csv's columns).
LLAMA2_7B = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 32}
DATASETS = {"compute": "servecal-bench/vidur-a100-llama-2-7b", "network": "servecal-bench/a100-dgx"}
TRACE_DATE = "2023-11-16"


def write_requests(trace: Path, n: int, rate: float, work: Path) -> tuple[Path, Path]:
    """The first ``n`` requests of an Azure trace, at ``rate`` req/s, fitted to Vidur's
    context, as a servecal trace and a Vidur trace (see the module docstring)."""
    from datetime import datetime

    rows = []
    with trace.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append(row)
            if len(rows) == n:
                break
    if len(rows) < 2:
        raise SystemExit(f"error: {trace}: fewer than 2 requests")
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp() for r in rows]
    span = stamps[-1] - stamps[0]
    scale = (1.0 / rate) / (span / (len(rows) - 1))
    ours, theirs = work / "requests_servecal.csv", work / "requests_vidur.csv"
    with ours.open("w", newline="") as a, theirs.open("w", newline="") as b:
        wa, wb = csv.writer(a), csv.writer(b)
        wa.writerow(["prompt_tokens", "output_tokens", "arrival_s"])
        wb.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for row, stamp in zip(rows, stamps, strict=True):
            output = min(int(row["GeneratedTokens"]), VIDUR_MAX_TOKENS - 1)
            prompt = max(1, min(int(row["ContextTokens"]), VIDUR_MAX_TOKENS - output))
            at = round((stamp - stamps[0]) * scale, 6)
            wa.writerow([prompt, output, at])
            wb.writerow([TRACE_DATE, at, prompt, output])
    return ours, theirs


def _attention_rows(samples: Path) -> list[dict]:
    """Vidur attention.csv rows from the compact transcription (its header says the
    format: ``D kv first_batch : decode ms ...``, ``P chunk : kv:prefill_ms ...``)."""
    base = {**LLAMA2_7B, "block_size": 16, "num_tensor_parallel_workers": 1,
            "max_model_len": VIDUR_MAX_TOKENS}  # fmt: skip
    rows = []
    for line in samples.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, body = line.split("[")[0].partition(":")
        fields = head.split()
        if fields[0] == "D":
            kv, first = int(fields[1]), int(fields[2])
            for j, ms in enumerate(body.split()):
                rows.append({**base, "batch_size": first + j, "prefill_chunk_size": 0,
                             "kv_cache_size": kv, "is_prefill": False,
                             "time_stats.attn_decode.median": float(ms),
                             "time_stats.attn_prefill.median": 0.0})  # fmt: skip
        elif fields[0] == "P":
            chunk = int(fields[1])
            for pair in body.split():
                kv, ms = pair.split(":")
                rows.append({**base, "batch_size": 1, "prefill_chunk_size": chunk,
                             "kv_cache_size": int(kv), "is_prefill": True,
                             "time_stats.attn_decode.median": 0.0,
                             "time_stats.attn_prefill.median": float(ms)})  # fmt: skip
    return rows


def _write_xz_csv(path: Path, rows: list[dict] | None = None, source: Path | None = None,
                  extra: dict | None = None) -> None:  # fmt: skip
    """``rows`` (or the CSV ``source``, with ``extra`` columns added) as ``path`` (.xz)."""
    with lzma.open(path, "wt", newline="") as f:
        if source is not None:
            with source.open(newline="") as src:
                reader = csv.DictReader(src)
                names = [n for n in reader.fieldnames or [] if n] + list(extra or {})
                writer = csv.DictWriter(f, names, extrasaction="ignore")
                writer.writeheader()
                for row in reader:
                    writer.writerow({**row, **(extra or {})})
            return
        assert rows
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def vidur_profiles(src: Path, cache: Path) -> None:
    """Vidur's A100 profiles as the two Hugging Face datasets it downloads, in a
    Hugging Face cache at ``cache`` (what ``snapshot_download`` finds offline)."""
    files = {
        "compute": {
            "config.json": {"model": VIDUR_MODEL, "device_sku": "a100"},
            "mlp.csv.xz": (src / "llama2_7b_mlp.csv", None),
            "attention.csv.xz": _attention_rows(src / "llama2_7b_attention_samples.txt"),
        },
        "network": {
            "config.json": {"sku": "a100_dgx"},
            "all_reduce.csv.xz": (src / "network" / "a100_dgx_all_reduce.csv", None),
            "send_recv.csv.xz": (src / "network" / "a100_dgx_send_recv.csv", None),
        },
    }
    for kind, content in files.items():
        org, name = DATASETS[kind].split("/")
        repo = cache / "profiling_data" / kind / f"datasets--{org}--{name}"
        snapshot = repo / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text("0" * 40)
        for fname, what in content.items():
            if isinstance(what, dict):
                (snapshot / fname).write_text(json.dumps(what))
            elif isinstance(what, list):
                _write_xz_csv(snapshot / fname, rows=what)
            else:
                _write_xz_csv(snapshot / fname, source=what[0], extra=what[1])


def vidur_command(python: str, requests: Path, budget: int, cache: Path, out: Path) -> list[str]:
    rf = "--random_forrest_execution_time_predictor_config_"
    trace = "--trace_request_generator_config_"
    return [python, "-m", "vidur.main",
            "--replica_config_device", "a100", "--replica_config_network_device", "a100_dgx",
            "--replica_config_model_name", VIDUR_MODEL, "--cluster_config_num_replicas", "1",
            "--replica_config_tensor_parallel_size", "1",
            "--replica_config_num_pipeline_stages", "1",
            "--request_generator_config_type", "trace_replay",
            f"{trace}trace_file", str(requests), f"{trace}date", TRACE_DATE,
            f"{trace}prefill_scale_factor", "1", f"{trace}decode_scale_factor", "1",
            f"{trace}time_scale_factor", "1", f"{trace}max_tokens", str(VIDUR_MAX_TOKENS),
            "--replica_scheduler_config_type", "sarathi",
            "--sarathi_scheduler_config_chunk_size", str(budget),
            "--sarathi_scheduler_config_batch_size_cap", "128",
            "--execution_time_predictor_config_type", "random_forrest",
            f"{rf}model_profiling_dataset", DATASETS["compute"],
            f"{rf}network_profiling_dataset", DATASETS["network"],
            f"{rf}cache_dir", str(cache),
            f"{rf}prediction_max_tokens_per_request", str(VIDUR_MAX_TOKENS),
            f"{rf}prediction_max_prefill_chunk_size", str(VIDUR_MAX_TOKENS),
            # one forest setting instead of its 27-setting, 10-fold grid search: the
            # one-time training fits a shared 2-core host; the runs read the cache
            f"{rf}num_estimators", "250", f"{rf}max_depth", "16",
            f"{rf}min_samples_split", "2", f"{rf}k_fold_cv_splits", "2",
            f"{rf}num_training_job_threads", "2",
            "--metrics_config_output_dir", str(out),
            "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
            "--no-metrics_config_write_json_trace",
            "--metrics_config_keep_individual_batch_metrics"]  # fmt: skip


def servecal_command(python: str, requests: Path, n: int, budget: int, samples: Path,
                     table: Path, out: Path) -> list[str]:  # fmt: skip
    return [python, "-m", "servecal", "simulate", "--workload", f"trace:{requests}",
            "--requests", str(n), "--seeds", "1", "--policy", f"budget-{budget}",
            "--truth", f"samples:{samples}", "--predictor", str(table), "--tpot-slo", "100",
            "--out", str(out), "--json"]  # fmt: skip


def timed(command: list[str], env: dict[str, str], cwd: Path) -> dict:
    """Wall s, CPU s (this child's own rusage) and stdout + stderr of a fresh process."""
    t0 = time.perf_counter()
    with open(cwd / "out.txt", "wb") as out, open(cwd / "err.txt", "wb") as err:
        pid = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, env=env).pid
        _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    text = (cwd / "out.txt").read_text() + (cwd / "err.txt").read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"error: {command[:3]} failed:\n{text[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "text": text}


def vidur_iterations(out: Path) -> int:
    """Batches Vidur ran: the rows of its batch metrics (the newest run folder)."""
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    for name in ("batch_metrics.csv", "batch_num_tokens.csv", "batch_size.csv"):
        found = list(runs[-1].rglob(name))
        if found:
            with found[0].open() as f:
                return sum(1 for _ in f) - 1
    raise SystemExit(f"error: no batch metrics under {runs[-1]}: {sorted(runs[-1].rglob('*'))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("vidur_profiles", type=Path)
    ap.add_argument("--vidur-python", required=True)
    ap.add_argument("--servecal-python", default=sys.executable,
                    help="the interpreter of servecal's own environment")  # fmt: skip
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--alternations", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="keep the scratch folder here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servecal-vidur-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(args, work.resolve())
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    ours, theirs = write_requests(args.trace, args.requests, args.rate, work)
    cache = work / "vidur_cache"
    vidur_profiles(args.vidur_profiles.resolve(), cache)
    samples, table = work / "a100.parquet", work / "a100.json"
    # run in the scratch folder: ``-m`` puts the working directory first on the path,
    # and a source checkout there would shadow the installed servecal
    exe = [args.servecal_python, "-m", "servecal"]
    subprocess.run([*exe, "import", "aiconfigurator", str(AIC_A100), "--model", "llama-3-8b",
                    "--out", str(samples)], check=True, capture_output=True, cwd=work)  # fmt: skip
    subprocess.run([*exe, "fit", str(samples), "--out", str(table)], check=True,
                   capture_output=True, cwd=work)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    vidur_env = {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(work / "hf_home"),
                 "WANDB_MODE": "disabled"}  # fmt: skip
    commands = {
        "servecal": (
            servecal_command(
                args.servecal_python, ours, args.requests, args.budget, samples, table, work / "run"
            ),
            env,
        ),  # fmt: skip
        "vidur": (
            vidur_command(args.vidur_python, theirs, args.budget, cache, work / "vidur_out"),
            vidur_env,
        ),  # fmt: skip
    }
    for name, (command, _) in commands.items():
        print(f"{name}: {' '.join(command)}")
    results: dict[str, list[dict]] = {name: [] for name in commands}
    for k in range(args.alternations + 1):
        order = list(commands) if k % 2 == 0 else list(reversed(commands))
        for name in order:
            command, cmd_env = commands[name]
            shutil.rmtree(work / "run", ignore_errors=True)
            shutil.rmtree(work / "vidur_out", ignore_errors=True)
            (work / "vidur_out").mkdir()
            r = timed(command, cmd_env, work)
            if name == "servecal":
                iterations = int(float(json.loads(r["text"].split("\n", 1)[0])["iterations"]))
            else:
                iterations = vidur_iterations(work / "vidur_out")
            label = "warm-up (untimed)" if k == 0 else f"run {k}"
            print(f"  {label:<18} {name:<9} wall {r['wall_s']:7.2f} s  CPU {r['cpu_s']:7.2f} s  "
                  f"{iterations:>7,} iterations  {iterations / r['wall_s']:>9,.0f} it/s wall  "
                  f"{iterations / r['cpu_s']:>9,.0f} it/s CPU", flush=True)  # fmt: skip
            if k:
                results[name].append({**r, "iterations": iterations})
    summary = {}
    for name, runs in results.items():
        summary[name] = {
            "iterations": runs[0]["iterations"],
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "its_wall": statistics.median(r["iterations"] / r["wall_s"] for r in runs),
            "its_cpu": statistics.median(r["iterations"] / r["cpu_s"] for r in runs),
        }
    s, v = summary["servecal"], summary["vidur"]
    ratios = [
        (a["iterations"] / a["wall_s"]) / (b["iterations"] / b["wall_s"])
        for a, b in zip(results["servecal"], results["vidur"], strict=True)
    ]
    print(json.dumps(summary, indent=1))
    print(f"servecal / Vidur, iterations per second: {s['its_wall'] / v['its_wall']:.1f}x wall "
          f"(per alternation: {', '.join(f'{x:.1f}' for x in ratios)}), "
          f"{s['its_cpu'] / v['its_cpu']:.1f}x CPU; whole run on the same {args.requests:,} "
          f"requests: {v['wall_s'] / s['wall_s']:.1f}x wall, {v['cpu_s'] / s['cpu_s']:.1f}x CPU; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
