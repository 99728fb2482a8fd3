"""Does SLOWeave need no tuning under any plausible truth?

    nice -n 10 python benchmarks/robustness.py --out DIR [--seeds 3] [--requests 1000]
        [--truths device,spiky-3,...] [--workloads mixed,long] [--tpot-slo 10,25]
        [--variants region,slo,fixed] [--jobs 2]

For every truth of :data:`TRUTHS` (noise σ 2–10%, stalls 0–3% at 1.3–2×, context slopes
× 0 and × 3, a 256-row tile step, the default ``device`` truth, a replay of dense
samples, three replays of a coarse grid: :data:`COARSE`), each planned on a cost
table fitted on *other draws* of that truth (the ``fitted`` predictor: the calibration
seed's samples, never the truth itself; a coarse replay: the same grid's other
draws), and
every (workload, TPOT target) cell, it searches the maximum goodput of SLOWeave (each
``--variants`` value is its ``margin_control``) and of the best of
fixed-64/128/256/512/1024/2048, with the search ``servecal compare --max-goodput`` runs
(:class:`~servecal.sched.experiment.goodput.GoodputSearch`, bracket 1:200 expanding to
3,200, 2% tolerance, the same seeds for every policy), and prints SLOWeave / best fixed
per cell, the TPOT attainment at SLOWeave's own maximum, and the worst cell.

The best fixed chunk is found without searching every chunk in full: the likeliest two
are searched, then every other chunk is run once per seed at the current best's
maximum of that seed; a chunk that misses the target there at every seed has, by the
monotonicity every search assumes, a lower maximum at every seed and so a lower mean,
and is recorded as dominated; any other is searched in full. The best chunk's number
is therefore the one a full ``compare`` gives.

Every search (cell, policy, seed) is written to ``DIR/cache/`` as it ends, so an
interrupted run resumes where it stopped (``--seeds``/``--requests`` are part of the
key). ``DIR/robustness.json`` holds every cell; the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXED_CHUNKS = (64, 128, 256, 512, 1024, 2048)
#: The fixed chunks searched in full first, per TPOT target (the best ones on the
#: default truth: docs/results/2026-12-01-scheduling-max-goodput.md); the rest are
#: checked for dominance first.
FIRST = {10.0: (512, 256), 25.0: (1024, 2048)}
BRACKET = "1:200"
#: The ratio the issue asks SLOWeave to keep in every cell, and the TPOT attainment at
#: its own maximum.
RATIO_BAR = 0.98
TPOT_BAR = 0.90

#: The replayed truth: dense samples of this device variant (jitter and stalls of a
#: noisier host, steeper attention), drawn from their own seed.
REPLAY_SOURCE = "device:sigma=0.05,spike_prob=0.005,spike_lo=1.5,spike_hi=2,decode_attention=3.4592e-05,prefill_attention=5.3004e-07"  # noqa: E501
REPLAY_SEED = 31
REPLAY_REPEATS = 6
REPLAY_GRID = {
    "n_decode": (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256,
                 320, 384, 512),
    "chunk": (0, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256, 288,
              320, 384, 448, 512, 576, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072,
              3584, 4096, 5120, 6144, 8192, 12288, 16384),
    "ctx": (0, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384),
    "prefix": (0, 256, 1024, 2048, 4096, 8192, 16384),
}  # fmt: skip


#: Coarse-grid replays (issue 43, truth A and two variants): a user's own calibration,
#: a few values per axis. The truth replays one seed's draws at the nearest grid point
#: (a step function); the table is fitted (``fit_cost_table``, the margin it sets, as
#: ``servecal calibrate`` writes it) on other draws of the same grid, so it interpolates
#: smoothly where the truth steps. name → (source device truth, grid).
COARSE_REPEATS = 20
COARSE_TRUTH_SEED = 43  # the replayed draws
COARSE_TABLE_SEED = 4343  # the draws the table is fitted on
COARSE_6 = {
    "n_decode": (0, 1, 8, 32, 128, 512),
    "chunk": (0, 64, 256, 1024, 4096, 16384),
    "ctx": (128, 294, 676, 1552, 3566, 8192),  # 128–8192 in 6 geometric steps
    "prefix": (0, 1024, 4096),
}
#: Coarser still in context (3 values) and decodes (5); the chunk axis keeps 6 values:
#: with 4 (0, 128, 1024, 16384) the replay prices every chunk of 363–4,096 tokens at
#: 1,024's cost, a sweet spot of the replay, not of a device (docs/results/
#: 2026-12-04-robustness-coarse.md).
COARSE_3 = {
    "n_decode": (0, 1, 16, 128, 512),
    "chunk": (0, 64, 256, 1024, 4096, 16384),
    "ctx": (128, 1024, 8192),
    "prefix": (0, 1024, 4096),
}
COARSE = {
    "coarse-a": ("device:sigma=0.05,spike_prob=0.01,spike_lo=1.6,spike_hi=1.6", COARSE_6),
    "coarse-steep": (
        "device:sigma=0.05,spike_prob=0.01,spike_lo=1.6,spike_hi=1.6,"
        "decode_attention=3.4592e-05,prefill_attention=5.3004e-07",
        COARSE_6,
    ),
    "coarse-tile": (
        "device:sigma=0.05,spike_prob=0.01,spike_lo=1.6,spike_hi=1.6,tile=256",
        COARSE_3,
    ),
}


@dataclass(frozen=True)
class Truth:
    """One truth of the family: its name, ``--truth`` spec and what it stands for."""

    name: str
    spec: str
    summary: str


TRUTHS = (
    Truth("device", "device", "the default truth: A100 shape, σ 2.4%, stalls 0.12% at 2–3.9×"),
    Truth("smooth-2", "device:sigma=0.02,spike_prob=0", "σ 2%, no stalls"),
    Truth("jitter-10", "device:sigma=0.10,spike_prob=0", "σ 10%, no stalls"),
    Truth(
        "spike-1",
        "device:sigma=0.05,spike_prob=0.01,spike_lo=1.3,spike_hi=2",
        "σ 5%, 1% of iterations 1.3–2×",
    ),
    Truth(
        "spike-3",
        "device:sigma=0.05,spike_prob=0.03,spike_lo=1.3,spike_hi=2",
        "σ 5%, 3% of iterations 1.3–2×",
    ),
    Truth(
        "noisy-spiky",
        "device:sigma=0.10,spike_prob=0.03,spike_lo=1.3,spike_hi=2",
        "σ 10%, 3% of iterations 1.3–2×",
    ),
    Truth(
        "ctx-steep",
        "device:decode_attention=5.1888e-05,prefill_attention=7.9506e-07",
        "attention 3× steeper in context and prefix",
    ),
    Truth(
        "ctx-flat",
        "device:decode_attention=0,prefill_attention=0",
        "no context or prefix dependence",
    ),
    Truth("tile-256", "device:tile=256", "linear layers in 256-row tile steps"),
    Truth(
        "replay",
        "replay",
        "dense samples (σ 5%, 0.5% stalls 1.5–2×, attention 2×) replayed nearest-point",
    ),
    Truth(
        "coarse-a",
        "coarse:coarse-a",
        "truth A: σ 5%, 1% stalls ×1.6, 6 values per axis (prefix 3) replayed nearest-point",
    ),
    Truth(
        "coarse-steep",
        "coarse:coarse-steep",
        "truth A with attention 2× steeper, 6 values per axis replayed nearest-point",
    ),
    Truth(
        "coarse-tile",
        "coarse:coarse-tile",
        "truth A with 256-row tile steps; ctx 3 values, n_decode 5, replayed nearest-point",
    ),
)
BY_NAME = {t.name: t for t in TRUTHS}


# ---------------------------------------------------------------- the replayed truth
def replay_models(cache: Path) -> tuple[str, str]:
    """``(--truth, --predictor)`` of the replay: dense samples of :data:`REPLAY_SOURCE`
    (seed :data:`REPLAY_SEED`) and the ``fitted`` table of that source (its own
    calibration draws), written once under ``cache``."""
    import numpy as np

    from servecal.costmodels.samples import write_samples
    from servecal.sched.experiment.models import load_truth
    from servecal.sched.fitted_table import calibration_points, fitted_predictor

    folder = cache / "replay"
    samples, table = folder / "samples.parquet", folder / "table.json"
    if not (samples.is_file() and table.is_file()):
        folder.mkdir(parents=True, exist_ok=True)
        source = load_truth(REPLAY_SOURCE)
        rng = np.random.default_rng(np.random.SeedSequence(REPLAY_SEED))
        rows = source.draw(calibration_points(REPLAY_GRID), REPLAY_REPEATS, rng)
        provenance = {"source": "benchmarks/robustness.py replay", "truth": REPLAY_SOURCE,
                      "seed": REPLAY_SEED, "repeats": REPLAY_REPEATS}  # fmt: skip
        write_samples(rows, samples, provenance)
        fitted_predictor(source, "fitted").save(table)
    return f"samples:{samples}", f"table:{table}"


def coarse_models(name: str, cache: Path) -> tuple[str, str]:
    """``(--truth, --predictor)`` of the coarse replay ``name`` (:data:`COARSE`): its
    grid's draws from :data:`COARSE_TRUTH_SEED` replayed nearest-point, planned on the
    table fitted on draws of the same grid from :data:`COARSE_TABLE_SEED`."""
    from servecal.sched.coarse_replay import coarse_replay

    spec, grid = COARSE[name]
    return coarse_replay(
        spec, grid, cache / name, COARSE_TRUTH_SEED, COARSE_TABLE_SEED, COARSE_REPEATS
    )


def models_of(truth: Truth, cache: Path) -> tuple[str, str]:
    """``(--truth, --predictor)`` specs of ``truth``."""
    if truth.spec == "replay":
        return replay_models(cache)
    if truth.spec.startswith("coarse:"):
        return coarse_models(truth.spec.removeprefix("coarse:"), cache)
    return truth.spec, "fitted"


# ---------------------------------------------------------------- searches in a pool
@dataclass(frozen=True)
class Job:
    """One search (``rate`` None) or one probe at ``rate`` of a policy at one seed."""

    key: str
    spec: Any  # RunSpec
    seed: int
    rate: float | None = None


def run_jobs(
    jobs: Sequence[Job], pool: ProcessPoolExecutor, cache: Path, say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Run every job (searches probe by probe, all at once in ``pool``); each result is
    read from / written to ``cache/<key>.json``."""
    from servecal.sched.experiment.goodput import Bracket, GoodputSearch
    from servecal.sched.experiment.sweep import Task, execute, probe_record

    results: dict[str, dict[str, Any]] = {}
    searches: dict[str, GoodputSearch] = {}
    probes: dict[str, list[dict[str, Any]]] = {}
    pending: dict[Future, Job] = {}
    for job in jobs:
        path = cache / f"{job.key}.json"
        if path.is_file():
            results[job.key] = json.loads(path.read_text())
            continue
        if job.rate is None:
            searches[job.key] = GoodputSearch(Bracket.parse(BRACKET))
            probes[job.key] = []
            rate = searches[job.key].next_rate()
        else:
            rate = job.rate
        pending[pool.submit(execute, Task(job.spec.at_rate(rate), job.seed))] = job
    started = time.time()
    while pending:
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            job = pending.pop(future)
            summary = future.result()
            if job.rate is not None:
                _write(cache, job.key, {"probe": probe_record(job.rate, summary)}, results)
                continue
            search = searches[job.key]
            rate = search.next_rate()
            search.record(summary["attainment"])
            probes[job.key].append(probe_record(rate, summary))  # type: ignore[arg-type]
            following = search.next_rate()
            if following is None:
                found = search.result
                _write(cache, job.key, {"max_goodput": found.rate, "bound": found.bound,
                                        "probes": probes[job.key]}, results)  # fmt: skip
                say(f"  {job.key}: {found.text()} req/s ({time.time() - started:.0f} s)")
            else:
                task = Task(job.spec.at_rate(following), job.seed)
                pending[pool.submit(execute, task)] = job
    return results


