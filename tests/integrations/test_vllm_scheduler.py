"""SLOWeaveScheduler inside vLLM's real v1 scheduler, stepped on a CPU.

The scheduler is built the way vLLM builds it from ``--scheduler-cls``
(``EngineArgs`` → ``VllmConfig`` → ``get_scheduler_cls()``), fed requests, and
stepped with hand-made model outputs while a fake clock stands in for the GPU:
each step takes the time a known truth draws for the step's shape, so deadlines
and the online-validation log can be checked exactly.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner
from vllmguard import require_vllm

require_vllm()

import vllmkit as K  # noqa: E402
from vllm.config import SchedulerConfig  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

from servecal.cli import app  # noqa: E402
from servecal.costmodels.synthetic import SyntheticTruth  # noqa: E402
from servecal.costmodels.table import AXES, CostTable, Margin  # noqa: E402
from servecal.integrations.vllm import SLOWeaveAsyncScheduler, SLOWeaveScheduler  # noqa: E402
from servecal.integrations.vllm.config import PluginConfigError  # noqa: E402
from servecal.sched.policies.sloweave import SLOWeave, SLOWeaveConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "sched"))
from energyrows import priced_per_token  # noqa: E402
from enginekit import FakeLive, FakeView  # noqa: E402

SLO = 10.0  # ms, the default TPOT SLO of these runs
TRUTH = SyntheticTruth(decode_attention=2e-5, prefill_attention=2e-7, sigma=0.05, spike_prob=0)
GRID = {
    "n_decode": [0, 1, 4, 16, 64, 256],
    "ctx": [0, 512, 2048, 8192],
    "prefix": [0, 2048, 8192],
    "chunk": [0, 1, 64, 256, 1024, 2048, 4096],  # 1: the prefill step at c = 0 → 1
}
TINY_SHAPE = {"name": "tiny", "n_layers": 4, "hidden": 128, "n_heads": 4, "n_kv_heads": 2,
              "head_dim": 32, "intermediate": 384, "vocab": 2048}  # fmt: skip
runner = CliRunner()


def truth_table() -> CostTable:
    """The truth's own quantiles on a grid: a table that is right by construction."""
    mesh = np.meshgrid(*(np.asarray(GRID[a], dtype=float) for a in AXES), indexing="ij")
    p50 = TRUTH.median(mesh[0], mesh[3], mesh[1], mesh[2])
    return CostTable(
        axes=GRID,
        quantiles={0.5: p50, 0.99: p50 * math.exp(2.326 * TRUTH.sigma)},
        margin=Margin(0.99, 0.02, 0.99, None, 1, 1),
        fingerprint={"device_name": "synthetic", "model_shape": TINY_SHAPE, "dtype": "float32"},
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vllm")
    K.write_model(root / "model")
    truth_table().save(root / "table.json")
    return root


def make(root: Path, run: str | None = None, async_scheduling: bool = False, **servecal):
    """A plug-in scheduler on a fake clock, and the clock."""
    settings = {"table": str(root / "table.json"), "tpot_slo_ms": SLO, **servecal}
    if run is not None:
        settings["run_dir"] = str(root / run)
    s = K.build(K.engine_args(root / "model", settings, async_scheduling=async_scheduling))
    clock = K.FakeClock()
    K.use_clock(s, clock)
    return s, clock


def warm(s, clock, n: int, prompt: int = 64, out: int = 5_000) -> None:
    """``n`` more short requests, stepped until every request decodes (5 ms per step)."""
    for i in range(n):
        s.add_request(K.request(f"d{i}", prompt, out))
    for _ in range(4 * n):
        if len(K.decode_set(s)) == len(s.requests):
            return
        K.step(s, clock, 5.0)
    raise AssertionError("requests did not reach decode")


def long_chunk(s, clock, prompt: int = 6000, wait_ms: float = 0.0) -> tuple[int, int]:
    """Add a long prompt, let ``wait_ms`` pass, schedule: (its chunk, all tokens)."""
    s.add_request(K.request("long", prompt, 10))
    clock.advance_ms(wait_ms)
    out = s.schedule()
    chunk = out.num_scheduled_tokens.get("long", 0)
    s.update_from_output(out, K.runner_output(s, out))
    return chunk, out.total_num_scheduled_tokens


# -- loading ------------------------------------------------------------------------------
def test_scheduler_config_resolves_the_plugin_by_name() -> None:
    config = SchedulerConfig.default_factory(scheduler_cls=K.PLUGIN)
    assert config.get_scheduler_cls() is SLOWeaveScheduler


def test_engine_args_build_it_as_vllm_serve_does(root: Path) -> None:
    s, _ = make(root)
    assert type(s) is SLOWeaveScheduler and isinstance(s, Scheduler)
    assert not isinstance(s, AsyncScheduler)
    assert s._sw_sloweave.c_max == s.max_num_scheduled_tokens == 2048


def test_async_scheduling_gets_the_async_base(root: Path) -> None:
    s, _ = make(root, async_scheduling=True)
    assert type(s) is SLOWeaveAsyncScheduler
    assert isinstance(s, AsyncScheduler) and isinstance(s, SLOWeaveScheduler)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"table": "missing.json"}, "missing.json: no such file"),
        ({"tpot": 25}, "unknown key 'tpot'"),
        (
            {"model": {"hidden_size": 256, "intermediate_size": 768}},
            "hidden: table 128, served 256",
        ),
        ({"extra_field": True}, "unknown field 'serve_hint'"),
    ],
)
def test_bad_configuration_stops_vllm_with_one_line(root: Path, change: dict, message: str):
    settings = {"table": str(root / "table.json"), "tpot_slo_ms": SLO}
    model = root / "model"
    if "table" in change:
        settings["table"] = str(root / change["table"])
    elif "tpot" in change:
        settings["tpot"] = 25
    elif "model" in change:
        model = K.write_model(root / "other-model", **change["model"])
    else:
        doc = truth_table().to_json() | {"serve_hint": "fast"}
        (root / "edited.json").write_text(json.dumps(doc))
        settings["table"] = str(root / "edited.json")
    with pytest.raises(PluginConfigError) as err:
        K.build(K.engine_args(model, settings))
    assert str(err.value).startswith("servecal: ") and "\n" not in str(err.value)
    assert message in str(err.value)


