"""Many runs: ``sweep(specs, ...)`` → the means over seeds of every spec.

The sweep owns what every study would otherwise repeat: the task pool, run folders, means
over seeds, the max-goodput searches and progress callbacks. A *task* is one
``(spec, seed)`` run (written as a run folder) or one max-goodput probe (not
written); :func:`execute` runs one and returns its summary.

Where tasks execute is pluggable: pass any :class:`concurrent.futures.Executor` as
``pool=`` ("pool", because an *executor* in this project is what runs an
iteration). By default one task runs here, in this process, and several go to a
local process pool of ``jobs`` workers; :func:`open_pool` names the choices a
command offers (``local``, or ``ray``: one Ray task per run, on a cluster). Every
task is a pure function of ``(spec, seed)``, so the numbers do not depend on where
or in which order tasks run.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from servecal.plugins import Registry
from servecal.sched.experiment.goodput import ABOVE_CAP, MEASURED, Bracket, GoodputSearch
from servecal.sched.experiment.run import STREAMS, RunProgress, run, summarize
from servecal.sched.experiment.spec import RunSpec
from servecal.util.errors import InputError


@dataclass(frozen=True)
class Task:
    """One run: ``spec`` with ``seed``; ``folder``: write its run folder there, stamped
    with ``invocation`` (the id of the command writing it)."""

    spec: RunSpec
    seed: int
    folder: str | None = None
    invocation: str | None = None


def execute(task: Task, on_progress: RunProgress | None = None) -> dict[str, Any]:
    """Run one task, write its run folder if it has one, return its summary."""
    global _running
    if _interrupted:  # a pool worker that saw Ctrl-C starts nothing more
        raise KeyboardInterrupt
    _running = True
    try:
        beside = None if task.folder is None else str(Path(task.folder).parent)
        result = run(task.spec, task.seed, on_progress, stream_dir=beside)
        summary = summarize(task.spec, result)
        if task.folder is not None:
            from servecal.sched.runfolder import as_recorded, write_run

            write_run(task.folder, result, run_config(task), summary,
                      {"seed": task.seed, "streams": STREAMS}, task.invocation)  # fmt: skip
            return as_recorded(summary)  # a resumed run's summary reads the same
        return summary
    finally:
        _running = False


def _seed_folder(root: Path | None, seed: int) -> str | None:
    return None if root is None else str(root / f"seed-{seed}")


def run_config(task: Task) -> dict[str, Any]:
    """What ``run.json`` records as the run's ``config`` (what resuming compares): the
    spec, the seed, and the SHA-256 of every file the spec names (a table refitted at
    the same path is another run)."""
    config = {**task.spec.describe(), "seed": task.seed}
    files = input_files(task.spec)
    if files:
        config["input_sha256"] = {f: _file_digest(f) for f in files}
    return config


def input_files(spec: RunSpec) -> list[str]:
    """The files a spec's results depend on: a predictor table, a truth's samples, a
    workload's trace; for a fleet (a cluster's ``replicas``, a disaggregated one's
    ``prefill`` and ``decode`` pools), every replica's table and samples, once each."""
    from servecal.sched.experiment.models import table_path

    pools = ("replicas", "prefill", "decode")
    replicas = [r for pool in pools for r in getattr(spec, pool, ())]
    models = [m for m in (spec, *replicas) if hasattr(m, "predictor")]
    out: list[str] = []
    for model in models:
        table = table_path(model.predictor)
        out += [] if table is None else [str(table)]
        out += _named_files(model.truth, ("samples", "fit"))
    out += _named_files(spec.workload, ("trace",))
    return [f for f in dict.fromkeys(out) if Path(f).is_file()]


def _named_files(text: str, kinds: tuple[str, ...]) -> list[str]:
    """The file of a ``kind:path`` name (``samples:a.parquet``) whose kind is one of ``kinds``."""
    name, sep, arg = text.partition(":")
    return [arg] if sep and name in kinds else []