def _write(cache: Path, key: str, doc: dict[str, Any], results: dict[str, Any]) -> None:
    from servecal.util.atomic import atomic_write_bytes

    path = cache / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())
    results[key] = doc


def at_max(search: dict[str, Any], key: str = "tpot_attainment") -> float | None:
    """``key`` measured by the probe at the search's maximum."""
    for probe in search["probes"]:
        if probe["rate"] == search["max_goodput"]:
            return probe.get(key)
    return None


# ---------------------------------------------------------------- one cell
def run_cell(
    truth: Truth,
    workload: str,
    tpot: float,
    args: argparse.Namespace,
    pool: ProcessPoolExecutor,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """SLOWeave (every variant) against the best fixed chunk in one cell."""
    from servecal.sched.experiment import RunSpec
    from servecal.sched.policies import PolicySpec

    cache_root = Path(args.out) / "cache"
    truth_spec, predictor = models_of(truth, cache_root)
    seeds = tuple(range(args.seeds))
    cell = f"{truth.name}/{workload}-{tpot:g}/s{args.seeds}-r{args.requests}"
    cache = cache_root / cell

    def spec(policy: str, options: dict[str, str] | None = None) -> Any:
        return RunSpec(workload, PolicySpec.parse(policy, options or {}), tpot, 1.0,
                       n_requests=args.requests, seeds=(0,), truth=truth_spec,
                       predictor=predictor)  # fmt: skip

    def searches(label: str, s: Any) -> list[Job]:
        return [Job(f"{label}/seed-{k}", s, k) for k in seeds]

    def per_seed(results: dict[str, Any], label: str) -> list[float]:
        return [results[f"{label}/seed-{k}"]["max_goodput"] for k in seeds]

    weave = {v: spec("sloweave", {"margin_control": v}) for v in args.variants}
    first = FIRST.get(tpot, (512, 1024))
    jobs = [j for v, s in weave.items() for j in searches(f"sloweave-{v}", s)]
    jobs += [j for c in first for j in searches(f"fixed-{c}", spec(f"fixed-{c}"))]
    say(f"{cell}: SLOWeave {', '.join(args.variants)}; fixed-{first[0]}, fixed-{first[1]}")
    results = run_jobs(jobs, pool, cache, say)
    fixed = {c: per_seed(results, f"fixed-{c}") for c in first}
    best = max(fixed, key=lambda c: sum(fixed[c]))
    dominated: dict[int, str] = {}
    for c in (c for c in FIXED_CHUNKS if c not in first):
        rates = per_seed(results, f"fixed-{best}")
        probes = [Job(f"fixed-{c}/at-fixed-{best}/seed-{k}", spec(f"fixed-{c}"), k, rates[k])
                  for k in seeds]  # fmt: skip
        got = run_jobs(probes, pool, cache, say)
        target = 0.9
        if all(got[j.key]["probe"]["attainment"] < target for j in probes):
            dominated[c] = f"fixed-{best}"
            continue
        results.update(run_jobs(searches(f"fixed-{c}", spec(f"fixed-{c}")), pool, cache, say))
        fixed[c] = per_seed(results, f"fixed-{c}")
        if sum(fixed[c]) > sum(fixed[best]):
            best = c
    best_mean = sum(fixed[best]) / len(seeds)
    out: dict[str, Any] = {
        "truth": truth.name,
        "truth_spec": truth_spec,
        "predictor": predictor,
        "workload": workload,
        "tpot_slo_ms": tpot,
        "seeds": list(seeds),
        "requests": args.requests,
        "best_fixed": f"fixed-{best}",
        "best_fixed_max_goodput": best_mean,
        "fixed": {f"fixed-{c}": sum(v) / len(seeds) for c, v in sorted(fixed.items())},
        "dominated": {f"fixed-{c}": by for c, by in sorted(dominated.items())},
        "sloweave": {},
    }
    for v in args.variants:
        label = f"sloweave-{v}"
        maxima = per_seed(results, label)
        tpots = [at_max(results[f"{label}/seed-{k}"]) for k in seeds]
        mean = sum(maxima) / len(seeds)
        out["sloweave"][v] = {
            "max_goodput": mean,
            "per_seed": maxima,
            "ratio": mean / best_mean if best_mean > 0 else float("nan"),
            "tpot_attainment_at_max": sum(t for t in tpots if t is not None) / len(seeds),
            "bounds": [results[f"{label}/seed-{k}"]["bound"] for k in seeds],
        }
    return out


# ---------------------------------------------------------------- report
def table(cells: list[dict[str, Any]], variants: Sequence[str]) -> str:
    """The cells as a Markdown table, the worst cell per variant below it."""
    head = "| truth | workload | TPOT | best fixed (req/s) | " + " | ".join(
        f"SLOWeave {v} (req/s, × best, TPOT att.)" for v in variants
    )
    lines = [head + " |", "|" + " --- |" * (4 + len(variants))]
    for c in cells:
        row = [c["truth"], c["workload"], f"{c['tpot_slo_ms']:g} ms",
               f"{c['best_fixed']} {c['best_fixed_max_goodput']:.1f}"]  # fmt: skip
        for v in variants:
            w = c["sloweave"][v]
            row.append(f"{w['max_goodput']:.1f}, {w['ratio']:.3f}×, "
                       f"{100 * w['tpot_attainment_at_max']:.1f}%")  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    for v in variants:
        worst = min(cells, key=lambda c: c["sloweave"][v]["ratio"])
        w = worst["sloweave"][v]
        low_tpot = min(c["sloweave"][v]["tpot_attainment_at_max"] for c in cells)
        ok = all(
            c["sloweave"][v]["ratio"] >= RATIO_BAR
            and c["sloweave"][v]["tpot_attainment_at_max"] >= TPOT_BAR
            for c in cells
        )
        lines.append(
            f"\nworst cell, SLOWeave {v}: {worst['truth']} {worst['workload']} "
            f"{worst['tpot_slo_ms']:g} ms: {w['ratio']:.3f}× {worst['best_fixed']} "
            f"({w['max_goodput']:.1f} vs {worst['best_fixed_max_goodput']:.1f} req/s); "
            f"lowest TPOT attainment at its max {100 * low_tpot:.1f}%; "
            f"every cell ≥ {RATIO_BAR}× and ≥ {TPOT_BAR:.0%}: {'yes' if ok else 'NO'}"
        )
    return "\n".join(lines)


def _names(text: str, known: Sequence[str], flag: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in known]
    if bad or not names:
        raise SystemExit(f"error: {flag} {text!r}: choose from {', '.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder (cache and JSON)")
    parser.add_argument("--truths", default=",".join(t.name for t in TRUTHS))
    parser.add_argument("--workloads", default="mixed,long")
    parser.add_argument("--tpot-slo", default="10,25")
    parser.add_argument(
        "--variants", default="region,slo,fixed", help="SLOWeave margin_control values"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.requests < 1 or args.jobs < 1:
        print("error: --seeds, --requests and --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        truths = [BY_NAME[n] for n in _names(args.truths, list(BY_NAME), "--truths")]
        workloads = _names(args.workloads, ["mixed", "long", "chat", "bursty"], "--workloads")
        args.variants = _names(args.variants, ["region", "slo", "fixed"], "--variants")
        tpots = [float(x) for x in args.tpot_slo.split(",")]
    except ValueError:
        print(f"error: --tpot-slo {args.tpot_slo!r}: expected numbers, e.g. 10,25", file=sys.stderr)
        return 2
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    from servecal.sched.experiment.models import load_predictor
    from servecal.sched.experiment.sweep import _init_worker

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load = os.getloadavg()[0]

    def say(text: str) -> None:
        print(text, flush=True)

    for truth in truths:  # fit every table here once (cached on disk for the workers)
        truth_spec, predictor = models_of(truth, out / "cache")
        load_predictor(predictor, truth_spec)
    from servecal.util.atomic import atomic_write_bytes

    cells: list[dict[str, Any]] = []

    def write() -> dict[str, Any]:  # after every cell: an interrupted run keeps its cells
        doc = {
            "command": "python benchmarks/robustness.py " + " ".join(argv or sys.argv[1:]),
            "wall_s": time.time() - started,
            "load_average_start": load,
            "load_average_end": os.getloadavg()[0],
            "truths": {t.name: t.summary for t in truths},
            "cells": cells,
        }
        atomic_write_bytes(out / "robustness.json", (json.dumps(doc, indent=1) + "\n").encode())
        return doc

    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init_worker) as pool:
        for truth in truths:
            for workload in workloads:
                for tpot in tpots:
                    cells.append(run_cell(truth, workload, tpot, args, pool, say))
                    doc = write()
    say(table(cells, args.variants))
    say(f"wall {doc['wall_s']:.0f} s, load average {load:.1f} → {doc['load_average_end']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
