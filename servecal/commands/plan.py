"""``servecal plan``: the cheapest fleet that serves a workload within SLO (docs/capacity.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    ALLOW_MISMATCH_HELP,
    STRICT_HELP,
    table_trust,
    user_errors,
    writes_folder,
)


@user_errors
@writes_folder("out", runs=False)
def plan_command(
    space_file: Path = typer.Argument(..., help="The plan: workload, SLOs, candidates (TOML)."),
    out: Path = typer.Option(..., help="Output folder: plan.json and frontier.png."),
    jobs: int = typer.Option(
        None, min=1, help="Simulations at once (default: all cores, or the Ray cluster's CPUs)."
    ),
    pool: str = typer.Option(
        "local", "--pool", help="Where simulations run: local (this machine) or ray."
    ),
    address: str = typer.Option(
        None, "--address", help="With --pool ray: the cluster to join (default: a local Ray)."
    ),
    frontier: bool = typer.Option(
        True, "--frontier/--no-frontier", help="Also search every config's max goodput."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print plan.json's answer and rows."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP),
) -> None:
    """Find the cheapest (device, TP, policy, router, replicas) meeting the target."""
    trust = table_trust(allow_edited, strict, allow_mismatch)
    import os

    from servecal.commands._runs import Bars
    from servecal.sched.cluster.planner import candidates, plan
    from servecal.sched.cluster.space import load_space
    from servecal.sched.experiment import open_pool
    from servecal.sched.runfolder import write_json

    space = load_space(space_file, trust)
    width = jobs or os.cpu_count() or 1
    configs = candidates(space)
    start = time.perf_counter()
    try:
        with open_pool(pool, address, jobs) as executor, Bars(quiet=as_json) as bars:
            if executor is None:
                executor = _local(width)
            elif jobs is None:  # as many simulations at once as the Ray cluster has CPUs
                width = _ray_cpus(width)
            tick = bars.sweep("plan", None)
            try:
                plan(space, executor, width, on_progress=tick, frontier=frontier, configs=configs)
            finally:
                if pool == "local":
                    executor.shutdown(wait=True, cancel_futures=True)
    except KeyboardInterrupt:  # keep every simulation that finished
        doc = _document(space, configs, time.perf_counter() - start, pool)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "plan.json", {**doc, "answer": None, "interrupted": True})
        raise
    doc = _document(space, configs, time.perf_counter() - start, pool)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "plan.json", doc)
    if frontier and doc["frontier"]:
        from servecal.util.atomic import atomic_write_bytes

        atomic_write_bytes(out / "frontier.png", _figure(doc))
    if as_json:
        shown = {"answer": doc["answer"], "cheapest": doc["cheapest"],
                 "cheapest_by_dtype": doc["cheapest_by_dtype"], "rows": doc["rows"]}  # fmt: skip
        typer.echo(json.dumps(shown, default=float))
        return
    _print(doc)
    typer.echo(f"plan.json{' and frontier.png' if frontier else ''}: {out}")


def _ray_cpus(default: int) -> int:
    try:
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", default)))
    except Exception:  # noqa: BLE001 - a width is a hint; the pool still bounds the tasks
        return default


def _local(width: int) -> Any:
    from concurrent.futures import ProcessPoolExecutor

    from servecal.sched.experiment.sweep import InProcess, _init_worker

    if width == 1:
        return InProcess()
    return ProcessPoolExecutor(max_workers=width, initializer=_init_worker)


def _row(space: Any, c: Any, pareto_ids: set[int]) -> dict[str, Any]:
    at_rate = [p for p in c.probes if not p.get("frontier") and p["replicas"] == c.replicas]
    if c.replicas is None:
        status = "not within the replica range"
    else:
        status = "frontier" if c.index in pareto_ids else "meets the target"
    h = c.hardware
    mode = getattr(h, "mode", "aggregated")
    split = {} if mode == "aggregated" else {**h.describe(), "units": c.replicas}
    if split and c.replicas is not None:
        split["prefill_replicas"], split["decode_replicas"] = h.fleet(c.replicas)
    return {
        "config": c.label,
        "mode": mode,
        "hardware": h.name,
        "device": getattr(h, "device", None),
        "tp": getattr(h, "tp", None),
        "dtype": h.dtype,
        "kv_dtype": h.kv_dtype,
        **split,
        "policy": c.policy.label,
        "router": c.router.label,
        "price_per_replica_hour": c.hardware.price_per_hour,
        "replicas": c.replicas,
        "cost_per_hour": None if c.replicas is None else c.cost(),
        "attainment": at_rate[0]["attainment"] if at_rate else None,
        "max_goodput": c.max_goodput,
        "max_goodput_bound": c.goodput_bound,
        "status": status,
        "simulations_to_answer": c.to_answer * len(space.seeds),
        "simulations": sum(len(space.seeds) for p in c.probes if not p.get("inferred")),
        "inferred": c.inferred,
        "probes": c.probes,
    }


def _document(space: Any, configs: list[Any], wall_s: float, pool: str) -> dict[str, Any]:
    from dataclasses import asdict

    from servecal.sched.cluster.planner import answer, pareto

    best = answer(configs)
    front = pareto(configs)
    ids = {c.index for c in front}
    rows = [_row(space, c, ids) for c in sorted(configs, key=lambda c: (c.cost(), c.index))]
    by_label = {r["config"]: r for r in rows}
    return {
        "schema": "servecal.plan/1",
        "question": {
            "workload": space.workload,
            "rate": space.rate,
            "requests": space.n_requests,
            "tpot_slo_ms": space.tpot_slo_ms,
            "slo_classes": space.slo_classes,
            "seeds": list(space.seeds),
            "target": space.target,
            "replicas": list(space.replicas),
            "policies": [p.label for p in space.policies],
            "routers": [r.label for r in space.routers],
            "hardware": [asdict(h) for h in space.hardware],
            "disaggregated": [p.describe() for p in space.disaggregated],
        },
        "answer": None
        if best is None
        else {k: v for k, v in by_label[best.label].items() if k != "probes"},  # fmt: skip
        "cheapest": _cheapest_by_mode(rows),
        "cheapest_by_dtype": _cheapest_by_dtype(rows),
        "frontier": [by_label[c.label]["config"] for c in front],
        "simulations_to_answer": sum(r["simulations_to_answer"] for r in rows),
        "simulations": sum(r["simulations"] for r in rows),
        "wall_s": wall_s,
        "pool": pool,
        "rows": rows,
    }


def _cheapest_by_mode(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The cheapest row meeting the target of each mode (rows are by cost already)."""
    out: dict[str, Any] = {}
    for r in rows:
        if r["cost_per_hour"] is not None and r["mode"] not in out:
            out[r["mode"]] = {k: v for k, v in r.items() if k != "probes"}
    return out