# -- the decision -------------------------------------------------------------------------
def test_few_decodes_large_chunk_many_decodes_smaller(root: Path) -> None:
    few, clock = make(root)
    warm(few, clock, 2)
    many, clock2 = make(root)
    warm(many, clock2, 48)
    c_few, _ = long_chunk(few, clock)
    c_many, _ = long_chunk(many, clock2)
    assert c_few > c_many > 0
    assert c_few <= 2048 - 2  # never above vLLM's token cap
    assert few.max_num_scheduled_tokens == many.max_num_scheduled_tokens == 2048  # restored


def test_a_passed_deadline_schedules_only_the_decodes(root: Path) -> None:
    s, clock = make(root)
    warm(s, clock, 8)
    chunk, total = long_chunk(s, clock, wait_ms=SLO + 1.0)
    assert chunk == 0 and total == 8
    chunk, total = long_chunk_again(s, clock)  # on time again: the prompt gets its chunk
    assert chunk > 0 and total == 8 + chunk


def long_chunk_again(s, clock) -> tuple[int, int]:
    out = K.step(s, clock, 5.0)
    return out.num_scheduled_tokens.get("long", 0), out.total_num_scheduled_tokens


def test_a_request_with_its_own_tighter_slo_shrinks_the_chunk(root: Path) -> None:
    plain, clock = make(root)
    warm(plain, clock, 4)
    tight, clock2 = make(root)
    tight.add_request(K.request("strict", 64, 10_000, tpot_slo_ms=4.0))
    warm(tight, clock2, 3)
    c_plain, _ = long_chunk(plain, clock)
    c_tight, _ = long_chunk(tight, clock2)
    assert 0 < c_tight < c_plain


class ViewWithFinished(FakeView):
    """A :class:`FakeView` that also lists the requests finished since the last plan."""

    def __init__(self, finished: dict[str, int], **kwargs) -> None:
        super().__init__(**kwargs)
        self.new_finished = tuple(finished)
        self._finished = finished

    def get(self, rid):
        if rid in self._finished:
            return SimpleNamespace(output_tokens=self._finished[rid])
        return super().get(rid)


