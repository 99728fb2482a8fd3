"""Engine speed: SLOWeave's decision time, whole-engine iterations per second, and a
whole ``servecal simulate`` command (startup included).

Run: ``python benchmarks/engine.py [--repeats 2000] [--requests 2000] [--table-path-only]
[--table-path-baseline REV] [--instructions] [--baseline REV] [--table TABLE.json]
[--whole-run TRACE.csv PROFILE_DIR]``.

* ``--baseline REV``: the whole-engine case is also measured on the code of git
  revision ``REV`` (extracted to a temporary folder, run in a subprocess), alternating
  with this tree's, best of ``--runs`` each: the ratio says whether a change made the
  engine slower, measured in one run on one machine.
* ``--table TABLE.json``: the same engine case planned with SLOWeave-P50 on a cost
  table and on the analytic formula.
* Always (alone with ``--table-path-only``): the table path's own cost, SLOWeave-P50
  on the formula vs on the formula compiled into a cost table, the same plans, in
  fresh processes that interleave the two (the table path must be as fast as
  the formula); ``--table-path-baseline REV`` measures the same on revision ``REV``'s code,
  ``--instructions`` counts both paths' instructions and cache misses per run with
  valgrind's cachegrind.
* ``--whole-run TRACE PROFILE``: the whole-run case (best of ``--runs`` fresh processes;
  ``--whole-run-baseline REV`` times the same command on revision ``REV`` too).
  ``servecal import aiconfigurator PROFILE --model llama-3-8b``, ``servecal fit``,
  then the timed command
  ``servecal simulate --workload trace:TRACE --requests 2000 --seeds 1 --policy
  sloweave-p50 --truth samples:... --predictor TABLE --json`` in a fresh process
  (interpreter start, imports, loading, the run, the run folder): iterations per
  second of wall time and of the process's CPU time, and their ratio to Vidur
  0.0.26's published whole-run figure (~2,500 iterations/s on this kind of
  machine; Vidur itself is not run here). TRACE is the Azure LLM inference trace
  (conversation, 2023; AzurePublicDataset), PROFILE aiconfigurator's A100 vLLM 0.14
  tables.

Each figure is printed next to a *naive* SLOWeave measured in the same run: it
scans every ready request for the earliest deadline and calls the predictor's
public ``predict`` + ``margin`` at every probe of its own binary search, instead
of reading the engine's deadline heap and calling ``max_chunk`` once. Targets:
median decision ≤ 20 µs at 256 active requests; ≥ 50,000 simulated
iterations/s on the analytic truth. Numbers depend on the machine and its load:
throughput is given per second of wall time and per second of this process's CPU
time (the latter is what a busy shared machine does not take away), and the
ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from servecal.costmodels import AnalyticPredictor, largest_fitting
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies import SLOWeave
from servecal.sched.policies._common import room_for
from servecal.sched.request import Request
from servecal.sched.truth import AnalyticTruth


class NaiveSLOWeave:
    """The same decisions as :class:`SLOWeave` (default options), computed naively."""

    def __init__(self, c_max: int = 4096, q: float = 0.99) -> None:
        self.c_max, self.q = c_max, q

    def plan(self, view, predictor) -> Plan:
        live = view.next_prefill()
        if live is None:
            return DECODE_ONLY
        limit = min(self.c_max, room_for(view, live))
        ready = list(view.ready)
        if not ready:
            return Plan(prefill=((live.rid, limit),)) if limit > 0 else DECODE_ONLY
        deadline = min(r.last_token_ms + r.tpot_slo_ms for r in ready)  # O(n) scan
        budget = max(0.0, deadline - view.now_ms)
        n, ctx, prefix = len(ready), view.ctx_mean, live.prefilled

        def fits(c: int) -> bool:  # one model call per probe
            cost = predictor.predict(n, c, ctx, prefix, q=self.q)
            return cost + predictor.margin(n, c, ctx, prefix) <= budget

        c = largest_fitting(fits, limit)
        return Plan(prefill=((live.rid, c),), budget_ms=budget) if c > 0 else DECODE_ONLY


class _SetUp:
    """Set-up policy: prefill every request but ``late`` in one go, then decode."""

    def __init__(self, late: int) -> None:
        self.late = late

    def plan(self, view, predictor) -> Plan:
        chunks = tuple(
            (r.rid, r.remaining_prefill) for r in view.prefill_queue() if r.rid != self.late
        )
        return Plan(prefill=chunks) if chunks else DECODE_ONLY


def _state(active: int, seed: int = 0) -> Engine:
    """An engine with ``active`` decoding requests (heterogeneous D_i) and a long prompt
    waiting: the state SLOWeave decides in on every iteration of a loaded server.

    The SLOs (100/150/200 ms) leave room for a chunk even at 1024 decodes
    (T(1024, 0) = 57.6 ms), so every size runs the whole binary search.
    """
    rng = np.random.default_rng(seed)
    slos = rng.choice([100.0, 150.0, 200.0], size=active)
    reqs = [Request(i, 0.0, 16, 10**6, tpot_slo_ms=float(slos[i])) for i in range(active)]
    reqs.append(Request(active, 0.001, 50_000, 10, tpot_slo_ms=25.0))  # arrives during step 1
    eng = Engine(
        reqs,
        _SetUp(late=active),
        AnalyticPredictor(),
        AnalyticTruth().executor(rng),
        EngineConfig(kv_capacity=10**9),
    )
    eng.step()  # prefill all of them in one iteration
    eng.step()  # one decode; the long prompt has arrived and waits
    assert eng.view.n_decode == active and eng.view.next_prefill().rid == active
    return eng


def decision_us(policy, active: int, repeats: int) -> tuple[float, float]:
    """Median wall time of one ``plan`` call and mean CPU time per call, µs."""
    eng = _state(active)
    view, pred = eng.view, AnalyticPredictor()
    times = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        t0 = clock()
        policy.plan(view, pred)
        times.append(clock() - t0)
    c0 = time.process_time()
    for _ in range(repeats):
        policy.plan(view, pred)
    cpu = (time.process_time() - c0) / repeats * 1e6
    return statistics.median(times) / 1000.0, cpu


#: mixed's documented default rate (req/s), written out so that older revisions run it too
MIXED_RATE = 60.0
#: Vidur 0.0.26's whole-run iterations per second on the Azure conversation trace,
#: as published for this kind of machine (not measured by this script).
VIDUR_WHOLE_RUN_IT_S = 2500.0


def iterations_per_s(
    policy, requests: int, workload: str = "mixed", predictor=None, truth=None
) -> tuple[float, float, int]:
    """Simulated iterations per second of wall time and of this process's CPU time, for a
    whole run (frames excluded), and the number of iterations. Uses only the engine's
    constructor, ``step`` and ``view`` (the same on older revisions, see --baseline).
    ``truth`` defaults to the noiseless analytic formula, ``predictor`` to the analytic
    formula (so a change of truth alone changes only what the executor costs)."""
    from servecal.sched.workloads import generate

    reqs = generate(
        workload,
        MIXED_RATE,
        n_requests=requests,
        tpot_slo_ms=25.0,
        rng=np.random.default_rng(0),
    )
    eng = Engine(
        reqs,
        policy,
        predictor or AnalyticPredictor(),
        (truth or AnalyticTruth()).executor(np.random.default_rng(1)),
    )
    step = eng.step
    t0, c0 = time.perf_counter(), time.process_time()
    while step():
        pass
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = eng.view.iterations
    return n / wall, n / cpu, n


#: The grid the analytic formula is compiled onto for the table-path comparison: an
#: A100 profile's grid (``servecal import aiconfigurator``), reaching the workloads'
#: batch and context sizes.
FORMULA_AXES = {
    "n_decode": (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    "ctx": (0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    "prefix": (0, 1024, 4096, 16384),
    "chunk": (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
}


def formula_table():
    """The analytic formula compiled into a cost table on :data:`FORMULA_AXES`."""
    from servecal.costmodels.fit import compile_predictor

    return compile_predictor(AnalyticPredictor(), FORMULA_AXES)


def planner(plan_on: str):
    """The predictor a run plans on: ``formula`` (the analytic formula), ``compiled``
    (the formula compiled into a table, :func:`formula_table`), or a table file."""
    if plan_on == "formula":
        return AnalyticPredictor()
    if plan_on == "compiled":
        return formula_table()
    from servecal.costmodels import CostTable

    return CostTable.load(plan_on)


#: Runs per planner in one table-path worker, interleaved (table, formula, formula,
#: table, ...): a slow moment of a shared machine then hits both alike, where whole
#: processes back to back (as for --baseline) gave pair ratios of 0.5-1.5x here.
INTERLEAVED_RUNS = 8


def _plan_on_worker(plan_on: str, requests: int, counted_runs: int | None = None) -> None:
    """A table-path worker: :data:`INTERLEAVED_RUNS` SLOWeave-P50 runs planning on
    ``plan_on`` and as many on the formula, interleaved, each on a newly loaded
    predictor (a table's caches start empty, as in a new command: their filling is
    part of what planning on a table costs); JSON out: the best of each.

    With ``counted_runs`` (0 or 1, under :func:`instructions_per_run`'s cachegrind):
    two ``plan_on`` predictors loaded first, then that many runs, nothing printed."""
    from servecal.sched.policies import make_policy

    if counted_runs is not None:
        predictors = [planner(plan_on) for _ in range(2)]
        gc.collect()
        for predictor in predictors[:counted_runs]:
            iterations_per_s(make_policy("sloweave-p50"), requests, predictor=predictor)
        return
    best: dict[str, tuple[float, float, int]] = {}
    for k in range(INTERLEAVED_RUNS):
        for on in (plan_on, "formula") if k % 2 == 0 else ("formula", plan_on):
            predictor = planner(on)  # untimed: loading is not planning
            # nor is collecting what loading left: otherwise the run pays for the
            # garbage of building the table (~10 ms of a ~70 ms run), not for planning
            gc.collect()
            run = iterations_per_s(make_policy("sloweave-p50"), requests, predictor=predictor)
            best[on] = max(best.get(on, run), run)
    print(json.dumps([best[plan_on], best["formula"]]))


#: cachegrind's summary lines: instructions executed, level-1 instruction misses,
#: level-1 and last-level data misses
CACHEGRIND_COUNTS = {"I   refs:": "instructions", "I1  misses:": "I1 misses",
                     "D1  misses:": "D1 misses", "LLd misses:": "LL data misses"}  # fmt: skip


def _cachegrind(plan_on: str, requests: int, runs: int, env: dict[str, str]) -> dict[str, int]:
    """cachegrind's counts for one worker process doing ``runs`` runs (see
    :func:`_plan_on_worker`)."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null",
         sys.executable, __file__, "--plan-on-worker", plan_on, "--requests", str(requests),
         "--counted-runs", str(runs)],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    counts = {}
    for line in done.stderr.splitlines():
        text = line.split("==", 2)[-1].strip()
        for key, name in CACHEGRIND_COUNTS.items():
            if text.startswith(key):
                counts[name] = int(text[len(key) :].split()[0].replace(",", ""))
    return counts


