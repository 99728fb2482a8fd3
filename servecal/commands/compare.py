"""``servecal compare``: the SPEC §1 grid of policies × workloads × TPOT targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    STRICT_HELP,
    table_flags,
    user_errors,
    writes_folder,
)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _rates(text: str | None, workloads: list[str]) -> dict[str, float | None]:
    from servecal.costmodels.errors import InputError
    from servecal.sched.compare import default_rate

    rates = {w: default_rate(w) for w in workloads}
    for item in _split(text or ""):
        name, _, value = item.rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            raise InputError(f"--rates {item!r}: expected WORKLOAD=REQ_PER_S") from None
        if name not in rates or not rate > 0:
            raise InputError(f"--rates {item!r}: unknown workload or non-positive rate")
        rates[name] = rate
    return rates


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print_tables(rows: list[dict[str, Any]], ratio_rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for d in sorted({r["tpot_slo"] for r in rows}):
        table = Table(title=f"TPOT SLO {d:g} ms: goodput req/s · attainment % · P99 TTFT ms · "
                      "P99 TPOT ms (means over seeds)")  # fmt: skip
        table.add_column("policy")
        for w in workloads:
            rate = next(r["rate"] for r in rows if r["workload"] == w)
            table.add_column(f"{w} @ {'trace' if rate is None else f'{rate:g}/s'}", justify="right")
        for p in policies:
            cells = []
            for w in workloads:
                r = next(
                    x for x in rows if (x["tpot_slo"], x["workload"], x["policy"]) == (d, w, p)
                )
                att = None if r["attainment"] is None else 100 * r["attainment"]
                cells.append(
                    f"{_fmt(r['goodput'])} · {_fmt(att)}% · {_fmt(r['p99_ttft_ms'], 0)} · "
                    f"{_fmt(r['p99_tpot_ms'])}"
                )
            table.add_row(p, *cells)
        console.print(table)
    if ratio_rows:
        table = Table(title="SLOWeave goodput / best static policy (per workload and target)")
        table.add_column("TPOT SLO")
        for w in workloads:
            table.add_column(w, justify="right")
        for d in sorted({r["tpot_slo"] for r in ratio_rows}):
            cells = []
            for w in workloads:
                r = next((x for x in ratio_rows if (x["tpot_slo"], x["workload"]) == (d, w)), None)
                cells.append(
                    "-"
                    if r is None or r["ratio"] is None
                    else f"{r['ratio']:.2f}x (vs {r['best_static']})"
                )
            table.add_row(f"{d:g} ms", *cells)
        console.print(table)


@user_errors
@writes_folder("out")
def compare_command(
    out: Path = typer.Option(..., help="Output folder: one run folder per cell and seed."),
    workloads: str = typer.Option("chat,mixed,long,bursty", help="Comma-separated workloads."),
    policies: str = typer.Option(
        "fixed-256,fixed-1024,full,sloweave", help="Comma-separated policies."
    ),
    tpot_slo: str = typer.Option("10,25,50", "--tpot-slo", help="Comma-separated TPOT SLOs, ms."),
    seeds: int = typer.Option(5, min=1, help="Seeds 0..N-1."),
    requests: int = typer.Option(2000, help="Requests per run."),
    rates: str = typer.Option(None, help="Override rates: WORKLOAD=REQ_PER_S,... "),
    truth: str = typer.Option("analytic", help="analytic[:...] or samples:PATH"),
    predictor: str = typer.Option("oracle", help="oracle or a cost table JSON."),
    kv_tokens: int = typer.Option(500_000, min=1, help="KV capacity M in tokens."),
    jobs: int = typer.Option(None, min=1, help="Worker processes [default: all cores]."),
    setting: str = typer.Option(
        None, help="FlowPrefill study: prefill|colocated (docs/flowprefill.md)."
    ),
    slo_classes: str = typer.Option(
        None, "--slo-classes", help="Stamp a workload's SLO classes on a trace, e.g. multislo."
    ),
    max_goodput: bool = typer.Option(
        False, "--max-goodput", help="FlowPrefill study: bisect each policy's max goodput."
    ),
    rate_range: str = typer.Option("1:400", help="Bracket LO:HI (req/s) for --max-goodput."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON list."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
) -> None:
    """Run policies x workloads x TPOT targets over seeds and print the SPEC 1 tables."""
    table_flags(allow_edited, strict)
    from servecal.sched.flowprefill.registry import is_flow_policy

    if setting or slo_classes or max_goodput or any(map(is_flow_policy, _split(policies))):
        from servecal.sched.flowprefill.commands import run_compare_command

        return run_compare_command(
            out=out, workloads=_split(workloads), policies=_split(policies), setting=setting,
            tpot_slos=_split(tpot_slo), seeds=seeds, requests=requests,
            rates=rates, truth=truth, predictor=predictor, kv_tokens=kv_tokens, jobs=jobs,
            slo_classes=slo_classes, max_goodput=max_goodput, rate_range=rate_range,
            as_json=as_json,
        )  # fmt: skip
    from rich.progress import Progress

    from servecal.costmodels.errors import InputError
    from servecal.sched.compare import ROW_KEYS, ratios, run_grid
    from servecal.sched.policies import parse_policy
    from servecal.sched.runfolder import write_json
    from servecal.sched.simulate import SimulationConfig, load_predictor, load_truth
    from servecal.sched.workloads import parse_workload

    names_w, names_p = _split(workloads), _split(policies)
    try:
        targets = [float(x) for x in _split(tpot_slo)]
    except ValueError:
        raise InputError(
            f"--tpot-slo {tpot_slo!r}: expected numbers in ms, e.g. 10,25,50"
        ) from None
    if not names_w or not names_p or not targets or min(targets) <= 0:
        raise InputError("need at least one workload, one policy and positive TPOT targets")
    for w in names_w:
        parse_workload(w)
    for p in names_p:
        parse_policy(p)
    load_predictor(predictor, load_truth(truth))
    rate_map = _rates(rates, names_w)
    try:
        base = SimulationConfig(
            workload=names_w[0],
            policy=names_p[0],
            tpot_slo_ms=targets[0],
            rate=rate_map[names_w[0]],
            n_requests=requests,
            seeds=tuple(range(seeds)),
            truth=truth,
            predictor=predictor,
            kv_capacity=kv_tokens,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    total = len(names_w) * len(names_p) * len(targets) * seeds
    from rich.console import Console

    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
        task = bar.add_task("compare", total=total)
        rows = run_grid(
            base, names_w, names_p, targets, rate_map, out, jobs, lambda: bar.advance(task)
        )
    ratio_rows = ratios(rows)
    write_json(
        out / "compare.json",
        {"config": {**base.describe(), "workloads": names_w, "policies": names_p,
                    "tpot_slos": targets, "rates": rate_map},
         "rows": rows, "ratios": ratio_rows},
    )  # fmt: skip
    if as_json:
        typer.echo(json.dumps([{k: r[k] for k in ROW_KEYS} for r in rows]))
        return
    _print_tables(rows, ratio_rows)
    typer.echo(f"run folders and compare.json: {out}")


def register(app: typer.Typer) -> None:
    app.command(
        "compare", help="Run policies x workloads x TPOT targets and print the SPEC 1 tables."
    )(compare_command)
