"""`servecal calibrate --engine vllm`: plan the grid, time it through a real vLLM engine.

servecal's own environment need not be able to run vLLM (on a CPU it has the GPU
build of ``vllm`` without its dependencies), so the sweep runs in a subprocess,
``PYTHON -m servecal.integrations.vllm.calibration OUT``, in the Python that has
vLLM (``--server-python``, else ``$SERVECAL_VLLM_CPU_PYTHON``, as ``servecal
bench``, else the running Python when it has vLLM). Parent and child share the
calibration folder's contract (:mod:`.calibrate`): the plan and one shard per
measured point in ``OUT/shards`` (so ``--resume`` continues where a stop left
off), then ``samples.parquet``, ``samples.fingerprint.json`` and ``costtable.json`` written
here. The child's progress comes on its stderr (``servecal-progress DONE TOTAL
LABEL``); everything else it prints goes to ``OUT/engine.log``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servecal.profiler.calibrate import CalibrateConfig, CalibrationResult, _finish
from servecal.profiler.design import Grid, design_points
from servecal.profiler.shapes import ModelShape
from servecal.profiler.shards import ShardStore
from servecal.profiler.sweep import SweepOutcome, SweepStatus
from servecal.util.errors import InputError
from servecal.util.niceness import check_niceness, popen_at_niceness

#: The grid when none is given: small, since every point is a real engine step.
DEFAULT_GRID = {"n_decode": [0, 1, 4, 8], "chunk": [0, 16, 64, 128], "ctx": [64, 512],
                "prefix": [0, 256]}  # fmt: skip
DEFAULT_REPEATS = 10
#: Shape fields and the Hugging Face config names they come from (a --model-dir).
_HF = {"n_layers": "num_hidden_layers", "hidden": "hidden_size", "n_heads": "num_attention_heads",
       "n_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
       "intermediate": "intermediate_size", "vocab": "vocab_size"}  # fmt: skip
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: MoE shape fields and the config names they come from (Qwen-MoE, then Mixtral's).
_HF_MOE = {"experts": ("num_experts", "num_local_experts"), "top_k": ("num_experts_per_tok",),
           "expert_intermediate": ("moe_intermediate_size",)}  # fmt: skip


@dataclass(frozen=True)
class EngineOptions:
    """What ``--engine vllm`` adds to :class:`CalibrateConfig`."""

    server_python: str | None = None
    model_dir: Path | None = None
    kv_cache_bytes: int | None = None
    enforce_eager: bool = True
    nice: int | None = None  # the engine's niceness (servecal.util.niceness); None: ours
    # vLLM's KV block size (None: the platform's default, 128 on the CPU): the served
    # engine's, when it serves with another (a prefix-cache bench serves with its
    # workload's block size)
    kv_block_size: int | None = None


#: Exits 0 where vLLM imports and finds a device to run on (a GPU build installed
#: without its dependencies, as servecal's own test environment has, finds none).
_PROBE = "import sys; from vllm.platforms import current_platform as p; sys.exit(not p.device_type)"


def vllm_here() -> bool:
    """The running Python can run vLLM: it has the package, and vLLM finds a device
    (asked in a child: importing vLLM takes seconds and is not undone)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _python(opts: EngineOptions) -> str:
    """The Python the driver runs in: ``--server-python``, else
    ``$SERVECAL_VLLM_CPU_PYTHON``, else this one when it has vLLM."""
    python = opts.server_python or os.environ.get("SERVECAL_VLLM_CPU_PYTHON")
    if not python and vllm_here():
        return sys.executable
    if not python:
        raise InputError(
            "--engine vllm needs the Python that has vLLM: --server-python PATH "
            "(or SERVECAL_VLLM_CPU_PYTHON), or run servecal from that Python"
        )
    found = shutil.which(python)
    if found is None:
        raise InputError(f"--server-python {python}: no such executable")
    return found


def shape_of_folder(folder: Path) -> ModelShape:
    """The servecal shape of a Hugging Face model folder (its ``config.json``)."""
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise InputError(f"--model-dir {folder}: no config.json there") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--model-dir {folder}: unreadable config.json ({exc})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"--model-dir {folder}: config.json is not an object")
    fields: dict[str, Any] = {k: cfg.get(v) for k, v in _HF.items()}
    if fields["n_kv_heads"] is None:
        fields["n_kv_heads"] = fields["n_heads"]
    if fields["head_dim"] is None and fields["hidden"] and fields["n_heads"]:
        fields["head_dim"] = fields["hidden"] // fields["n_heads"]
    missing = [_HF[k] for k, v in fields.items() if not isinstance(v, int)]
    if missing:
        raise InputError(f"--model-dir {folder}: config.json lacks {', '.join(missing)}")
    try:
        return ModelShape(name=folder.name, rope_theta=float(cfg.get("rope_theta", 10000.0)),
                          norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), **fields,
                          **_moe_fields(cfg))  # fmt: skip
    except ValueError as exc:
        raise InputError(f"--model-dir {folder}: {exc}") from None