def same_steps(s, clock, policy: SLOWeave, steps: int, seed: int = 3) -> dict[str, int]:
    """Step the plug-in ``s`` and, beside it, ``policy.plan`` on a view the test builds
    itself from vLLM's state: the chunks and the margin controllers' states must match
    at every step. Decodes of varied length finish (the controller counts their gaps),
    a new long prompt arrives every 12 steps. Returns counts of what was compared."""
    rng = np.random.default_rng(seed)
    last: dict[str, float] = {}  # the test's own record of each request's last token
    for i in range(40):
        s.add_request(K.request(f"d{i}", int(rng.integers(16, 200)), int(rng.integers(20, 90))))
    finished: dict[str, int] = {}
    counts = {"compared": 0, "finished": 0}
    for k in range(steps):
        if k % 12 == 0:
            s.add_request(K.request(f"long{k}", 6000, 10))
        clock.advance_ms(float(rng.uniform(0.0, 0.8 * SLO)))  # varied slack before the step
        now = K.now_ms(s)
        decoding = K.decode_set(s)
        prompt = next((r for r in s.running if r.is_prefill_chunk), None) or (
            s.waiting.peek_request() if s.waiting else None
        )
        view = ViewWithFinished(
            finished,
            now=now,
            ready=[
                FakeLive(k, 0, deadline_ms=last[r.request_id] + SLO) for k, r in enumerate(decoding)
            ],  # fmt: skip
            queue=[
                FakeLive(
                    10_000,
                    prompt.num_tokens - prompt.num_computed_tokens,
                    prefilled=prompt.num_computed_tokens,
                    started=True,
                )
            ]
            if prompt is not None
            else [],  # fmt: skip
            ctx=sum(r.num_computed_tokens for r in decoding) / len(decoding) if decoding else 0.0,
        )
        plan = policy.plan(view, s._sw_table)
        expected = plan.prefill[0][1] if plan.prefill else 0
        out = s.schedule()
        got = out.num_scheduled_tokens.get(prompt.request_id, 0) if prompt is not None else 0
        assert got == expected, f"step at {now:.2f} ms: vLLM {got}, engine SLOWeave {expected}"
        if policy.control is not None:
            assert s._sw_control.summary() == policy.control.summary(), f"step at {now:.2f} ms"
        counts["compared"] += prompt is not None and bool(decoding)
        clock.advance_ms(4.0)
        before = {rid: s.requests[rid] for rid in out.num_scheduled_tokens}
        s.update_from_output(out, K.runner_output(s, out))
        finished = {}
        for rid, req in before.items():
            if rid not in s.requests:
                finished[rid] = req.num_output_tokens
                last.pop(rid, None)
            elif not req.is_prefill_chunk:
                last[rid] = K.now_ms(s)
        counts["finished"] += len(finished)
    return counts


@pytest.mark.parametrize("margin_control", ["region", "slo", "fixed"])
def test_the_chunk_equals_the_engine_policys_for_the_same_state(
    root: Path, margin_control: str
) -> None:
    """vLLM's scheduled chunk, against SLOWeave.plan on a view the test builds itself,
    with the plug-in's default margin controller and with the whole-budget plan."""
    settings = {} if margin_control == "region" else {"margin_control": margin_control}
    s, clock = make(root, c_max=1024, **settings)
    policy = SLOWeave(SLOWeaveConfig(c_max=1024, margin_control=margin_control))
    # 220 steps: region control's per-bucket biases (learned from the steps it scores)
    # hold chunks smaller early on than one scale does; 150 finished 13 requests there
    counts = same_steps(s, clock, policy, 220)
    assert counts["compared"] > 60 and counts["finished"] >= 16
    assert (s._sw_control is None) == (margin_control == "fixed")


def test_the_margin_controller_moves_as_the_engine_policys(root: Path) -> None:
    """On the same steps the plug-in's controller (kept across steps, scored at each
    schedule(), told of each freed request) is in the engine policy's state at every
    step (checked inside ``same_steps``), and that state moved: iterations the budget
    cut were scored, some of them misses, the scale left 1, and ``α`` was solved again
    from the finished requests' gap counts (after 16 of them: 220 steps, as above)."""
    s, clock = make(root, c_max=1024)
    policy = SLOWeave(SLOWeaveConfig(c_max=1024))
    prior_alpha = s._sw_control.alpha
    same_steps(s, clock, policy, 220, seed=8)
    state = s._sw_control.summary()
    assert state["counted"] > 10 and 0 < state["misses"] < state["counted"]
    assert state["scale"] != 1.0 and state["alpha"] != prior_alpha