def instructions_per_run(
    plan_on: str, requests: int, pythonpath: Path | None = None
) -> dict[str, int]:
    """What one SLOWeave-P50 run planning on ``plan_on`` executes, counted by valgrind's
    cachegrind (instructions, simulated cache misses): a process that loads two
    predictors and runs on one, less one that loads them and runs on none. Counts do
    not depend on what else the machine is doing (fixed hash seed; a different seed
    moved them by up to ~3% here), which wall time on a shared machine does (±20%)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    with ThreadPoolExecutor(2) as pool:  # the two processes at once: valgrind is slow
        base, one = pool.map(lambda n: _cachegrind(plan_on, requests, n, env), (0, 1))
    return {name: one[name] - base[name] for name in one}


def table_vs_formula(
    plan_on: str, requests: int, processes: int, pythonpath: Path | None = None
) -> None:
    """SLOWeave-P50 planning on ``plan_on`` (see :func:`planner`) vs on the formula:
    ``processes`` fresh worker processes, each interleaving the two
    (:func:`_plan_on_worker`); prints the best of each and the median of the
    processes' ratios. With ``pythonpath`` (a tree from :func:`_tree_at`) both run
    on that code."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # found before the editable install
    on_table, on_formula, ratios = [], [], []
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, __file__, "--plan-on-worker", plan_on, "--requests", str(requests)],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        table, formula = json.loads(out.stdout)
        on_table.append(table)
        on_formula.append(formula)
        ratios.append(table[1] / formula[1])
    for label, runs in (("cost table", on_table), ("formula", on_formula)):
        best = max(runs)
        print(f"  {label:<14} {best[0]:>14,.0f} {best[1]:>13,.0f} {best[2]:>11}  (best)")
    print(f"  median ratio {statistics.median(ratios):>30.2f}x  (CPU time; per process: "
          + ", ".join(f"{r:.2f}" for r in ratios) + ")")  # fmt: skip