def _file_digest(path: str) -> str:
    stat = Path(path).stat()
    return _digest(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _resumable(tasks: Sequence[Task], force: bool) -> dict[str, dict[str, Any]]:
    """The ``run.json`` of every task whose run folder already holds its finished run
    (by folder); refuses, before anything runs, a folder that is not servecal's or
    (without ``force``) holds another configuration's run."""
    from servecal.sched.runfolder import finished_run

    found = {}
    for task in tasks:
        if task.folder is not None:
            doc = finished_run(task.folder, run_config(task), force=force)
            if doc is not None:
                found[task.folder] = doc
    return found


def _replay(search: GoodputSearch, record: Any, bracket: Bracket) -> list[dict[str, Any]] | None:
    """Feed a finished run's recorded search (``goodput_search``) into a new search of
    the same bracket; its probes when they replay to the end, else ``None``."""
    if not isinstance(record, dict) or not isinstance(record.get("probes"), list):
        return None
    if record.get("bracket") != bracket_record(bracket) or record.get("target") != bracket.target:
        return None
    for probe in record["probes"]:
        rate = search.next_rate()
        attainment = probe.get("attainment") if isinstance(probe, dict) else None
        if rate is None or not isinstance(attainment, (int, float)):
            return None
        if not math.isclose(rate, float(probe.get("rate") or "nan"), rel_tol=1e-12):
            return None
        search.record(float(attainment))
    return list(record["probes"]) if search.next_rate() is None else None


#: Whether this process is inside :func:`execute` (what a pool worker's Ctrl-C may
#: stop), and whether a pool worker has seen Ctrl-C.
_running = False
_interrupted = False


def _worker_sigint(signum: int, frame: Any) -> None:
    global _interrupted
    _interrupted = True
    if _running:
        raise KeyboardInterrupt


def _init_worker() -> None:
    """A local pool worker takes Ctrl-C only inside a run (whose folder is written
    whole or not at all). Between runs it ignores it: a worker interrupted in the
    pool's own queue traffic dies holding the queue, and the driver's shutdown can
    then wait forever. The driver cancels what has not started and waits for the
    runs, which stop at once; runs already queued to the worker are refused."""
    signal.signal(signal.SIGINT, _worker_sigint)


class InProcess(Executor):
    """Runs each task at ``submit`` in this process (one task, or ``jobs=1``): no pool
    to start, and a long run can report progress (``on_run_progress``)."""

    def __init__(self, on_run_progress: RunProgress | None = None) -> None:
        self._progress = on_run_progress

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        if fn is execute and self._progress is not None:
            kwargs.setdefault("on_progress", self._progress)
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller via the future
            if isinstance(exc, KeyboardInterrupt):
                raise
            future.set_exception(exc)
        return future


@dataclass(frozen=True)
class SweepProgress:
    """What ``on_progress`` sees after each task: ``done`` tasks so far of ``total``
    (``None`` while max-goodput searches make it unknown), and the last one's spec
    index, seed and rate (``None``: a run at the spec's own rate)."""

    done: int
    total: int | None
    spec_index: int
    seed: int
    rate: float | None


@dataclass
class SpecOutcome:
    """One spec's results: per-seed summaries (seed order), their means (with
    ``<metric>_std``) and, when searched, the max goodput per seed and its mean."""

    spec: RunSpec
    summaries: list[dict[str, Any]] = field(default_factory=list)
    mean: dict[str, Any] = field(default_factory=dict)


def _local_pool(jobs: int | None, tasks: int, on_run_progress: RunProgress | None) -> Executor:
    workers = max(1, min(jobs or os.cpu_count() or 1, tasks))
    if workers == 1:
        return InProcess(on_run_progress)
    from concurrent.futures import ProcessPoolExecutor  # multiprocessing: only for a pool

    return ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)


#: Where a command's sweep can run (``--pool``): this machine, or a Ray cluster; each
#: is ``open(address, jobs)``, a context manager giving :func:`sweep`'s ``pool=``.
POOLS = Registry(
    "sweep pool", "--pool", "open(address, jobs) -> context of an Executor", user_form=""
)
# fmt: off
POOLS.add("local", "servecal.sched.experiment.sweep:local_pool", "this machine: the sweep's own pool of --jobs processes")  # noqa: E501
POOLS.add("ray", "servecal.sched.experiment.sweep:ray_pool", "one Ray task per run on a Ray cluster (--address to join one; servecal[ray])")  # noqa: E501
# fmt: on


@contextmanager
def local_pool(address: str | None, jobs: int | None) -> Iterator[Executor | None]:
    """``None``: the sweep makes its own pool of ``jobs`` local processes."""
    if address is not None:
        raise InputError("--address is for --pool ray (a Ray cluster to join)")
    yield None


@contextmanager
def ray_pool(address: str | None, jobs: int | None) -> Iterator[Executor | None]:
    """One Ray task per run, at most ``jobs`` at once (see :func:`open_pool`)."""
    from servecal.profiler.jobs import open_backend

    with open_backend("ray", address) as backend:
        pool = backend.pool(max_in_flight=jobs)
        try:
            yield pool
        except BaseException:
            # wait: Ray must not be shut down under the pool's dispatcher thread
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


