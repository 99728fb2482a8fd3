"""``servecal plan`` with disaggregated candidates: both shapes answered, modes in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plankit import attainment, device, local_and_ray_plans, plan_head, run_plan

from servecal.sched.cluster.disagg_space import PoolPair
from servecal.sched.cluster.space import load_space

ROOT = Path(__file__).resolve().parents[2]
SPLIT = """
[disaggregated]
prefill_policies = ["fcfs-chunk-512"]
ratios = [[1, 1], [1, 2]]
links = ["ib-ndr", {name = "slow", gbytes_per_s = 1, latency_ms = 2}]
"""
SMALL = (
    plan_head(200, 200, 25, 0.9, (1, 6), ["fixed-512"], ["round-robin"])
    + SPLIT
    + device("A100", 2.0, fleet="A100x1")
)


def test_plan_answers_aggregated_and_disaggregated_with_modes_in_json(tmp_path):
    result, out = run_plan(tmp_path, SMALL, "--no-frontier")
    assert result.exit_code == 0, result.output
    assert "cheapest aggregated:" in result.output
    assert "cheapest disaggregated:" in result.output
    doc = json.loads((out / "plan.json").read_text())
    rows = doc["rows"]
    assert {r["mode"] for r in rows} == {"aggregated", "disaggregated"}
    assert len(rows) == 1 + 2 * 2  # 1 aggregated, 2 ratios × 2 links
    split = doc["cheapest"]["disaggregated"]
    assert (
        split["prefill_replicas"] * split["ratio"][1]
        == split["decode_replicas"] * split["ratio"][0]
    )
    # its unit count meets the target and one unit fewer misses it
    space = load_space(tmp_path / "plan.toml")
    n = split["units"]
    assert attainment(space, split["config"], n) >= 0.9
    if n > 1:
        assert attainment(space, split["config"], n - 1) < 0.9
    # the cost of a unit: P prefill and D decode replicas at the device's price
    p, d = split["ratio"]
    assert split["cost_per_hour"] == pytest.approx(n * (p + d) * 2.0)
    # the cheapest of all is the cheaper of the two modes' cheapest
    modes = doc["cheapest"]
    assert doc["answer"]["cost_per_hour"] == min(m["cost_per_hour"] for m in modes.values())


def test_json_rows_carry_the_mode(tmp_path):
    result, _ = run_plan(tmp_path, SMALL, "--no-frontier", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert all(r["mode"] in ("aggregated", "disaggregated") for r in doc["rows"])
    assert any(r["mode"] == "disaggregated" for r in doc["rows"])
    assert set(doc["cheapest"]) == {"aggregated", "disaggregated"}


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_a_disaggregated_plan_on_ray_gives_the_local_answer(tmp_path, ray_cluster):
    a, b = local_and_ray_plans(tmp_path, SMALL)
    for mode in ("aggregated", "disaggregated"):
        x, y = a["cheapest"][mode], b["cheapest"][mode]
        assert (x["config"], x["replicas"], x["attainment"]) == (
            y["config"], y["replicas"], y["attainment"])  # fmt: skip


BAD = [
    ("ratios = [[1, 0]]", "disaggregated.ratios"),
    ('links = ["token-ring"]', "unknown link"),
    ('pools = [["H100x1", "A100x1"]]', "disaggregated.pools"),
    ('model = "gpt-9"', "unknown model"),
    ("colour = 1", "unknown key 'colour'"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_a_bad_disaggregated_table_is_one_line_and_exit_2(tmp_path, line, message):
    text = SMALL.replace('prefill_policies = ["fcfs-chunk-512"]',
                         f'prefill_policies = ["fcfs-chunk-512"]\n{line}')  # fmt: skip
    if line.startswith(("ratios", "links")):
        key = line.split(" =")[0]
        text = "\n".join(x for x in text.splitlines() if not x.startswith(key + " = [[1, 1]")
                         and not x.startswith(key + ' = ["ib-ndr"'))  # fmt: skip
        text = text.replace("[disaggregated]", f"[disaggregated]\n{line}", 1)
        text = text.replace(f"\n{line}\n", "\n", 1) if text.count(line) > 1 else text
    result, out = run_plan(tmp_path, text)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_the_shipped_disaggregated_example_reads():
    space = load_space(ROOT / "examples" / "capacity" / "azure_h100_disagg.toml")
    pairs = [h for h, _, _ in space.configs if isinstance(h, PoolPair)]
    # 2 TP sizes × 2 policies × 2 routers aggregated; 2 × 3 ratios × 2 links × 2 routers split
    assert len(space.configs) == 8 + 24 and len(pairs) == 24
    assert {p.link.name for p in pairs} == {"nvlink", "roce-100g"}


def test_a_faster_links_miss_settles_the_slower_links_count_without_a_simulation(tmp_path):
    from servecal.sched.cluster.planner import _settled, candidates

    path = tmp_path / "plan.toml"
    path.write_text(SMALL)
    configs = candidates(load_space(path))
    split = [c for c in configs if isinstance(c.hardware, PoolPair)]
    fast = {c.hardware.ratio: c for c in split if c.hardware.link.name == "ib-ndr"}
    slow = {c.hardware.ratio: c for c in split if c.hardware.link.name == "slow"}
    # links are searched fastest first, and only the same pools, ratio, policy and
    # router on a faster link dominate
    assert all(configs.index(fast[r]) < configs.index(slow[r]) for r in fast)
    assert [o.index for o in slow[(1, 2)].dominators] == [fast[(1, 2)].index]
    assert fast[(1, 2)].dominators == []
    fast[(1, 2)].search.record(3, False)
    assert _settled(slow[(1, 2)], 3) and _settled(slow[(1, 2)], 2)
    assert not _settled(slow[(1, 2)], 4) and not _settled(slow[(1, 1)], 1)