def dtype_key(row: dict[str, Any]) -> str:
    """``fp8/fp8``: a row's weight and KV-cache dtypes (``unstated`` where neither the
    plan nor the table says)."""
    return f"{row['dtype'] or 'unstated'}/{row['kv_dtype'] or 'unstated'}"


def _cheapest_by_dtype(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every weight/KV dtype pair among the candidates → its cheapest row meeting the
    target (None: none of that pair does). Rows are by cost already."""
    out: dict[str, Any] = {dtype_key(r): None for r in rows}
    for r in rows:
        if r["cost_per_hour"] is not None and out[dtype_key(r)] is None:
            out[dtype_key(r)] = {k: v for k, v in r.items() if k != "probes"}
    return out


def _fleet(r: dict[str, Any]) -> str:
    from servecal.commands._runs import fmt

    if r["mode"] == "aggregated" or r["replicas"] is None:
        return fmt(r["replicas"])
    return f"{r['prefill_replicas']}P+{r['decode_replicas']}D"


def _print_modes(doc: dict[str, Any]) -> None:
    """The cheapest aggregated and disaggregated fleets, and which wins by how much."""
    best = doc.get("cheapest", {})
    if not doc["question"].get("disaggregated"):
        return
    for mode in ("aggregated", "disaggregated"):
        _echo_cheapest(mode, best.get(mode))
    if len(best) == 2:
        a, d = best["aggregated"]["cost_per_hour"], best["disaggregated"]["cost_per_hour"]
        win, lose = ("aggregated", d / a) if a <= d else ("disaggregated", a / d)
        typer.echo(f"{win} wins: the other costs {lose:.2f}× as much")


def _echo_cheapest(what: str, r: dict[str, Any] | None) -> None:
    """One line: the cheapest fleet of one kind (``what``), or that none meets the target."""
    if r is None:
        typer.echo(f"cheapest {what}: none meets the target in the replica range")
        return
    good = 100 * r["attainment"]
    typer.echo(f"cheapest {what}: {_fleet(r)} × {r['config']}: "
               f"${r['cost_per_hour']:.2f}/hour, {good:.1f}% good")  # fmt: skip


def _print_dtypes(doc: dict[str, Any]) -> None:
    """With candidates of more than one dtype: the cheapest fleet of each, and which wins
    by how much."""
    best = doc.get("cheapest_by_dtype", {})
    if len(best) < 2:
        return
    for key, r in best.items():
        weights, kv = key.split("/")
        _echo_cheapest(f"{weights} weights, {kv} KV", r)
    costs = sorted((r["cost_per_hour"], key) for key, r in best.items() if r is not None)
    if len(costs) >= 2:
        (low, win), (next_low, other) = costs[0], costs[1]
        typer.echo(f"{win} wins: the next dtype ({other}) costs {next_low / low:.2f}× as much")


def _print(doc: dict[str, Any]) -> None:
    from servecal.commands._runs import fmt

    q = doc["question"]
    rate = "its own timestamps" if q["rate"] is None else f"{q['rate']:g} req/s"
    where = f"{Path(q['workload'].removeprefix('trace:')).name} at {rate}, {q['requests']} requests"
    target = f"{100 * q['target']:g}% good (TTFT and TPOT {q['tpot_slo_ms']:g} ms met)"
    lines = []
    for r in doc["rows"]:
        att = None if r["attainment"] is None else 100 * r["attainment"]
        mg = r["max_goodput"]
        mg_text = "-" if mg is None else (f"> {mg:.4g}" if r["max_goodput_bound"] == "above_cap"
                                          else f"{mg:.4g}")  # fmt: skip
        mark = "*" if r["status"] == "frontier" else ""
        lines.append([r["hardware"], r["policy"], r["router"], _fleet(r),
                      fmt(r["cost_per_hour"]), fmt(att, 3), mg_text, mark,
                      str(r["simulations"])])  # fmt: skip
    _table(
        f"{where} · target {target} · cost per hour against max goodput (* = frontier)",
        ["device×TP", "policy", "router", "replicas", "$/hour", "good %", "max goodput/s",
         "front", "sims"],
        lines,
    )  # fmt: skip
    _print_modes(doc)
    _print_dtypes(doc)
    a = doc["answer"]
    n, total = doc["simulations_to_answer"], doc["simulations"]
    took = (f"{n} simulation{'' if n == 1 else 's'} to the answer, {total} in all, "
            f"{doc['wall_s']:.0f} s on the {doc['pool']} pool")  # fmt: skip
    if a is None:
        typer.echo(f"no configuration meets the target within {q['replicas']} replicas ({took})")
        return
    typer.echo(
        f"cheapest: {_fleet(a)} × {a['config']}: ${a['cost_per_hour']:.2f}/hour, "
        f"{100 * a['attainment']:.1f}% good at {rate} ({took})"
    )


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table on stdout, at least 130 columns wide when stdout is not a terminal (a
    file or a pipe: the names are never cut short there)."""
    import sys

    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for k, col in enumerate(columns):
        table.add_column(col, justify="left" if k < 3 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=None if sys.stdout.isatty() else 130).print(table)


def _figure(doc: dict[str, Any]) -> bytes:
    from servecal.reports.figures import colour_map, new_figure, to_png

    rows = [r for r in doc["rows"] if r["max_goodput"] is not None]
    fig, axes = new_figure(width=7.0, height=4.2)
    ax = axes[0][0]
    colours = colour_map([_family(r) for r in rows])
    for key, colour in colours.items():
        mine = [r for r in rows if _family(r) == key]
        ax.scatter([r["cost_per_hour"] for r in mine], [r["max_goodput"] for r in mine],
                   color=colour, label=key, s=24,
                   marker="o" if mine[0]["mode"] == "aggregated" else "^")  # fmt: skip
    front = sorted((r for r in rows if r["status"] == "frontier"), key=lambda r: r["cost_per_hour"])
    ax.step([r["cost_per_hour"] for r in front], [r["max_goodput"] for r in front], where="post",
            color="black", linewidth=1, label="frontier")  # fmt: skip
    rate = doc["question"]["rate"]
    if rate is not None:
        ax.axhline(rate, color="grey", linestyle="--", linewidth=1, label="offered rate")
    ax.set_xlabel("fleet cost, $ per hour")
    ax.set_ylabel("max goodput, req/s")
    ax.set_title("cost against max goodput, each config at its fewest replicas")
    ax.legend(fontsize=7)
    return to_png(fig)


def _family(r: dict[str, Any]) -> str:
    """A figure's colour: the device×TP, or a disaggregated pair's pools and link."""
    if r["mode"] == "aggregated":
        return r["hardware"]
    return f"P {r['prefill']} / D {r['decode']} · {r['link']}"


def register(app: typer.Typer) -> None:
    app.command("plan", help="The cheapest fleet (device, TP, policy, router, replicas) in SLO.")(
        plan_command
    )