@contextmanager
def open_pool(
    kind: str = "local", address: str | None = None, jobs: int | None = None
) -> Iterator[Executor | None]:
    """The ``pool=`` for :func:`sweep`, by name; a bad choice is one :class:`InputError` line.

    * ``local``: ``None`` (the sweep's own pool of ``jobs`` local processes).
    * ``ray``: one Ray task per run (``num_cpus=1``), at most ``jobs`` at once
      (default: as many as the cluster's CPUs take). ``address``: the cluster to
      join (``auto``, ``host:6379``, ``ray://host:10001``); ``None`` starts a local
      Ray sized to this machine (stopped on exit). Ray not installed: the line to
      install it. Run folders must be on a filesystem every node sees.

    On an exception (Ctrl-C included) the tasks still running are cancelled.
    """
    if kind not in POOLS:
        raise InputError(f"--pool {kind!r}: choose {' or '.join(POOLS.names())}")
    with POOLS.load(POOLS.entries[kind].target)(address, jobs) as pool:
        yield pool


def sweep(
    specs: Sequence[RunSpec],
    *,
    folders: Sequence[str | Path | None] | None = None,
    goodput: Bracket | Sequence[Bracket | None] | None = None,
    jobs: int | None = None,
    pool: Executor | None = None,
    on_progress: Callable[[SweepProgress], None] | None = None,
    on_run_progress: RunProgress | None = None,
    force: bool = False,
) -> list[SpecOutcome]:
    """Run every seed of every spec; return one :class:`SpecOutcome` per spec.

    * ``folders[i]``: spec ``i``'s run folders go to ``<folders[i]>/seed-<k>/``
      (``None``: not written). Probes of a max-goodput search are never written.
    * ``goodput``: also search each (spec, seed)'s max goodput from this bracket (or
      from ``goodput[i]`` for spec ``i``: one bracket per spec, ``None`` = no search);
      the mean over seeds is ``max_goodput`` (``max_goodput_std``,
      ``max_goodput_per_seed``, ``max_goodput_bound``: ``measured`` or
      ``above_cap``/``below_floor`` when any seed hit a limit), and
      ``max_goodput_probes`` keeps every probe per seed (rate, attainment, …: the
      curve the search walked). A seed's run folder gets its search too
      (``run.json``: ``summary.max_goodput`` and ``goodput_search``).
    * ``pool``: where tasks run, any :class:`concurrent.futures.Executor` (kept
      open); default: this process for one task or ``jobs=1``, else a process pool of
      ``jobs`` workers (all cores).
    * ``on_progress(SweepProgress)`` after each task; ``on_run_progress`` is passed to
      runs that report progress inside a run (in-process only).

    * A run whose folder already holds its finished run (the same config, written by
      servecal) is resumed, not run again: its summary (and its recorded max-goodput
      search, when it replays to the same answer) is read back. A folder servecal did
      not write is refused, and one holding another configuration's run unless
      ``force`` (then it is run again and replaced): :class:`InputError`, before
      anything runs.

    Ctrl-C (``KeyboardInterrupt``) cancels the tasks not started and propagates; run
    folders already written stay.
    """
    state = _Sweep.plan(specs, folders, goodput)
    state.resume(force)
    own = pool is None
    to_run, to_search = state.to_run(), state.to_search()
    pool = pool or _local_pool(jobs, len(to_run) + len(to_search), on_run_progress)
    try:
        state.execute(pool, to_run, to_search, on_progress)
    except BaseException:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    if own:
        pool.shutdown(wait=True)
    outcomes = state.outcomes()
    state.record_searches()
    return outcomes


#: One run of a sweep: (spec index, seed).
RunKey = tuple[int, int]


