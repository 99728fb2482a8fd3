"""``servecal compare``: policies × workloads × TPOT targets over seeds, side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    ALLOW_MISMATCH_HELP,
    STRICT_HELP,
    table_flags,
    user_errors,
    writes_folder,
)
from servecal.commands._runs import (
    FORCE_HELP,
    POWER_HELP,
    PREDICTOR_HELP,
    SPECULATIVE_HELP,
    TRUTH_HELP,
)

#: TPOT targets (ms) when none are given and some workload needs one (docs/spec.md §1's).
DEFAULT_TARGETS = (10.0, 25.0, 50.0)


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


def _target_folder(tpot_slo_ms: float | None) -> str:
    return "tpot-none" if tpot_slo_ms is None else f"tpot-{tpot_slo_ms:g}"


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
def compare_command(
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
    setting: str = typer.Option(
        "colocated", help="colocated, or prefill: prefill-only instances, good = TTFT met."
    ),
    seeds: int = typer.Option(5, min=1, help="Seeds 0..N-1."),
    requests: int = typer.Option(2000, help="Requests per run."),
    rates: str = typer.Option(None, help="Override rates: WORKLOAD=REQ_PER_S,... "),
    truth: str = typer.Option(None, help=TRUTH_HELP),
    predictor: str = typer.Option(None, help=PREDICTOR_HELP),
    power: str = typer.Option(None, help=POWER_HELP),
    kv_tokens: int = typer.Option(500_000, min=1, help="KV capacity M in tokens."),
    speculative: str = typer.Option(None, "--speculative", help=SPECULATIVE_HELP),
    jobs: int = typer.Option(
        None,
        min=1,
        help="Runs at once: worker processes, or Ray tasks with --pool ray "
        "[default: all cores / the cluster's CPUs].",
    ),
    pool: str = typer.Option(
        "local", "--pool", help="Where runs execute: local (this machine) or ray (a cluster)."
    ),
    address: str = typer.Option(
        None,
        "--address",
        help="With --pool ray: the cluster to join (auto, host:6379, ray://host:10001) "
        "[default: start a local Ray sized to this machine].",
    ),
    slo_classes: str = typer.Option(
        None, "--slo-classes", help="Stamp a workload's SLO classes on a trace, e.g. multislo."
    ),
    granularity: str = typer.Option(None, help="Operator driver: layer|attn-mlp|fine."),
    scheduling: str = typer.Option(None, help="Operator driver: event|iteration wake-ups."),
    max_goodput: bool = typer.Option(
        False, "--max-goodput", help="Search each (policy, seed)'s max goodput."
    ),
    rate_range: str = typer.Option(
        None, help="With --max-goodput: LO:HI[:CAP] req/s to start from [default: 1:200]."
    ),
    rate_tol: float = typer.Option(
        0.02, "--rate-tol", help="With --max-goodput: stop when the gap is below this share."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON list."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
    allow_edited: bool = typer.Option(False, "--allow-edited", help=ALLOW_EDITED_HELP),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Run policies x workloads x TPOT targets over seeds; print the tables and ratios."""
    table_flags(allow_edited, strict, allow_mismatch)
    from servecal.commands._runs import Bars, driver_options, make_spec, split_list
    from servecal.sched import experiment as ex
    from servecal.sched.experiment.rows import ratios, row, write_summary
    from servecal.sched.experiment.spec import needs_tpot_target
    from servecal.sched.policies.registry import DRIVER, PolicySpec
    from servecal.util.errors import InputError

    names_w, names_p = split_list(workloads), split_list(policies)
    if not names_w or not names_p:
        raise InputError("need at least one workload and one policy")
    if (rate_range is not None or rate_tol != 0.02) and not max_goodput:
        raise InputError("--rate-range/--rate-tol apply with --max-goodput")
    bracket = ex.Bracket.parse(rate_range or "1:200", rate_tol) if max_goodput else None
    try:
        targets: list[float | None] = [float(x) for x in split_list(tpot_slo)]
    except ValueError:
        raise InputError(
            f"--tpot-slo {tpot_slo!r}: expected numbers in ms, e.g. 10,25,50"
        ) from None
    if any(t is not None and not t > 0 for t in targets):
        raise InputError(f"--tpot-slo {tpot_slo!r}: targets must be > 0 ms")
    if not targets:
        needed = setting != "prefill" and any(needs_tpot_target(w, slo_classes) for w in names_w)
        targets = list(DEFAULT_TARGETS) if needed else [None]
    per_policy = _policy_options(opt, names_p)
    specs_p = [PolicySpec.parse(p, per_policy[p]) for p in names_p]
    rate_map = _rates(rates, names_w, setting)
    driver = driver_options(granularity, scheduling)
    shared = {"setting": setting, "requests": requests, "seeds": seeds, "truth": truth,
              "predictor": predictor, "kv_tokens": kv_tokens,
              "slo_classes": slo_classes, "power": power,
              "speculative": speculative}  # fmt: skip
    specs = []
    for target in targets:
        for w in names_w:
            for p in specs_p:
                backend = ex.choose_backend(p, setting)
                on_driver = driver if backend == DRIVER else None
                spec = make_spec(workload=w, policy=p, tpot_slo=target, rate=rate_map[w],
                                 backend=backend, driver=on_driver, **shared)  # fmt: skip
                ex.check(spec, searching=max_goodput)
                specs.append(spec)
    if driver is not None and not any(s.backend == DRIVER for s in specs):
        raise InputError(
            "--granularity/--scheduling apply to the operator driver; no policy runs there"
        )
    folders = [out / s.workload / s.policy.label / _target_folder(s.tpot_slo_ms) for s in specs]
    total = None if max_goodput else sum(len(s.seeds) for s in specs)
    with ex.open_pool(pool, address, jobs) as executor, Bars(quiet=as_json) as bars:
        outcomes = ex.sweep(
            specs,
            folders=folders,
            goodput=bracket,
            jobs=jobs,
            pool=executor,
            on_progress=bars.sweep("compare", total),
            force=force,
        )
    rows = [row(o) for o in outcomes]
    ratio_rows = ratios(rows)
    write_summary(
        out / "compare.json",
        specs,
        {
            "rate_range": rate_range if max_goodput else None,
            "rate_tol": rate_tol if max_goodput else None,
            "rows": rows,
            "ratios": ratio_rows,
        },
    )
    if as_json:
        typer.echo(json.dumps(rows, default=float))
        return
    _print_tables(rows, ratio_rows, max_goodput)
    typer.echo(f"run folders and compare.json: {out}")


def _print_tables(rows: list[dict[str, Any]], ratio_rows: list[dict[str, Any]], mg: bool) -> None:
    from servecal.commands._runs import fmt, goodput_text, print_table
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
        lines = []
        for r in cell:
            att = None if r["attainment"] is None else 100 * r["attainment"]
            rate = "trace" if r["rate"] is None else f"{r['rate']:g}/s"
            line = [f"{r['workload']} @ {rate} / {r['policy']}", r["backend"], fmt(r["goodput"]),
                    fmt(att, 3), fmt(r["p99_ttft_ms"]), fmt(r["p99_tpot_ms"])]  # fmt: skip
            if mg:
                line.append(goodput_text(r))
            if driver:
                line += [fmt(r.get(k)) for k in ("wakeups", "parked_batches", "p99_blocking_ms")]
            lines.append(line)
        good = "TTFT" if setting == "prefill" else "TTFT and TPOT"
        head = "" if target is None else f"TPOT SLO {target:g} ms · "
        title = f"{head}{setting} · means over seeds (good = meets {good}) · {models}"
        print_table(title, columns, lines)
    if ratio_rows:
        _print_ratios(ratio_rows, rows, models)


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