def _moe_fields(cfg: dict[str, Any]) -> dict[str, int]:
    """A MoE config's experts, top-k, expert width and shared experts (none for a
    dense one). Mixtral names its experts' width ``intermediate_size``; Qwen2-MoE's
    shared expert counts as ``shared_expert_intermediate_size / moe_intermediate_size``."""
    found = {k: next((cfg[n] for n in names if isinstance(cfg.get(n), int)), None)
             for k, names in _HF_MOE.items()}  # fmt: skip
    if not found["experts"]:
        return {}
    if found["expert_intermediate"] is None:  # Mixtral
        found["expert_intermediate"] = cfg.get("intermediate_size")
    moe = {k: int(v or 0) for k, v in found.items()}
    shared = cfg.get("shared_expert_intermediate_size") or 0
    if isinstance(shared, int) and shared and moe["expert_intermediate"]:
        moe["shared_experts"] = max(1, round(shared / moe["expert_intermediate"]))
    return moe


def _check_moe_served(shape: ModelShape) -> None:
    """A MoE shape vLLM can serve here: one device (no expert parallelism), its own
    router (random weights decide the routing, not ``routing_skew``)."""
    if shape.ep != 1:
        raise InputError(
            f"--model {shape.name}: --engine vllm serves on one device; ep {shape.ep} "
            "needs a deployment with expert parallelism (calibrate the shape at ep 1)"
        )
    if shape.routing_skew:
        raise InputError(
            f"--model {shape.name}: --engine vllm routes with vLLM's own router on random "
            f"weights; routing_skew {shape.routing_skew:g} cannot be imposed (use 0)"
        )


def _settings(
    cfg: CalibrateConfig,
    opts: EngineOptions,
    shape: ModelShape,
    model_dir: Path,
    points: list[list[int]],
    repeats: int,
    warmup: int,
    dtype: str,
) -> dict[str, Any]:
    """vLLM's engine arguments, sized for the largest point."""
    batched = max(512, max(p[0] + max(p[1], p[3]) for p in points))
    # a decode's context: ctx, plus the steps of the repeats and of the decodes' setup
    steps = [2 * (repeats + warmup) + 8 + math.ceil(p[0] * p[2] / batched) for p in points]
    n_max = max(p[0] for p in points)
    longest = max(max(p[2] + s, p[1] + p[3]) for p, s in zip(points, steps, strict=True))
    tokens = max(p[0] * (p[2] + s) + p[1] + p[3] for p, s in zip(points, steps, strict=True))
    per_token = 2 * shape.n_layers * shape.n_kv_heads * shape.head_dim * _BYTES[dtype]
    blocks = (n_max + 2) * 16  # partly filled KV blocks, one per request
    kv = opts.kv_cache_bytes or max(1 << 26, 2 * (tokens + blocks) * per_token)
    return {
        "model_dir": str(model_dir),
        "dummy_weights": opts.model_dir is None,
        "dtype": dtype,
        "kv_cache_bytes": int(kv),
        "max_model_len": int(16 * math.ceil((longest + 16) / 16)),
        "max_num_batched_tokens": int(batched),
        "max_num_seqs": int(max(8, n_max + 2)),
        "enforce_eager": opts.enforce_eager,
        "kv_block_size": opts.kv_block_size,
        "seed": cfg.seed,
        "vocab": shape.vocab,
    }


