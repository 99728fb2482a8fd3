"""The decode batch's cliffs (sched/policies/decode_cliff.py) and SLOWeave's hold on them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from servecal.sched import experiment as ex
from servecal.sched.coarse_replay import coarse_replay
from servecal.sched.policies.decode_cliff import MIN_SEEN, DecodeCliff
from servecal.sched.policies.miss_control import GapMissControl
from servecal.sched.policies.region_control import RegionMissControl
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.policies.sloweave import SLOWeaveConfig, controlled_chunk


def table_decodes(n: int) -> float:
    """A smooth table's decode-only median: 2 ms and 0.05 ms a decode."""
    return 2.0 + 0.05 * n


def learned(biases: dict[int, float], times: int = MIN_SEEN) -> DecodeCliff:
    """A cliff learner that has seen each batch size ``times`` times at its ``log g``."""
    cliff = DecodeCliff()
    for n, log_g in biases.items():
        for _ in range(times):
            cliff.add(n, log_g)
    return cliff


#: 40-45 decodes cost 0.65× the table, 46-50 cost 2.4× it: a nearest-point replay's step
STEP_AT_46 = {**{n: -0.45 for n in range(40, 46)}, **{n: 0.9 for n in range(46, 51)}}


def test_a_step_no_larger_batch_repays_holds_the_batch_below_it() -> None:
    cliff = learned(STEP_AT_46)
    assert not cliff.holds(45, table_decodes)
    assert cliff.holds(46, table_decodes)
    assert cliff.holds(50, table_decodes)  # past it: still not grown further


def test_a_step_a_larger_batch_repays_is_grown_through() -> None:
    # 1 and 16 decodes as the grid's neighbours: 5-16 decodes cost what 16 do, so 4
    # decodes cost the table's 0.9×, 5 decodes 2.2× it, but 16 decodes in the same time
    # as 5 decode more a millisecond than 4 do
    biases = {3: -0.1, 4: -0.1, **{n: 0.8 - 0.06 * (n - 5) for n in range(5, 17)}}
    cliff = learned(biases)
    assert not cliff.holds(5, table_decodes)
    assert not cliff.holds(16, table_decodes)


def test_a_step_with_nothing_seen_above_it_is_judged_by_the_table_beyond() -> None:
    # only 5-7 seen above the step: 10, 20 and 40 decodes priced at the table × the
    # bias above it decode more a millisecond than 4 do, so the step does not bind
    cliff = learned({3: 0.0, 4: 0.0, 5: 0.8, 6: 0.8, 7: 0.8})
    assert not cliff.holds(6, table_decodes)
    # a table whose decodes cost more than linearly beyond (no batch repays): it binds
    steep = learned({3: 0.0, 4: 0.0, 5: 0.8, 6: 0.8, 7: 0.8})
    assert steep.holds(6, lambda n: 2.0 * n)


def test_a_step_seen_too_few_times_does_not_bind() -> None:
    cliff = learned(STEP_AT_46, times=MIN_SEEN - 1)
    assert not cliff.holds(48, table_decodes)


def test_a_stall_at_the_largest_size_seen_is_not_a_step() -> None:
    # 46 decodes seen three times, one of them stalled ×2: its median is the table's
    below = {n: -0.05 for n in range(40, 46)}
    stalled = learned(below)
    for log_g in (0.0, 0.69, 0.02):
        stalled.add(46, log_g)
    assert not stalled.holds(46, table_decodes)
    stepped = learned(below)
    for log_g in (0.7, 0.0, 0.72):  # two of three dear: the median is
        stepped.add(46, log_g)
    assert stepped.holds(46, table_decodes)


def test_noise_and_stalls_around_a_right_table_never_bind() -> None:
    rng = np.random.default_rng(0)
    cliff = DecodeCliff()
    for _ in range(4000):
        n = int(rng.integers(1, 80))
        log_g = rng.normal(0.0, 0.1) + (1.0 if rng.random() < 0.01 else 0.0)  # 1% ×2.7
        cliff.add(n, min(log_g, 1.0))
    assert not any(cliff.holds(n, table_decodes) for n in range(2, 81))


def test_only_the_region_control_holds_and_only_when_asked() -> None:
    assert not GapMissControl().holds(46, table_decodes)
    on, off = RegionMissControl(), RegionMissControl(hold_cliffs=False)
    on.cliff = off.cliff = learned(STEP_AT_46)
    assert on.holds(46, table_decodes) and not off.holds(46, table_decodes)
    assert SLOWeaveConfig(control_hold_cliffs=False).controller().hold_cliffs is False  # type: ignore[union-attr]


