"""What ``servecal simulate`` / ``servecal compare`` do for the FlowPrefill study
(``--setting prefill|colocated`` or a FlowPrefill-study policy name).

The command modules parse the flags and call :func:`simulate_study` or
:func:`compare_study`; everything else (runs, run folders, tables, JSON) is here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from servecal.costmodels.errors import InputError
from servecal.sched.flowprefill.run import (
    FlowConfig,
    max_goodput_of,
    run_seed,
    simulate_flow,
    summarize_flow,
    validate,
)
from servecal.sched.simulate import parse_range

#: Keys of ``simulate --json`` (the engine's, plus FlowPrefill's counters).
SIMULATE_KEYS = (
    "goodput",
    "attainment",
    "p99_ttft_ms",
    "mean_ttft_ms",
    "p99_tpot_ms",
    "max_goodput",
    "iterations",
    "decision_us_median",
    "wakeups",
    "parks",
    "parked_batches",
    "p99_blocking_ms",
    "max_operator_ms",
    "by_class",
)

#: Keys of each row of ``compare --json``.
COMPARE_KEYS = (
    "policy",
    "setting",
    "rate",
    "goodput",
    "attainment",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "wakeups",
    "parks",
    "p99_blocking_ms",
    "max_operator_ms",
    "max_goodput",
    "max_goodput_std",
)


def make_config(**kwargs: Any) -> FlowConfig:
    """A checked :class:`FlowConfig`; bad values → :class:`InputError`."""
    try:
        config = FlowConfig(**kwargs)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    validate(config)
    return config


def _rate(rate: float | None) -> str:
    return "trace times" if rate is None else f"{rate:g} req/s"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items() if not isinstance(v, dict))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def simulate_study(
    config: FlowConfig,
    out: Path,
    max_goodput: bool,
    rate_range: tuple[float, float],
    as_json: bool,
) -> None:
    """Run ``config`` over its seeds, write run folders and ``summary.json``, print."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from servecal.sched.runfolder import write_json

    bracket = rate_range if max_goodput else None
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
        task = bar.add_task(f"{config.policy} on {config.workload} ({config.setting})", total=None)
        means = simulate_flow(config, str(out), bracket, on_run=lambda: bar.advance(task))
    write_json(out / "summary.json", {"config": config.describe(), "mean_over_seeds": means})
    result = {k: means.get(k) for k in SIMULATE_KEYS if k != "max_goodput" or max_goodput}
    if as_json:
        print(json.dumps(result, default=float))
        return
    good = "TTFT" if config.setting == "prefill" else "TTFT and TPOT"
    table = Table(
        title=f"{config.policy} · {config.workload} · {config.setting} setting · "
        f"{_rate(config.rate)} · {len(config.seeds)} seeds (good = meets {good})"
    )
    table.add_column("metric")
    table.add_column("mean over seeds", justify="right")
    for key, value in result.items():
        if key == "by_class" and isinstance(value, dict):
            for name, cls in value.items():
                att, ttft = _fmt(cls.get("attainment")), _fmt(cls.get("p99_ttft_ms"))
                table.add_row(f"{name}: attainment / P99 TTFT ms", f"{att} / {ttft}")
            continue
        table.add_row(key, _fmt(value))
    Console().print(table)
    print(f"run folders: {out}/seed-*/")


def _task(config: FlowConfig, seed: int, bracket: tuple[float, float] | None, folder: str | None):
    """One (policy, seed): the run at the configured rate, then its max goodput."""
    run = run_seed(config, seed)
    summary = summarize_flow(config, run)
    if folder is not None:
        from servecal.sched.runfolder import write_run

        write_run(folder, run, {**config.describe(), "seed": seed}, summary, {"seed": seed})
    if bracket is not None:
        summary["max_goodput"] = max_goodput_of(replace(config, seeds=(seed,)), bracket)
    return summary


def compare_study(
    base: FlowConfig,
    policies: Sequence[str],
    out: Path,
    max_goodput: bool,
    rate_range: tuple[float, float],
    jobs: int | None,
    as_json: bool,
) -> list[dict[str, Any]]:
    """Every policy × seed (in a process pool); max goodput per seed when asked, then
    means over seeds and FlowPrefill's ratio to every other policy."""
    from rich.console import Console
    from rich.progress import Progress

    from servecal.sched.metrics import mean_over_seeds
    from servecal.sched.runfolder import write_json

    configs = {p: make_config(**{**base.describe(), "policy": p, "seeds": base.seeds})
               for p in policies}  # fmt: skip
    bracket = rate_range if max_goodput else None
    per: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    workers = max(1, min(jobs or min(4, os.cpu_count() or 1), len(policies) * len(base.seeds)))
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=as_json or not err.is_terminal) as bar:
        task = bar.add_task("compare", total=len(policies) * len(base.seeds))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {
                pool.submit(
                    _task, configs[p], s, bracket,
                    str(out / p / f"seed-{s}"),
                ): p
                for p in policies
                for s in base.seeds
            }  # fmt: skip
            for future in as_completed(futures):
                per[futures[future]].append(future.result())
                bar.advance(task)
    rows = []
    for p in policies:
        mean = mean_over_seeds(per[p])
        row = {"policy": p, "setting": base.setting, "rate": base.rate}
        for key in COMPARE_KEYS[3:]:
            row[key] = mean.get(key)
        row["attainment_std"] = mean.get("attainment_std")
        if max_goodput:
            row["max_goodput_per_seed"] = [s["max_goodput"] for s in per[p]]
        rows.append(row)
    ratios = goodput_ratios(rows) if max_goodput else []
    write_json(
        out / "compare.json",
        {"config": {**base.describe(), "policies": list(policies), "rate_range": rate_range},
         "rows": rows, "ratios": ratios},
    )  # fmt: skip
    if as_json:
        print(json.dumps([{k: r.get(k) for k in COMPARE_KEYS} for r in rows], default=float))
    else:
        _print(base, rows, ratios)
        print(f"run folders and compare.json: {out}")
    return rows