def _new_plan(cfg: CalibrateConfig, opts: EngineOptions, store: ShardStore) -> dict[str, Any]:
    if cfg.layers is not None or cfg.tp not in (None, 1) or cfg.kv_layout is not None:
        raise InputError(
            "--engine vllm times the whole served model on one device: "
            "--layers, --tp and --kv-layout do not apply"
        )
    if opts.model_dir is not None:
        if cfg.model is not None:
            raise InputError("give --model (a dummy model of that shape) or --model-dir, not both")
        shape, model_dir = shape_of_folder(opts.model_dir), opts.model_dir.resolve()
    else:
        from servecal.profiler.model_folder import write_model_folder

        shape = ModelShape.resolve(cfg.model or "tiny")
        _check_moe_served(shape)
        model_dir = write_model_folder(shape.name if cfg.model is None else cfg.model,
                                       cfg.out / "model").resolve()  # fmt: skip
    device = "cpu" if cfg.device in ("auto", "cpu") else cfg.device
    dtype = cfg.dtype or ("float32" if device == "cpu" else "bfloat16")
    grid = Grid.from_file(cfg.grid) if cfg.grid else Grid.from_dict(DEFAULT_GRID)
    points = [[p.n_decode, p.chunk, p.ctx, p.prefix]
              for p in design_points(grid, np.random.default_rng(cfg.seed))]  # fmt: skip
    repeats = cfg.repeats or DEFAULT_REPEATS
    return {
        "engine": "vllm",
        "shape": shape.to_dict(),
        "device": device,
        "dtype": dtype,
        "layers_timed": shape.n_layers,
        "repeats": repeats,
        "warmup": cfg.warmup,
        "seed": cfg.seed,
        "kv_layout": "vllm",
        "tp": 1,
        "grid": grid.to_dict(),
        "points": points,
        "engine_settings": _settings(
            cfg, opts, shape, model_dir, points, repeats, cfg.warmup, dtype
        ),  # fmt: skip
    }


def _check_resume(plan: dict[str, Any], cfg: CalibrateConfig, where: Path) -> None:
    if plan.get("engine") != "vllm":
        raise InputError(f"{where}: this run was not started with --engine vllm")
    asked = {"repeats": cfg.repeats, "dtype": cfg.dtype,
             "grid": None if cfg.grid is None else Grid.from_file(cfg.grid).to_dict()}  # fmt: skip
    for key, value in asked.items():
        if value is not None and value != plan[key]:
            raise InputError(
                f"{where}: --resume with a different {key} than the run was started with "
                f"({plan[key]}); drop the option or use another --out"
            )


def calibrate_vllm(
    cfg: CalibrateConfig,
    opts: EngineOptions,
    *,
    on_message: Callable[[str], None],
    on_progress: Callable[[SweepStatus], None] | None = None,
) -> CalibrationResult:
    """Run (or resume) a calibration through vLLM into ``cfg.out``."""
    if cfg.device not in ("auto", "cpu") and not cfg.device.startswith("cuda"):
        raise InputError(f"--device {cfg.device!r}: expected auto, cpu or cuda:N")
    python = _python(opts)
    check_niceness(opts.nice)
    store = ShardStore(cfg.out)
    with store.locked():
        if cfg.resume:
            plan = store.read_plan()
            _check_resume(plan, cfg, store.plan_path)
            store.clean_temporaries()
        else:
            if store.exists() or (cfg.out / "samples.parquet").exists():
                raise InputError(
                    f"{cfg.out}: already holds a calibration; pass --resume or another --out"
                )
            cfg.out.mkdir(parents=True, exist_ok=True)
            plan = _new_plan(cfg, opts, store)
            store.write_plan(plan)
        omp: dict[str, str] = {}
        outcome = _run_child(python, cfg, plan, store, omp, opts.nice, on_message, on_progress)
        engine = _engine_info(store)
        provenance = _provenance(plan, engine, cfg)
        provenance["omp"] = omp
        provenance["nice"] = opts.nice
        provenance["infeasible_points"] = store.infeasible()
        provenance["points_planned"] = len(plan["points"])
        return _finish(cfg, store, outcome, provenance, on_message, len(plan["points"]))


def _run_child(python: str, cfg: CalibrateConfig, plan: dict[str, Any], store: ShardStore,
               omp: dict[str, str], nice: int | None, on_message: Callable[[str], None],
               on_progress: Callable[[SweepStatus], None] | None) -> SweepOutcome:  # fmt: skip
    before = len(store.done())
    env = dict(os.environ)
    # the engine in the driver's own process, so its scheduler object is reachable
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if plan["device"] == "cpu":
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        env.update(served_omp_env(cfg.threads, env))
    omp.update({k: env[k] for k in ("OMP_NUM_THREADS", "OMP_PLACES") if k in env})
    cmd = [python, "-m", "servecal.integrations.vllm.calibration", str(cfg.out),
           "" if cfg.budget_s is None else str(cfg.budget_s)]  # fmt: skip
    log_path = cfg.out / "engine.log"
    on_message(f"engine: vLLM through {python} (log: {log_path})")
    start = time.monotonic()
    with open(log_path, "ab") as log:
        proc = popen_at_niceness(cmd, nice, stdout=log, stderr=subprocess.PIPE, env=env)
        assert proc.stderr is not None
        try:
            for raw in proc.stderr:
                line = raw.decode(errors="replace")
                if line.startswith("servecal-progress "):
                    done, total, label = line.split(" ", 3)[1:]
                    if on_progress is not None:
                        on_progress(SweepStatus(int(done), int(total), label.strip(), None))
                else:
                    log.write(raw)
            code = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # the child stops after its current point
            code = proc.wait()
    measured = len(store.done()) - before
    remaining = len(plan["points"]) - len(store.done())
    infeasible = len(store.infeasible())
    if code in (0, 3):
        stopped = "complete" if remaining == 0 else "budget"
    elif code in (130, -signal.SIGINT, -signal.SIGTERM):
        stopped = "signal"
    else:
        from servecal.util.logs import last_error

        raise InputError(
            f"the vLLM engine exited with code {code}: {last_error(log_path)} "
            f"(log: {log_path}; measured points are kept, --resume continues)"
        )
    return SweepOutcome(measured, infeasible, remaining, stopped, time.monotonic() - start)