@dataclass
class _Sweep:
    """One sweep's bookkeeping by (spec index, seed): its runs, the max-goodput searches
    and their probes, and the summaries so far."""

    specs: Sequence[RunSpec]
    runs: list[tuple[int, int, Task]]
    brackets: list[Bracket | None]
    searches: dict[RunKey, GoodputSearch]
    probes: dict[RunKey, list[dict[str, Any]]]
    summaries: dict[RunKey, dict[str, Any]] = field(default_factory=dict)
    replayed: set[RunKey] = field(default_factory=set)

    @classmethod
    def plan(
        cls,
        specs: Sequence[RunSpec],
        folders: Sequence[str | Path | None] | None,
        goodput: Bracket | Sequence[Bracket | None] | None,
    ) -> _Sweep:
        """Every (spec, seed) run, with its folder, and a search per run of a bracketed spec."""
        folder_of = list(folders) if folders is not None else [None] * len(specs)
        if len(folder_of) != len(specs):
            raise ValueError("folders must name one folder (or None) per spec")
        # absolute: a worker elsewhere (a Ray node) does not start in this directory
        roots = [None if f is None else Path(f).absolute() for f in folder_of]
        from servecal.sched.runfolder import current_invocation

        invocation = current_invocation()  # workers stamp it: they share no process state
        runs = [
            (i, seed, Task(spec, seed, _seed_folder(roots[i], seed), invocation))
            for i, spec in enumerate(specs)
            for seed in spec.seeds
        ]
        brackets = _brackets(goodput, len(specs))
        searches = {(i, seed): GoodputSearch(brackets[i]) for i, seed, _ in runs if brackets[i]}
        return cls(specs, runs, brackets, searches, {key: [] for key in searches})

    def resume(self, force: bool) -> None:
        """Read back every run whose folder already holds it (refusing, before anything
        runs, a folder that may not be resumed), with its search when that replays."""
        resumed = _resumable([task for _, _, task in self.runs], force)
        for i, seed, task in self.runs:
            doc = resumed.get(task.folder) if task.folder is not None else None
            if doc is not None:
                self._resume_one((i, seed), task.folder, doc)  # type: ignore[arg-type]

    def _resume_one(self, key: RunKey, folder: str, doc: dict[str, Any]) -> None:
        from servecal.sched.runfolder import mark_resumed

        mark_resumed(folder)
        self.summaries[key] = {k: v for k, v in doc["summary"].items() if k != "max_goodput"}
        if key not in self.searches:
            return
        bracket = self.brackets[key[0]]
        recorded = _replay(self.searches[key], doc.get("goodput_search"), bracket)  # type: ignore[arg-type]
        if recorded is None:
            self.searches[key] = GoodputSearch(bracket)  # type: ignore[arg-type]
        else:
            self.probes[key] = recorded
            self.replayed.add(key)

    def to_run(self) -> list[tuple[int, int, Task]]:
        """The runs not resumed."""
        return [(i, seed, task) for i, seed, task in self.runs if (i, seed) not in self.summaries]

    def to_search(self) -> list[RunKey]:
        """The searches not replayed."""
        return [key for key in self.searches if key not in self.replayed]

    def execute(
        self,
        pool: Executor,
        to_run: list[tuple[int, int, Task]],
        to_search: list[RunKey],
        on_progress: Callable[[SweepProgress], None] | None,
    ) -> None:
        """Submit every run and each search's first probe; as each task finishes, record
        it and submit that search's next probe. On an exception the tasks not started
        are cancelled."""
        pending: dict[Future, tuple[int, int, float | None]] = {}
        folder_of = {(i, seed): task.folder for i, seed, task in self.runs}
        done = len(self.runs) - len(to_run) if not self.searches else 0
        total = None if self.searches else len(self.runs)
        try:
            for i, seed, task in to_run:
                pending[pool.submit(execute, task)] = (i, seed, None)
            for key in to_search:
                self._submit_probe(pool, pending, key)
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    i, seed, rate = pending.pop(future)
                    summary = future.result()
                    done += 1
                    if rate is None:
                        _check_written(folder_of[(i, seed)])
                        self.summaries[(i, seed)] = summary
                    else:
                        self.searches[(i, seed)].record(summary["attainment"])
                        self.probes[(i, seed)].append(probe_record(rate, summary))
                        self._submit_probe(pool, pending, (i, seed))
                    if on_progress is not None:
                        on_progress(SweepProgress(done, total, i, seed, rate))
        except BaseException:
            for future in pending:
                future.cancel()
            raise

    def _submit_probe(
        self, pool: Executor, pending: dict[Future, tuple[int, int, float | None]], key: RunKey
    ) -> None:
        rate = self.searches[key].next_rate()
        if rate is not None:
            i, seed = key
            pending[pool.submit(execute, Task(self.specs[i].at_rate(rate), seed))] = (i, seed, rate)

    def outcomes(self) -> list[SpecOutcome]:
        """One outcome per spec: its summaries, their means and its searches' answers."""
        searched = {i for i, _ in self.searches}
        return [
            _outcome(
                SpecOutcome(spec),
                i,
                self.summaries,
                self.searches if i in searched else {},
                self.probes,
            )  # fmt: skip
            for i, spec in enumerate(self.specs)
        ]

    def record_searches(self) -> None:
        """Add each search that ran (not replayed) to its run's folder."""
        for i, seed, task in self.runs:
            key = (i, seed)
            if task.folder is not None and key in self.searches and key not in self.replayed:
                record = search_record(self.brackets[i], self.searches[key], self.probes[key])  # type: ignore[arg-type]
                add_search(task.folder, record)