# -- online validation --------------------------------------------------------------------
def serve(root: Path, run: str, slowdown: float = 1.0, steps: int = 400, **servecal) -> Path:
    """A run whose step times the truth draws (times ``slowdown``); returns its folder."""
    s, clock = make(root, run=run, flush_every=100, **servecal)
    rng = np.random.default_rng(11)
    made = 0
    for _ in range(steps):
        while made < 60 and rng.random() < 0.35:
            prompt = int(rng.choice([40, 300, 1500, 4000]))
            s.add_request(K.request(f"r{made}", prompt, int(rng.integers(8, 120))))
            made += 1
        if not s.has_requests():
            clock.advance_ms(5.0)
            continue
        before = K.decoding_kv(s)

        def took(out, before=before):
            n, c, ctx, prefix = K.shape(s, out, before)
            median = float(TRUTH.median(np.float64(n), np.float64(c), ctx, prefix))
            return slowdown * median * math.exp(TRUTH.sigma * rng.standard_normal())

        K.step(s, clock, took)
    s.shutdown()
    return root / run


@pytest.fixture(scope="module")
def run_dir(root: Path) -> Path:
    return serve(root, "run")


def test_run_folder_has_the_engine_schema_and_true_times(root: Path, run_dir: Path) -> None:
    import pandas as pd

    from servecal.sched.engine import ITERATION_COLUMNS
    from servecal.sched.result import REQUEST_COLUMNS

    it = pd.read_parquet(run_dir / "iterations.parquet")
    rq = pd.read_parquet(run_dir / "requests.parquet")
    assert list(it.columns[: len(ITERATION_COLUMNS)]) == list(ITERATION_COLUMNS)
    assert set(REQUEST_COLUMNS) <= set(rq.columns) and len(rq) == 60
    assert len(it) > 150 and (it["duration_ms"] > 0).all()
    # the measured time is what the fake GPU took: within the truth's noise of its median
    ratio = it["duration_ms"] / TRUTH.median(it["n_decode"], it["chunk"], it["ctx"], it["prefix"])
    assert ratio.min() > 0.8 and ratio.max() < 1.25 and abs(np.log(ratio).mean()) < 0.02
    assert (it["n_decode"] + it["chunk"] <= it["token_budget"].fillna(2048)).all()
    assert (it["start_ms"].diff().dropna() > 0).all()
    finished = rq["completion_ms"].notna()
    assert finished.sum() > 40 and (rq.loc[finished, "tokens_out"] >= 8).all()
    served = rq["first_token_ms"].notna()
    assert served.all() and (rq["first_token_ms"] >= rq["arrival_ms"]).all()