def _tree_at(rev: str, into: Path) -> Path:
    """The ``servecal`` package of git revision ``rev``, laid out as installed."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(root), "archive", rev], capture_output=True)
    if archive.returncode:
        raise SystemExit(f"error: git archive {rev}: {archive.stderr.decode().strip()}")
    src = into / "src"
    src.mkdir()
    subprocess.run(["tar", "x", "-C", str(src)], input=archive.stdout, check=True)
    pkg = into / "pkg" / "servecal"
    shutil.copytree(src / "servecal", pkg)
    for stage in ("profiler", "costmodels", "sched", "reports"):
        shutil.copytree(src / stage, pkg / stage)
    return into / "pkg"


#: Whole-engine runs per --baseline worker process, best kept: one run (~0.1 s) is
#: too short to outlast a busy machine's hiccups, and the first run of a process pays
#: for warming its caches.
RUNS_PER_WORKER = 5


def _engine_in(pythonpath: Path | None, requests: int) -> tuple[float, float, int]:
    """The best of :data:`RUNS_PER_WORKER` whole-engine SLOWeave runs in a fresh process
    on the code at ``pythonpath`` (``None``: this tree)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # found before the editable install
    out = subprocess.run(
        [sys.executable, __file__, "--engine-only", "--requests", str(requests)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall, cpu, n = json.loads(out.stdout)
    return wall, cpu, n


#: Imported one after another in a fresh process by :func:`startup_floor`: the libraries
#: ``servecal simulate`` cannot run without, in the order the command pulls them in
#: (pydantic: typer >= 0.29 builds every command-line parameter with it; numba: a cost
#: table's compiled routines). pandas is not among them: a simulated run never imports
#: it (a test checks).
STARTUP_MODULES = ("numpy", "pyarrow", "pyarrow.parquet", "typer", "pydantic", "servecal.cli",
                   "numba")  # fmt: skip


def _cached_bytecode_env() -> dict[str, str]:
    """This environment, but writing ``.pyc`` files: an installed package has them, and
    without them (``PYTHONDONTWRITEBYTECODE`` is set on some machines) every run
    compiles servecal's ~70 modules from source again, ~0.12 s that no user pays."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def startup_floor() -> dict[str, float]:
    """CPU seconds of a bare interpreter, then of each of :data:`STARTUP_MODULES` imported
    in turn in one fresh process (each figure is what that import adds)."""
    probe = (
        "import json, time\n"
        "out = {}\n"
        f"for m in {STARTUP_MODULES!r}:\n"
        "    c = time.process_time()\n"
        "    try:\n"
        "        __import__(m)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    out[m] = time.process_time() - c\n"
        "print(json.dumps(out))"
    )
    env = _cached_bytecode_env()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    bare = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return {"interpreter": bare, **json.loads(done.stdout)}


def _timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one fresh process running ``command`` in ``cwd``.

    Never in the repository root: ``python -m servecal`` puts the working folder first
    on ``sys.path``, so there the root's ``servecal/`` would shadow ``PYTHONPATH`` and
    a baseline revision would run this tree's command-line code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        wall,
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        done.stdout,
    )


def whole_run(
    trace: str, profile: str, policy: str = "sloweave-p50", runs: int = 3,
    baseline: Path | None = None,
) -> dict:  # fmt: skip
    """Issue #20's whole-run case (see the module docstring): best of ``runs`` fresh
    processes, after one untimed run that leaves the ``.pyc`` files an install has.
    With ``baseline`` (a tree from :func:`_tree_at`) the same command on that code too,
    alternating with this tree's, on the same inputs (made by this tree)."""
    for path in (trace, profile):
        if not Path(path).exists():
            print(f"error: --whole-run: {path}: no such file or folder", file=sys.stderr)
            raise SystemExit(2)
    # absolute: the timed command runs in a scratch folder (outside the repository)
    trace, profile = str(Path(trace).resolve()), str(Path(profile).resolve())
    work = Path(tempfile.mkdtemp(prefix="servecal-bench-"))
    try:
        exe = [sys.executable, "-m", "servecal"]
        samples, table = work / "a100.parquet", work / "a100.json"
        subprocess.run([*exe, "import", "aiconfigurator", profile, "--model", "llama-3-8b",
                        "--out", str(samples)], check=True, capture_output=True)  # fmt: skip
        subprocess.run([*exe, "fit", str(samples), "--out", str(table)], check=True,
                       capture_output=True)  # fmt: skip
        command = [*exe, "simulate", "--workload", f"trace:{trace}", "--requests", "2000",
                   "--seeds", "1", "--policy", policy, "--truth", f"samples:{samples}",
                   "--predictor", str(table), "--tpot-slo", "100", "--out", str(work / "run"),
                   "--json"]  # fmt: skip
        envs = {"this tree": _cached_bytecode_env()}
        if baseline is not None:
            envs["baseline"] = {**envs["this tree"], "PYTHONPATH": str(baseline)}
        best: dict[str, dict] = {}
        for k in range(runs + 1):
            for label, env in envs.items() if k % 2 == 0 else reversed(envs.items()):
                shutil.rmtree(work / "run", ignore_errors=True)
                wall, cpu, out = _timed(command, env, cwd=work)
                if not k:  # run 0 only writes the bytecode caches
                    continue
                n = int(float(json.loads(out)["iterations"]))
                old = best.get(label)
                best[label] = {
                    "iterations": n,
                    "wall_s": min(wall, old["wall_s"]) if old else wall,
                    "cpu_s": min(cpu, old["cpu_s"]) if old else cpu,
                }
        return {"policy": policy, "runs": runs, **best["this tree"],
                "baseline": best.get("baseline")}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table_path(args: argparse.Namespace) -> None:
    """The table path's own cost, on this tree (and on ``--table-path-baseline``'s)."""
    processes = max(args.runs, 5)
    print(f"\nThe table path's own cost: SLOWeave-P50 on the analytic formula vs on the "
          f"formula compiled into a cost table (analytic truth; the same plans, so the "
          f"ratio is what planning on a table costs, its caches' filling included); "
          f"{processes} fresh processes, each the best of {INTERLEAVED_RUNS} runs of either, "
          "interleaved, each run on a newly compiled table")  # fmt: skip
    table_vs_formula("compiled", args.requests, processes)
    with tempfile.TemporaryDirectory() as tmp:
        rev = args.table_path_baseline
        old_tree = _tree_at(rev, Path(tmp)) if rev else None
        if old_tree is not None:
            print(f"  the same on revision {rev}:")
            table_vs_formula("compiled", args.requests, processes, pythonpath=old_tree)
        if not args.instructions:
            return
        if shutil.which("valgrind") is None:
            print("  --instructions: valgrind is not installed (apt install valgrind)")
            return
        print("  per run, counted by valgrind's cachegrind (one process each way; "
              "compiled table / formula):")  # fmt: skip
        for label, tree in (("this tree", None), (rev, old_tree)):
            if label is None:
                continue
            table = instructions_per_run("compiled", args.requests, tree)
            formula = instructions_per_run("formula", args.requests, tree)
            print(f"  {label:<12} " + ", ".join(
                f"{name} {table[name] / 1e6:,.1f}M / {formula[name] / 1e6:,.1f}M = "
                f"{table[name] / formula[name]:.3f}x" for name in table))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000, help="plan calls per size")
    parser.add_argument("--requests", type=int, default=2000, help="requests in the run")
    parser.add_argument("--runs", type=int, default=3, help="whole-engine runs (best kept)")
    parser.add_argument("--baseline", help="git revision to compare the whole engine with")
    parser.add_argument("--table", help="cost table JSON: SLOWeave-P50 on it vs the formula")
    parser.add_argument("--whole-run", nargs=2, metavar=("TRACE", "PROFILE"),
                        help="the whole servecal simulate case (see the module doc)")  # fmt: skip
    parser.add_argument("--whole-run-baseline", metavar="REV",
                        help="also time --whole-run's command on revision REV's code")  # fmt: skip
    parser.add_argument("--engine-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plan-on-worker", help=argparse.SUPPRESS)
    parser.add_argument("--counted-runs", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count the table path's instructions with valgrind",
    )
    parser.add_argument(
        "--table-path-only",
        action="store_true",
        help="only the table path's own cost (and --table-path-baseline)",
    )
    parser.add_argument(
        "--table-path-baseline",
        metavar="REV",
        help="also measure the table path's own cost on revision REV",
    )
    args = parser.parse_args()
    if args.plan_on_worker:
        _plan_on_worker(args.plan_on_worker, args.requests, args.counted_runs)
        return
    if args.engine_only:  # a --baseline worker: best of a few runs, JSON out
        runs = [iterations_per_s(SLOWeave(), args.requests) for _ in range(RUNS_PER_WORKER)]
        print(json.dumps([max(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]]))
        return

    if args.table_path_only:
        table_path(args)
        return
    print("SLOWeave decision time, µs per plan call (one prompt waiting):")
    print("median of wall time per call / mean CPU time per call")
    print(f"{'active':>8} {'heap+max_chunk':>16} {'naive':>16} {'naive/heap':>12}")
    for active in (16, 256, 1024):
        fast = decision_us(SLOWeave(), active, args.repeats)
        slow = decision_us(NaiveSLOWeave(), active, args.repeats)
        print(
            f"{active:>8} {fast[0]:>7.2f} / {fast[1]:>6.2f} {slow[0]:>7.2f} / {slow[1]:>6.2f}"
            f" {slow[0] / fast[0]:>5.1f}x / {slow[1] / fast[1]:>4.1f}x"
        )
    print()
    print(
        f"Whole engine, workload mixed, {args.requests} requests, TPOT 25 ms, analytic truth"
        f" (best of {args.runs} runs)"
    )
    print(f"{'':16} {'iter/s (wall)':>14} {'iter/s (CPU)':>13} {'iterations':>11}")
    # best of --runs runs each, interleaved: contention from other processes only ever
    # slows a run down, so the fastest run is the least disturbed one
    fast, slow = (0.0, 0.0, 0), (0.0, 0.0, 0)
    for _ in range(args.runs):
        fast = max(fast, iterations_per_s(SLOWeave(), args.requests))
        slow = max(slow, iterations_per_s(NaiveSLOWeave(), args.requests))
    print(f"  SLOWeave       {fast[0]:>14,.0f} {fast[1]:>13,.0f} {fast[2]:>11}")
    print(f"  naive SLOWeave {slow[0]:>14,.0f} {slow[1]:>13,.0f} {slow[2]:>11}")
    print(f"  ratio          {fast[0] / slow[0]:>13.2f}x {fast[1] / slow[1]:>12.2f}x")
    from servecal.sched.device_truth import DeviceTruth
    from servecal.sched.fitted_table import fitted_predictor

    device_truth = DeviceTruth.load()  # the device truth: context, steps, jitter, stalls
    table = fitted_predictor(device_truth)  # the table planned on by default with it
    device, fitted = (0.0, 0.0, 0), (0.0, 0.0, 0)
    for _ in range(args.runs):
        device = max(device, iterations_per_s(SLOWeave(), args.requests, truth=device_truth))
        fitted = max(
            fitted,
            iterations_per_s(SLOWeave(), args.requests, truth=device_truth, predictor=table),
        )
    print("SLOWeave on the device truth (its own stream of requests and iterations):")
    print(f"  analytic pred. {device[0]:>14,.0f} {device[1]:>13,.0f} {device[2]:>11}")
    print(f"  vs analytic    {device[0] / fast[0]:>13.2f}x {device[1] / fast[1]:>12.2f}x")
    print(f"  fitted table   {fitted[0]:>14,.0f} {fitted[1]:>13,.0f} {fitted[2]:>11}")
    if args.baseline:
        pairs = max(args.runs, 9)
        print(f"\nSLOWeave, this tree vs revision {args.baseline}: {pairs} pairs of fresh "
              f"processes (each the best of {RUNS_PER_WORKER} runs), back to back (order "
              "alternating); each pair's ratio, then their "
              "median (a busy machine slows a pair's two runs alike)")  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            old_tree = _tree_at(args.baseline, Path(tmp))
            here, there, wall_ratio, cpu_ratio = [], [], [], []
            for k in range(pairs):
                first, second = (None, old_tree) if k % 2 == 0 else (old_tree, None)
                a_run, b_run = _engine_in(first, args.requests), _engine_in(second, args.requests)
                new, old = (a_run, b_run) if first is None else (b_run, a_run)
                here.append(new)
                there.append(old)
                wall_ratio.append(new[0] / old[0])
                cpu_ratio.append(new[1] / old[1])
        for label, runs in (("this tree", here), (args.baseline, there)):
            best = max(runs)
            print(f"  {label:<14} {best[0]:>14,.0f} {best[1]:>13,.0f} {best[2]:>11}  (best)")
        print(f"  median ratio   {statistics.median(wall_ratio):>13.2f}x "
              f"{statistics.median(cpu_ratio):>12.2f}x")  # fmt: skip
    processes = max(args.runs, 5)
    if args.table:
        print(f"\nSLOWeave-P50 planning on the cost table vs on the analytic formula "
              f"(not the same plans: the table is another machine's); {processes} fresh "
              "processes")  # fmt: skip
        table_vs_formula(str(Path(args.table).resolve()), args.requests, processes)
    table_path(args)
    if args.whole_run:
        with tempfile.TemporaryDirectory() as tmp:
            rev = args.whole_run_baseline
            r = whole_run(*args.whole_run, runs=args.runs,
                          baseline=_tree_at(rev, Path(tmp)) if rev else None)  # fmt: skip
        print(f"\nWhole command: servecal simulate, Azure conversation trace, 2000 requests, "
              f"{r['policy']}, A100 table (samples truth), startup included "
              f"(best of {r['runs']} fresh processes)")  # fmt: skip
        print(f"  iterations {r['iterations']}, wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s")
        wall_its, cpu_its = r["iterations"] / r["wall_s"], r["iterations"] / r["cpu_s"]
        print(f"  {wall_its:,.0f} iterations/s (wall), {cpu_its:,.0f} iterations/s (CPU)")
        print(f"  vs Vidur 0.0.26's ~{VIDUR_WHOLE_RUN_IT_S:,.0f} iterations/s whole run "
              f"(published, not run here): {wall_its / VIDUR_WHOLE_RUN_IT_S:.1f}x "
              f"(wall), {cpu_its / VIDUR_WHOLE_RUN_IT_S:.1f}x (CPU)")  # fmt: skip
        if r["baseline"]:
            b = r["baseline"]
            print(f"  revision {args.whole_run_baseline}: iterations {b['iterations']}, wall "
                  f"{b['wall_s']:.2f} s, CPU {b['cpu_s']:.2f} s; this tree's CPU time is "
                  f"{r['cpu_s'] / b['cpu_s']:.2f}x its")  # fmt: skip
        floor = startup_floor()
        print("  its startup floor, CPU s (each import in turn, one fresh process): "
              + ", ".join(f"{m} {t:.3f}" for m, t in floor.items())
              + f"; total {sum(floor.values()):.3f}")  # fmt: skip
    load = os.getloadavg()[0]
    print(f"\nload average {load:.1f} on {os.cpu_count()} CPUs: wall figures shrink with it; "
          "CPU-time figures count only this process's time")  # fmt: skip


if __name__ == "__main__":
    main()
