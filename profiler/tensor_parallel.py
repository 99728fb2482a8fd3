"""Calibrating at TP ``N``: one process per rank, rank 0 runs the sweep and times it.

Rank 0 is the process that called :func:`~servecal.profiler.calibrate.calibrate`:
it plans, measures, writes shards, obeys the budget and signals and shows progress
exactly as at TP 1, so resume, infeasible points and the output files are
unchanged. :func:`start_group` spawns the other ``N - 1`` ranks (followers); each
builds its shard of the model and then runs, on rank 0's command, what rank 0
runs (vLLM's driver worker broadcasts each step to the other workers the same
way):

* ``prepare(id, point)``: allocate this rank's share of the point's KV and inputs;
* ``time(id)``: synchronise the device, meet the other ranks at a barrier, run the
  iteration; its all-reduces keep the ranks in step, and rank 0's clock (CUDA
  events or ``perf_counter``) times it, collectives included;
* ``release`` (piggy-backed on the next command): forget points rank 0 dropped;
* ``exit``.

Commands go over a gloo group on the CPU; the model's collectives over the data
group (NCCL between GPUs, gloo between CPU processes: the code is the same). After
each command the ranks agree on its outcome (a MAX all-reduce of a status code),
so an out-of-memory on any rank makes the point infeasible on all of them.
Followers ignore SIGINT/SIGTERM (rank 0 decides when to stop) and exit when rank 0
says so or dies. On CUDA rank ``r`` uses the ``r``-th GPU after rank 0's.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal
import sys
import tempfile
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from servecal.profiler.collective import ProcessGroupCollective
from servecal.profiler.design import Point
from servecal.profiler.model import Transformer, build_model
from servecal.profiler.runner import PointLayout, PreparedPoint, is_out_of_memory
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock, CudaClock
from servecal.util.errors import InputError

#: Status codes the ranks agree on after each command (the largest wins).
OK, OUT_OF_MEMORY, FAILED = 0, 1, 2
#: How long a rank waits in a collective before giving up (an asymmetric failure
#: would otherwise hang the group forever).
DEFAULT_TIMEOUT_S = 600.0


def collective_backend(device: torch.device) -> str:
    """The data group's backend: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_devices(device: torch.device, tp: int) -> list[torch.device]:
    """Each rank's device: the CPU for all, or ``tp`` consecutive GPUs from ``device``."""
    if device.type != "cuda":
        return [device] * tp
    first = device.index or 0
    count = torch.cuda.device_count()
    if first + tp > count:
        raise InputError(
            f"--tp {tp} from {device}: needs GPUs {first}..{first + tp - 1}, only {count} visible"
        )
    return [torch.device("cuda", first + r) for r in range(tp)]


def check_backend(device: torch.device) -> None:
    """InputError when torch cannot run this device's collectives."""
    if not dist.is_available():
        raise InputError("--tp > 1 needs torch.distributed, which this torch build lacks")
    backend = collective_backend(device)
    available = dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available()
    if not available:
        raise InputError(f"--tp > 1 on {device.type} needs the {backend} backend (not built in)")


@dataclass(frozen=True)
class RankSpec:
    """What a rank needs to build its shard and join the group (picklable)."""

    rank: int
    world: int
    init_method: str
    device: str
    shape: dict[str, Any]
    dtype: torch.dtype
    layers: int
    seed: int
    threads: int | None
    layout: Callable[[], PointLayout]
    timeout_s: float = DEFAULT_TIMEOUT_S

    def build(self) -> Transformer:
        """This rank's shard (weights seeded per rank: timing does not depend on them)."""
        collective = ProcessGroupCollective()
        shape = ModelShape(**self.shape)
        return build_model(
            shape, self.device, self.dtype, self.layers, self.seed + self.rank, collective
        )


def _join(spec: RankSpec) -> Any:
    """Join the world (data backend) and make the gloo control group; return the latter."""
    device = torch.device(spec.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        collective_backend(device),
        init_method=spec.init_method,
        rank=spec.rank,
        world_size=spec.world,
        timeout=dt.timedelta(seconds=spec.timeout_s),
    )
    return dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=spec.timeout_s))


def _line_up(device: torch.device, control: Any) -> None:
    """Before a timed iteration: this rank's earlier work done, all ranks at the start."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=control)


def _agree(status: int, control: Any) -> int:
    flag = torch.tensor([status], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=control)
    return int(flag.item())


class NullClock:
    """A follower runs the iteration untimed (rank 0's clock is the measurement)."""

    def start(self) -> None:
        pass

    def mark(self) -> None:
        pass

    def stop(self) -> list[float]:
        return [0.0, 0.0, 0.0]


# ----------------------------------------------------------------- followers


def _exit_with_parent() -> None:
    """Leave at once when rank 0's process is gone (even SIGKILLed)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(0)
            threading.Event().wait(0.5)

    threading.Thread(target=watch, name="servecal-parent-watch", daemon=True).start()


def follow(spec: RankSpec) -> None:
    """A follower's life: join, build its shard, obey commands until ``exit``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when the sweep stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent()
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    device = torch.device(spec.device)
    control = _join(spec)
    try:
        model = spec.build()
        layout = spec.layout()
        live: dict[int, PreparedPoint] = {}
        clock = NullClock()
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0, group=control)
            kind, args, released = box[0]
            for pid in released:
                live.pop(pid, None)
            if released and device.type == "cuda":
                torch.cuda.empty_cache()
            if kind == "exit":
                break
            status = OK
            try:
                if kind == "prepare":
                    pid, point = args
                    live[pid] = layout.prepare(model, Point(*point))
                else:  # "time"
                    (pid,) = args
                    _line_up(device, control)
                    live[pid].time(clock)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - reported to rank 0 as a status
                status = OUT_OF_MEMORY if is_out_of_memory(exc) else FAILED
                if status == FAILED:
                    print(f"tensor-parallel rank {spec.rank}:", file=sys.stderr)
                    traceback.print_exc()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            _agree(status, control)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------- rank 0