def _brackets(goodput: Bracket | Sequence[Bracket | None] | None, n: int) -> list[Bracket | None]:
    """One bracket (or ``None``) per spec."""
    if goodput is None or isinstance(goodput, Bracket):
        return [goodput] * n
    brackets = list(goodput)
    if len(brackets) != n:
        raise ValueError("goodput must be one Bracket, or one (or None) per spec")
    return brackets


#: What a max-goodput probe keeps of its run's summary (the curve a report draws, and
#: the energy at each rate: the report ranks J per good request at the maximum).
PROBE_KEYS = (
    "attainment",
    "tpot_attainment",
    "goodput",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "energy_per_good_request_j",
    "energy_per_output_token_j",
)


def probe_record(rate: float, summary: dict[str, Any]) -> dict[str, Any]:
    """One probe of a search: its rate and what it measured there."""
    return {"rate": rate, **{k: summary.get(k) for k in PROBE_KEYS}}


def bracket_record(bracket: Bracket) -> dict[str, Any]:
    """A search's bracket as ``run.json`` keeps it."""
    floor, cap = bracket.limits()
    return {"lo": bracket.lo, "hi": bracket.hi, "floor": floor, "cap": cap,
            "rel_tol": bracket.rel_tol}  # fmt: skip


def search_record(
    bracket: Bracket, search: GoodputSearch, probes: list[dict[str, Any]]
) -> dict[str, Any]:
    """One (spec, seed)'s search as ``run.json`` keeps it (``goodput_search``): the
    bracket, the answer and every probe in the order it ran."""
    found = search.result
    return {
        "target": bracket.target,
        "bracket": bracket_record(bracket),
        "max_goodput": found.rate,
        "bound": found.bound,
        "probes": probes,
    }  # fmt: skip


def add_search(folder: str | Path, record: dict[str, Any]) -> None:
    """Add a search to the run folder of the same (spec, seed): the whole search under
    ``goodput_search`` and ``summary.max_goodput`` (null unless measured: a bound is
    never a summary's number); a run folder another machine wrote where this one
    cannot read it is left alone."""
    import json

    from servecal.sched.runfolder import write_json

    path = Path(folder) / "run.json"
    if not path.is_file():
        return
    doc = json.loads(path.read_text())
    measured = record["bound"] == MEASURED
    doc.setdefault("summary", {})["max_goodput"] = record["max_goodput"] if measured else None
    doc["goodput_search"] = record
    write_json(path, doc)


def _check_written(folder: str | None) -> None:
    """A task ran elsewhere (a Ray node) and wrote its run folder where this machine
    cannot see it: stop at the first one rather than lose them all."""
    if folder is not None and not (Path(folder) / "run.json").is_file():
        raise InputError(
            f"run folder {folder} was written where this machine cannot see it: "
            "the output folder must be on a filesystem every worker node shares"
        )


def _outcome(
    outcome: SpecOutcome,
    i: int,
    summaries: dict[tuple[int, int], dict[str, Any]],
    searches: dict[tuple[int, int], GoodputSearch],
    probes: dict[tuple[int, int], list[dict[str, Any]]],
) -> SpecOutcome:
    from servecal.sched.metrics import mean_over_seeds

    seeds = outcome.spec.seeds
    outcome.summaries = [summaries[(i, s)] for s in seeds]
    if searches:
        results = [searches[(i, s)].result for s in seeds]
        for summary, found in zip(outcome.summaries, results, strict=True):
            summary["max_goodput"] = found.rate
            summary["max_goodput_bound"] = found.bound
            summary["max_goodput_probes_count"] = found.probes
    outcome.mean = mean_over_seeds(outcome.summaries)
    if searches:
        bounds = {found.bound for found in results}
        outcome.mean["max_goodput_per_seed"] = [found.rate for found in results]
        outcome.mean["max_goodput_probes"] = [probes[(i, s)] for s in seeds]
        outcome.mean["max_goodput_bound"] = (
            MEASURED if bounds == {MEASURED} else ABOVE_CAP if ABOVE_CAP in bounds else min(bounds)
        )
    return outcome