def goodput_ratios(rows: Sequence[dict[str, Any]], policy: str = "flowprefill") -> list[dict]:
    """``policy``'s mean max goodput over each other policy's (None if it has 0)."""
    mine = next((r for r in rows if r["policy"] == policy), None)
    if mine is None:
        return []
    out = []
    for r in rows:
        if r is mine:
            continue
        base = r.get("max_goodput") or 0.0
        ratio = (mine["max_goodput"] / base) if base > 0 else None
        out.append({"baseline": r["policy"], "max_goodput": base, "ratio": ratio})
    return out


def _print(base: FlowConfig, rows: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    good = "TTFT" if base.setting == "prefill" else "TTFT and TPOT"
    table = Table(
        title=f"{base.workload} · {base.setting} setting · {_rate(base.rate)} · "
        f"{len(base.seeds)} seeds (means; good = meets {good})"
    )
    for col in ("policy", "max goodput req/s", "attainment %", "P99 TTFT ms", "P99 TPOT ms",
                "wake-ups", "parks", "P99 blocking ms", "longest op ms"):  # fmt: skip
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        mg = (
            "-"
            if r["max_goodput"] is None
            else f"{r['max_goodput']:.1f} ± {r['max_goodput_std']:.1f}"
        )
        att = None if r["attainment"] is None else 100 * r["attainment"]
        table.add_row(
            r["policy"], mg, _fmt(att), _fmt(r["p99_ttft_ms"]), _fmt(r["p99_tpot_ms"]),
            _fmt(r["wakeups"]), _fmt(r["parks"]), _fmt(r["p99_blocking_ms"]),
            _fmt(r["max_operator_ms"]),
        )  # fmt: skip
    console = Console()
    console.print(table)
    if ratios:
        t = Table(title="FlowPrefill max goodput / baseline max goodput (means over seeds)")
        t.add_column("baseline")
        t.add_column("its max goodput", justify="right")
        t.add_column("ratio", justify="right")
        for r in ratios:
            t.add_row(r["baseline"], f"{r['max_goodput']:.1f}",
                      "-" if r["ratio"] is None else f"{r['ratio']:.2f}x")  # fmt: skip
        console.print(t)


def run_simulate_command(
    *,
    workload: str,
    policy: str,
    setting: str | None,
    out: Path,
    rate: float | None,
    seeds: int,
    requests: int,
    truth: str,
    predictor: str,
    kv_tokens: int,
    max_goodput: bool,
    rate_range: str,
    slo_classes: str | None,
    granularity: str,
    scheduling: str,
    tpot_slo: float,
    as_json: bool,
) -> None:
    """``servecal simulate`` with ``--setting`` (or a FlowPrefill-study policy)."""
    from servecal.sched.flowprefill.run import default_rate

    setting = setting or "prefill"
    config = make_config(
        workload=workload,
        policy=policy,
        setting=setting,
        rate=rate if rate is not None else default_rate(workload, setting),
        n_requests=requests,
        seeds=tuple(range(seeds)),
        truth=truth,
        predictor=predictor,
        kv_capacity=kv_tokens,
        granularity=granularity,
        mode=scheduling,
        slo_classes=slo_classes,
        tpot_slo_ms=tpot_slo,
    )
    simulate_study(config, out, max_goodput, parse_range(rate_range), as_json)


def run_compare_command(
    *,
    out: Path,
    workloads: Sequence[str],
    policies: Sequence[str],
    setting: str | None,
    tpot_slos: Sequence[str],
    seeds: int,
    requests: int,
    rates: str | None,
    truth: str,
    predictor: str,
    kv_tokens: int,
    jobs: int | None,
    slo_classes: str | None,
    max_goodput: bool,
    rate_range: str,
    as_json: bool,
) -> None:
    """``servecal compare`` with ``--setting``: one workload, every policy, per seed."""
    from servecal.sched.flowprefill.registry import is_flow_policy
    from servecal.sched.flowprefill.run import default_rate

    if setting is None and slo_classes is None and not any(map(is_flow_policy, policies)):
        raise InputError("--max-goodput in compare is for the FlowPrefill study: add --setting")
    if len(workloads) != 1:
        raise InputError("--setting compares one workload at a time, e.g. --workloads multislo")
    workload = workloads[0]
    setting = setting or "prefill"
    try:
        tpot_slo_ms = float(tpot_slos[0])
    except (ValueError, IndexError):
        raise InputError(f"--tpot-slo {','.join(tpot_slos)!r}: expected a number in ms") from None
    if not policies:
        raise InputError("--policies: give at least one policy")
    rate = None
    for item in filter(None, (x.strip() for x in (rates or "").split(","))):
        name, _, value = item.rpartition("=")
        try:
            rate = float(value) if name == workload else rate
        except ValueError:
            raise InputError(f"--rates {item!r}: expected WORKLOAD=REQ_PER_S") from None
    base = make_config(
        workload=workload,
        policy=policies[0],
        setting=setting,
        rate=rate if rate is not None else default_rate(workload, setting),
        n_requests=requests,
        seeds=tuple(range(seeds)),
        truth=truth,
        predictor=predictor,
        kv_capacity=kv_tokens,
        slo_classes=slo_classes,
        tpot_slo_ms=tpot_slo_ms,
    )
    compare_study(base, policies, out, max_goodput, parse_range(rate_range), jobs, as_json)