def test_servecal_validate_accepts_a_true_table_and_catches_a_slowdown(root: Path, run_dir: Path):
    ok = runner.invoke(app, ["validate", str(root / "table.json"), str(run_dir)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("verdict: valid")
    slow = serve(root, "run-slow", slowdown=1.3)
    bad = runner.invoke(app, ["validate", str(root / "table.json"), str(slow)])
    assert bad.exit_code == 1, bad.output
    assert bad.output.startswith("verdict: drifted")


def test_servecal_report_draws_the_run(root: Path, run_dir: Path) -> None:
    out = runner.invoke(app, ["report", str(run_dir), "--out", str(root / "report")])
    assert out.exit_code == 0, out.output
    assert (root / "report" / "report.html").stat().st_size > 10_000


def test_the_folder_is_written_while_serving(root: Path) -> None:
    s, clock = make(root, run="live", flush_every=20)
    warm(s, clock, 4)
    for _ in range(30):
        K.step(s, clock, 5.0)
    s._sw_log.flush()  # the periodic writes run on a thread: one now, in this one
    import pandas as pd

    assert len(pd.read_parquet(root / "live" / "iterations.parquet")) == s._sw_log.steps
    s.shutdown()


CONSTANT_METER = "servecal.integrations.vllm.energy:ConstantPowerMeter"


def test_a_meter_named_module_attr_gives_every_step_its_joules(root: Path) -> None:
    import pandas as pd

    s, clock = make(root, run="metered", energy_meter=CONSTANT_METER)
    warm(s, clock, 4)
    for _ in range(40):
        K.step(s, clock, 5.0)
    s.shutdown()
    it = pd.read_parquet(root / "metered" / "iterations.parquet")
    # 100 W of the wall time that passed, shared by the steps' (fake, 5 ms) durations
    assert len(it) > 40 and np.isfinite(it["energy_j"]).all() and (it["energy_j"] > 0).all()
    meta = json.loads((root / "metered" / "run.json").read_text())
    assert meta["energy_source"] == "fake:constant-100W"
    out = runner.invoke(app, ["report", str(root / "metered"), "--out", str(root / "rep-e")])
    assert out.exit_code == 0, out.output
    assert priced_per_token((root / "rep-e" / "report.html").read_text()) > 0


@pytest.mark.parametrize(
    ("meter", "message"),
    [
        ("nosuch_meter_module:Meter", "cannot import 'nosuch_meter_module'"),
        ("servecal.integrations.vllm.energy:NoSuchMeter", "has no 'NoSuchMeter'"),
        ("servecal.integrations.vllm.energy:UNAVAILABLE", "TypeError"),  # a str, not a class
        ("servecal.integrations.vllm.energy:StepEnergy", "TypeError"),  # needs a meter
        ("zeus", "must be one of auto, nvml, rapl, none or MODULE:NAME"),
    ],
)
def test_a_meter_that_does_not_load_stops_vllm_with_one_line(root, meter: str, message: str):
    with pytest.raises(PluginConfigError) as err:
        make(root, run=f"bad-meter-{abs(hash(meter))}", energy_meter=meter)
    text = str(err.value)
    assert text.startswith("servecal: ") and "\n" not in text and message in text
    if ":" in meter:
        assert meter in text


# -- asynchronous scheduling --------------------------------------------------------------
def test_async_step_time_is_the_gpu_time_of_each_step(root: Path) -> None:
    """Step k+1 is scheduled while k runs; the logged time is still k's own."""
    import pandas as pd

    s, clock = make(root, run="async", async_scheduling=True)
    for i in range(6):
        s.add_request(K.request(f"a{i}", 64, 30))
    s.add_request(K.request("long", 3000, 5))
    durations = []

    def scheduled():  # the model runner's answer is fixed when the step is scheduled
        out = s.schedule()
        return out, K.runner_output(s, out)

    inflight = scheduled()
    while True:
        nxt = scheduled() if s.has_requests() else None
        d = 3.0 + 0.5 * (len(durations) % 4)
        clock.advance_ms(d)
        durations.append(d)
        s.update_from_output(*inflight)
        if nxt is None or nxt[0].total_num_scheduled_tokens == 0:
            break
        inflight = nxt
    s.shutdown()
    it = pd.read_parquet(root / "async" / "iterations.parquet")
    assert np.allclose(it["duration_ms"], durations[: len(it)])
    assert (it["raw_ms"] >= it["duration_ms"] - 1e-9).all()
    budgets = it["budget_ms"][np.isfinite(it["budget_ms"])]
    assert len(budgets) >= 5 and np.allclose(budgets, SLO)  # each step gets its own SLO


def test_due_times_stay_exact_through_preemption(root: Path) -> None:
    """KV too small for the batch: vLLM preempts and re-admits. Before every step the
    plug-in's earliest due time equals the test's own, from each decoding request's
    last token; the run folder counts the preemptions (recomputes) and every token."""
    import pandas as pd

    settings = {"table": str(root / "table.json"), "tpot_slo_ms": SLO, "run_dir": str(root / "pre")}
    s = K.build(K.engine_args(root / "model", settings), num_blocks=70)  # 1120 KV tokens
    clock = K.FakeClock()
    K.use_clock(s, clock)
    for i in range(8):
        s.add_request(K.request(f"p{i}", 64, 150))
    last: dict[str, float] = {}
    preempted = 0
    rng = np.random.default_rng(5)
    for _ in range(600):
        if not s.has_requests():
            break
        clock.advance_ms(float(rng.uniform(0, 3)))
        decoding = [r for r in K.decode_set(s) if r.request_id in last]
        expect = min((last[r.request_id] + SLO for r in decoding), default=math.inf)
        assert s._sw_due.earliest(len(K.decode_set(s))) == expect
        out = s.schedule()
        for rid in out.preempted_req_ids or ():
            last.pop(rid, None)
            preempted += 1
        clock.advance_ms(4.0)
        s.update_from_output(out, K.runner_output(s, out))
        for rid in out.num_scheduled_tokens:
            req = s.requests.get(rid)
            if req is not None and not req.is_prefill_chunk:
                last[rid] = K.now_ms(s)
            elif req is None:
                last.pop(rid, None)
    s.shutdown()
    assert preempted > 0 and not s.has_requests()
    rq = pd.read_parquet(root / "pre" / "requests.parquet")
    assert rq["recomputes"].sum() == preempted
    assert (rq["tokens_out"] == 150).all() and rq["completion_ms"].notna().all()