class Group:
    """Rank 0's handle on the running group: send commands, agree, release points."""

    def __init__(self, device: torch.device, control: Any, processes: list[Any]) -> None:
        self.device = device
        self.control = control
        self.processes = processes
        self.collective = ProcessGroupCollective()
        self._ids = itertools.count()
        self._released: list[int] = []

    @property
    def backend(self) -> str:
        return self.collective.backend

    def new_id(self) -> int:
        return next(self._ids)

    def release(self, pid: int) -> None:
        """Forget point ``pid`` on the followers (sent with the next command)."""
        self._released.append(pid)

    def command(self, kind: str, *args: Any) -> None:
        released, self._released = self._released, []
        dist.broadcast_object_list([(kind, args, released)], src=0, group=self.control)

    def agree(self, status: int) -> int:
        return _agree(status, self.control)

    def line_up(self) -> None:
        _line_up(self.device, self.control)


def _spawn(spec: RankSpec) -> Any:
    context = torch.multiprocessing.get_context("spawn")
    process = context.Process(
        target=follow, args=(spec,), name=f"servecal-tp-rank{spec.rank}", daemon=True
    )
    process.start()
    return process


@contextmanager
def start_group(template: RankSpec, devices: list[torch.device]) -> Iterator[Group]:
    """Spawn ranks ``1..N-1`` of ``template`` on ``devices``, join as rank 0, yield the group.

    On leaving normally the followers are told to exit; after an error they are
    terminated (they may be blocked in a collective rank 0 left).
    """
    if dist.is_initialized():
        raise InputError("--tp > 1: torch.distributed is already initialised in this process")
    world = len(devices)
    store = Path(tempfile.mkdtemp(prefix="servecal-tp-"))
    init_method = f"file://{store / 'rendezvous'}"
    processes = []
    clean = False
    try:
        for rank in range(1, world):
            spec = replace(
                template, rank=rank, world=world, init_method=init_method, device=str(devices[rank])
            )
            processes.append(_spawn(spec))
        rank0 = replace(
            template, rank=0, world=world, init_method=init_method, device=str(devices[0])
        )
        group = Group(devices[0], _join(rank0), processes)
        yield group
        group.command("exit")
        clean = True
    finally:
        for process in processes:
            process.join(timeout=30 if clean else 0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
        if dist.is_initialized():
            dist.destroy_process_group()
        for leftover in store.glob("*"):
            leftover.unlink(missing_ok=True)
        store.rmdir()


@dataclass
class TensorParallelPoint:
    """Rank 0's share of a prepared point; timing it runs every rank's share."""

    local: PreparedPoint
    pid: int
    group: Group

    def time(self, clock: CpuClock | CudaClock) -> list[float]:
        group = self.group
        group.command("time", self.pid)
        group.line_up()
        try:
            segments = self.local.time(clock)
        except KeyboardInterrupt:
            raise  # the followers may be inside a collective: no agreement possible
        except Exception as exc:
            group.agree(OUT_OF_MEMORY if is_out_of_memory(exc) else FAILED)
            raise
        _raise_for(group.agree(OK))
        return segments


def _raise_for(status: int) -> None:
    if status == OUT_OF_MEMORY:
        raise MemoryError("out of memory on a tensor-parallel rank")
    if status == FAILED:
        raise RuntimeError("a tensor-parallel rank failed (its traceback is above)")


class TensorParallelLayout:
    """Wraps rank 0's layout: each prepare and time also runs on the followers."""

    def __init__(self, inner: PointLayout, group: Group) -> None:
        self.inner = inner
        self.group = group
        self.name = inner.name
        self.preroll = inner.preroll

    def prepare(self, model: Transformer, point: Point) -> TensorParallelPoint:
        group = self.group
        pid = group.new_id()
        group.command("prepare", pid, (point.n_decode, point.chunk, point.ctx, point.prefix))
        try:
            local = self.inner.prepare(model, point)
        except Exception as exc:
            group.agree(OUT_OF_MEMORY if is_out_of_memory(exc) else FAILED)
            group.release(pid)
            raise
        status = group.agree(OK)
        if status != OK:
            group.release(pid)
            _raise_for(status)
        prepared = TensorParallelPoint(local, pid, group)
        weakref.finalize(prepared, group.release, pid)  # the runner dropped it: so do they
        return prepared