def test_a_held_prompt_is_left_one_token_short_by_the_engine_and_the_vllm_planner() -> None:
    from servecal.integrations.vllm.planner import plan_chunk
    from servecal.sched.experiment.models import load_predictor

    table = load_predictor("fitted", "device")
    cfg = SLOWeaveConfig()
    engine, plugin = cfg.controller(), cfg.controller()
    for control in (engine, plugin):
        control.cliff = learned(STEP_AT_46)  # type: ignore[union-attr]
    # 45 decodes, a 300-token prompt left, a deadline 25 ms away: it all fits
    args = (table, cfg, 45, 1024.0, 0, 300, 0.0, 25.0, 0.0)
    c, _, _ = controlled_chunk(engine, *args, 300)
    assert c == 299
    plan = plan_chunk(table, cfg, 0.0, 45, 45, 1024.0, 25.0, 0, 300, 8192, control=plugin)
    assert plan == (299, 45 + 299, 25.0)  # vLLM's token budget: the decodes + the chunk
    # 44 decodes: completing it makes 45, below the step
    assert controlled_chunk(engine, table, cfg, 44, 1024.0, 0, 300, 0.0, 25.0, 0.0, 300)[0] == 300
    # without the prompt's remainder (0: unknown) nothing is cut
    assert controlled_chunk(engine, *args)[0] == 300


def test_the_cliff_learns_from_the_iterations_the_controller_counts() -> None:
    control = RegionMissControl()

    def fit(top: int, scale: float) -> int:
        return top

    for _ in range(MIN_SEEN):
        control.settle(0.0)
        control.choose(fit, 100, 0, 46, 1024.0, lambda c: 5.0)
        control.count(50.0, 100, 100, 0.0, lambda c: 5.0)
        control.settle(10.0)  # 10 ms against a 5 ms median
    kept = control.cliff.by_n[46]
    assert list(kept) == pytest.approx([math.log(2.0)] * MIN_SEEN)


# ---------------------------------------------------------------- on a coarse replay
#: benchmarks/robustness.py's ``coarse-tile``: 16 and 128 decodes are the grid's
#: neighbours, so its replay steps at 46 decodes (24.5 ms alone at 3,000 tokens of
#: context, where the table says 5.4)
TILE_SPEC = "device:sigma=0.05,spike_prob=0.01,spike_lo=1.6,spike_hi=1.6,tile=256"
TILE_GRID = {
    "n_decode": (0, 1, 16, 128, 512),
    "chunk": (0, 64, 256, 1024, 4096, 16384),
    "ctx": (128, 1024, 8192),
    "prefix": (0, 1024, 4096),
}


@pytest.fixture(scope="module")
def coarse_tile(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder: Path = tmp_path_factory.mktemp("coarse-tile")
    return coarse_replay(TILE_SPEC, TILE_GRID, folder, 43, 4343)


def _long_25ms(truth: str, table: str, hold: bool, rate: float) -> tuple[dict, int]:
    policy = PolicySpec.parse("sloweave", {"control_hold_cliffs": str(hold).lower()})
    spec = ex.RunSpec("long", policy, 25.0, 1.0, n_requests=600, truth=truth, predictor=table)
    run = ex.run(spec.at_rate(rate), 0)
    over = int(np.sum(np.asarray(run.iterations["n_decode"]) >= 46))
    return ex.summarize(spec.at_rate(rate), run), over


def test_holding_the_batch_below_a_replays_step_keeps_attainment(
    coarse_tile: tuple[str, str],
) -> None:
    # 27 req/s, long prompts, 25 ms TPOT: both runs step past 46 decodes once, ~10 s
    # in, where every step costs the whole TPOT (measured: 36 steps with the hold, 52
    # without). After it the held run prefills chunks of 1,231 tokens on average with
    # at most 45 decodes (attainment 0.92); the other's budget has shrunk for the
    # misses to chunks of 351 tokens, and its queue backs up (0.40)
    held, held_over = _long_25ms(*coarse_tile, True, 27.0)
    free, free_over = _long_25ms(*coarse_tile, False, 27.0)
    assert held["attainment"] >= 0.9 and held["tpot_attainment"] >= 0.9
    assert free["attainment"] < 0.6
    assert 0 < held_over < free_over