def _physical_cpus() -> list[int]:
    """This process's usable CPUs, one logical CPU per physical core (the last sibling,
    as vLLM's x86 auto binding picks)."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    picked: dict[str, int] = {}
    for cpu in usable:
        try:
            key = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
            siblings = key.read_text().strip()
        except OSError:
            siblings = str(cpu)
        picked[siblings] = cpu
    return sorted(picked.values()) or list(range(os.cpu_count() or 1))


def served_omp_env(threads: int | None, env: dict[str, str]) -> dict[str, str]:
    """The OpenMP settings a served CPU engine's worker gets, for the driver's process.

    ``vllm serve`` runs the model in a worker process started with ``OMP_NUM_THREADS``
    and ``OMP_PLACES`` set to its bound cores (``VLLM_CPU_OMP_THREADS_BIND=auto``: one
    logical CPU per physical core, one core reserved for the API process); an
    in-process ``LLM`` gets none of that, and its steps came out ~4x slower than the
    served ones on a 2-core host. OpenMP reads these when torch loads, so they are set
    before the driver starts. ``threads`` (``--threads``) or a user's own
    ``OMP_NUM_THREADS`` wins."""
    if threads is None and "OMP_NUM_THREADS" in env:
        return {}
    cpus = _physical_cpus()
    bound = cpus[:-1] if len(cpus) > 1 else cpus  # the last one is reserved
    if threads is not None:
        bound = (cpus * threads)[:threads] if threads > len(bound) else bound[:threads]
    places = ",".join(str(c) for c in dict.fromkeys(bound))
    return {"OMP_NUM_THREADS": str(len(bound)), "OMP_PLACES": f"{{{places}}}",
            "OMP_PROC_BIND": "true"}  # fmt: skip


def _engine_info(store: ShardStore) -> dict[str, Any]:
    try:
        return json.loads((store.root / "engine.json").read_text())
    except (OSError, ValueError):
        return {"engine": "vllm", "engine_version": None}


def _architecture(plan: dict[str, Any]) -> str | None:
    """The architecture vLLM served (the model folder's ``config.json``)."""
    try:
        folder = Path(plan["engine_settings"]["model_dir"])
        return json.loads((folder / "config.json").read_text())["architectures"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _provenance(plan: dict[str, Any], engine: dict[str, Any], cfg: CalibrateConfig) -> dict:
    import datetime as dt

    from servecal import __version__
    from servecal.profiler.fingerprint import cpu_name

    shape = ModelShape(**plan["shape"])
    device = plan["device"]
    return {
        "device": device,
        "device_name": cpu_name() if device == "cpu" else device,
        "device_uuid": None,
        "driver": None,
        **engine,
        "torch": None,
        "model": shape.name,
        "model_shape": shape.to_dict(),
        "model_hash": shape.hash,
        **({"moe": shape.moe_label} if shape.is_moe else {}),
        "architecture": _architecture(plan),
        "dtype": plan["dtype"],
        "tp": 1,
        "layers_timed": shape.n_layers,
        "layers_total": shape.n_layers,
        "layer_scale": 1.0,
        "repeats": plan["repeats"],
        "warmup": plan["warmup"],
        "seed": plan["seed"],
        "grid": plan["grid"],
        "budget_s": cfg.budget_s,
        "kv_layout": "vllm",
        "engine_settings": plan["engine_settings"],
        "step_time": "schedule() end to update_from_output() start, as the plug-in's run log",
        "energy_source": None,
        "servecal_version": __version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": "servecal calibrate --engine vllm",
        "python": sys.version.split()[0],
    }
