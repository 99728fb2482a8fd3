"""``servecal compare``: policies × workloads × TPOT targets over seeds, side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import user_errors, writes_folder
from servecal.commands._run_options import RunOptions, with_run_options


def _rates(text: str | None, workloads: list[str], setting: str) -> dict[str, float | None]:
    from servecal.commands._runs import split_list
    from servecal.sched.experiment import default_rate
    from servecal.util.errors import InputError

    rates: dict[str, float | None] = {w: default_rate(w, setting) for w in workloads}
    for item in split_list(text):
        name, _, value = item.rpartition("=")
        try:
            rate = float(value)
        except ValueError:
            raise InputError(f"--rates {item!r}: expected WORKLOAD=REQ_PER_S") from None
        if name not in rates or not rate > 0:
            raise InputError(f"--rates {item!r}: unknown workload or non-positive rate")
        rates[name] = rate
    return rates


def _policy_options(opts: list[str], policies: list[str]) -> dict[str, dict[str, str]]:
    """``--opt POLICY.KEY=VALUE`` (``KEY=VALUE`` when only one policy is compared)."""
    from servecal.sched.policies.options import split_assignments
    from servecal.util.errors import InputError

    per: dict[str, dict[str, str]] = {p: {} for p in policies}
    for key, value in split_assignments(opts).items():
        name, dot, option = key.rpartition(".")
        if not dot and len(policies) == 1:
            name, option = policies[0], key
        if name not in per:
            raise InputError(
                f"--opt {key}={value}: expected POLICY.KEY=VALUE with POLICY one of the "
                f"compared policies ({', '.join(policies)})"
            )
        per[name][option] = value
    return per


@user_errors
@writes_folder("out")
@with_run_options
def compare_command(
    run: RunOptions,
    out: Path = typer.Option(..., help="Output folder: one run folder per cell and seed."),
    workloads: str = typer.Option("chat,mixed,long,bursty", help="Comma-separated workloads."),
    policies: str = typer.Option(
        "fixed-256,fixed-1024,full,sloweave",
        help="Comma-separated built-in names (servecal policies) or MODULE:CLASS.",
    ),
    opt: list[str] = typer.Option(
        [], "--opt", help="A policy option POLICY.KEY=VALUE (repeatable)."
    ),
    tpot_slo: str = typer.Option(
        None, "--tpot-slo", help="Comma-separated TPOT SLOs, ms [default: 10,25,50 if needed]."
    ),
    rates: str = typer.Option(None, help="Override rates: WORKLOAD=REQ_PER_S,... "),
    pool: str = typer.Option(
        "local", "--pool", help="Where runs execute: local (this machine) or ray (a cluster)."
    ),
    address: str = typer.Option(
        None,
        "--address",
        help="With --pool ray: the cluster to join (auto, host:6379, ray://host:10001) "
        "[default: start a local Ray sized to this machine].",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON list."),
) -> None:
    """Run policies x workloads x TPOT targets over seeds; print the tables and ratios."""
    from servecal.commands._runs import Bars, split_list
    from servecal.sched import experiment as ex
    from servecal.sched.experiment.rows import ratios, row, write_summary
    from servecal.sched.policies.registry import PolicySpec

    names_w, names_p = split_list(workloads), split_list(policies)
    bracket = run.bracket()
    per_policy = _policy_options(opt, names_p)
    study = ex.Study(
        workloads=tuple(names_w),
        policies=tuple(PolicySpec.parse(p, per_policy[p]) for p in names_p),
        targets=_targets(tpot_slo),
        rates=_rates(rates, names_w, run.setting),
        shared=run.spec_fields(),
        driver=run.driver(),
    )
    specs = ex.study_specs(study, searching=run.max_goodput)
    total = None if run.max_goodput else sum(len(s.seeds) for s in specs)
    with ex.open_pool(pool, address, run.jobs) as executor, Bars(quiet=as_json) as bars:
        outcomes = ex.sweep(
            specs,
            folders=ex.study_folders(out, specs),
            goodput=bracket,
            jobs=run.jobs,
            pool=executor,
            on_progress=bars.sweep("compare", total),
            force=run.force,
        )
    rows = [row(o) for o in outcomes]
    ratio_rows = ratios(rows)
    summary = {"rate_range": run.rate_range if run.max_goodput else None,
               "rate_tol": run.rate_tol if run.max_goodput else None,
               "rows": rows, "ratios": ratio_rows}  # fmt: skip
    write_summary(out / "compare.json", specs, summary)
    if as_json:
        typer.echo(json.dumps(rows, default=float))
        return
    _print_tables(rows, ratio_rows, run.max_goodput)


def _targets(text: str | None) -> tuple[float | None, ...]:
    """``--tpot-slo 10,25,50`` in ms (empty: the study's defaults)."""
    from servecal.commands._runs import split_list
    from servecal.util.errors import InputError

    try:
        targets = tuple(float(x) for x in split_list(text))
    except ValueError:
        raise InputError(f"--tpot-slo {text!r}: expected numbers in ms, e.g. 10,25,50") from None
    if any(not t > 0 for t in targets):
        raise InputError(f"--tpot-slo {text!r}: targets must be > 0 ms")
    return targets


def _print_tables(rows: list[dict[str, Any]], ratio_rows: list[dict[str, Any]], mg: bool) -> None:
    from servecal.commands._runs import print_table
    from servecal.sched.experiment.models import models_label

    driver = any("wakeups" in r for r in rows)
    columns = ["workload / policy", "backend", "goodput req/s", "attainment %", "P99 TTFT ms",
               "P99 TPOT ms"]  # fmt: skip
    if mg:
        columns.append("max goodput req/s")
    if driver:
        columns += ["wake-ups", "parked batches", "P99 blocking ms"]
    models = " · ".join(dict.fromkeys(models_label(r["truth"], r["predictor"]) for r in rows))
    for setting, target in dict.fromkeys((r["setting"], r["tpot_slo"]) for r in rows):
        cell = [r for r in rows if (r["setting"], r["tpot_slo"]) == (setting, target)]
        lines = [_table_line(r, mg, driver) for r in cell]
        good = "TTFT" if setting == "prefill" else "TTFT and TPOT"
        head = "" if target is None else f"TPOT SLO {target:g} ms · "
        title = f"{head}{setting} · means over seeds (good = meets {good}) · {models}"
        print_table(title, columns, lines)
    if ratio_rows:
        _print_ratios(ratio_rows, rows, models)


def _table_line(r: dict[str, Any], mg: bool, driver: bool) -> list[str]:
    """One row of a cell's table (max goodput and the driver's columns when shown)."""
    from servecal.commands._runs import fmt, goodput_text

    att = None if r["attainment"] is None else 100 * r["attainment"]
    rate = "trace" if r["rate"] is None else f"{r['rate']:g}/s"
    line = [f"{r['workload']} @ {rate} / {r['policy']}", r["backend"], fmt(r["goodput"]),
            fmt(att, 3), fmt(r["p99_ttft_ms"]), fmt(r["p99_tpot_ms"])]  # fmt: skip
    if mg:
        line.append(goodput_text(r))
    if driver:
        line += [fmt(r.get(k)) for k in ("wakeups", "parked_batches", "p99_blocking_ms")]
    return line


def _print_ratios(
    ratio_rows: list[dict[str, Any]], rows: list[dict[str, Any]], models: str
) -> None:
    """Each adaptive policy beside the best static baseline of its cell, named."""
    from servecal.commands._runs import fmt, goodput_text, print_table
    from servecal.sched.experiment.rows import ratio_text

    searched = ratio_rows[0]["metric"] == "max_goodput"
    by_key = {(r["setting"], r["tpot_slo"], r["workload"], r["policy"]): r for r in rows}
    lines = []
    for r in ratio_rows:
        cell = (r["setting"], r["tpot_slo"], r["workload"])
        mine, best = by_key[(*cell, r["policy"])], by_key[(*cell, r["best_baseline"])]
        value = goodput_text(mine) if searched else fmt(r["value"])
        base = goodput_text(best) if searched else fmt(r["best_baseline_value"])
        seeds = r.get("ratio_per_seed") or []
        spread = [x for x in seeds if x is not None]
        low = f"{min(spread):.3f}x" if spread else "-"
        lines.append([r["workload"], fmt(r["tpot_slo"]), r["policy"], value, r["best_baseline"],
                      base, ratio_text(r), low])  # fmt: skip
    metric = "max goodput" if searched else "goodput at the offered rate"
    print_table(
        f"{metric}: each policy / the best static baseline of its cell · {models}",
        ["workload", "TPOT SLO ms", "policy", f"{metric} req/s", "best baseline",
         "its req/s", "ratio", "lowest seed"],
        lines,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("compare", help="Run policies x workloads x TPOT targets side by side.")(
        compare_command
    )
