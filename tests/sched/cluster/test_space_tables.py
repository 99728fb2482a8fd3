"""A capacity plan's [workload], [target] and [search] tables: what they read, and each
mistake as one line naming the key (the device tables are tests/cli/test_plan.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecal.sched.cluster.space import load_space
from servecal.util.errors import InputError

TRACE = Path(__file__).resolve().parents[3] / "sched" / "data" / "azure_conv_head4000.csv"

WORKLOAD = f'trace = "{TRACE}"\nrequests = 300\nrate = 400\ntpot_slo_ms = 25\n'
SEARCH = 'replicas = [1, 6]\npolicies = ["fixed-512"]\nrouters = ["round-robin"]\n'
DEVICE = (
    '[[device]]\nname = "A100"\nprice_per_gpu_hour = 2.0\n'
    '[[device.tp]]\nsize = 1\nfleet = "A100x1"\n'
)


def _load(tmp_path: Path, workload: str = WORKLOAD, search: str = SEARCH, extra: str = ""):
    path = tmp_path / "plan.toml"
    path.write_text(f"[workload]\n{workload}\n{extra}[search]\n{search}\n{DEVICE}")
    return load_space(path)


def test_a_plan_reads_into_its_space(tmp_path: Path) -> None:
    space = _load(
        tmp_path, workload=WORKLOAD + "seeds = [0, 1]\n", extra="[target]\nattainment = 0.8\n"
    )
    assert space.workload == f"trace:{TRACE.resolve()}"
    assert (space.rate, space.n_requests, space.tpot_slo_ms) == (400.0, 300, 25.0)
    assert space.seeds == (0, 1) and space.slo_classes is None and space.target == 0.8
    assert space.replicas == (1, 6)
    assert [p.label for p in space.policies] == ["fixed-512"]
    assert [r.label for r in space.routers] == ["round-robin"]
    assert [h.name for h in space.hardware] == ["A100x1"]


def test_a_named_workload_with_its_rate(tmp_path: Path) -> None:
    space = _load(tmp_path, workload='name = "mixed"\nrate = 20\ntpot_slo_ms = 25\n')
    assert (space.workload, space.rate, space.n_requests) == ("mixed", 20.0, 2000)


BAD = [
    (dict(workload='trace = "x.csv"\nname = "mixed"\ntpot_slo_ms = 25\n'), "one of them"),
    (dict(workload="tpot_slo_ms = 25\n"), "one of them"),
    (dict(workload='name = "mixed"\ntpot_slo_ms = 25\n'), "needs rate = REQ_PER_S"),
    (dict(workload='name = "nope"\nrate = 2\ntpot_slo_ms = 25\n'), "nope"),
    (dict(workload=WORKLOAD.replace("rate = 400", "rate = 0")), "workload.rate = 0"),
    (dict(workload=WORKLOAD.replace("requests = 300", "requests = 0")), "workload.requests"),
    (dict(workload=WORKLOAD.replace("tpot_slo_ms = 25", "tpot_slo_ms = -1")), "tpot_slo_ms"),
    (dict(workload=WORKLOAD.replace("tpot_slo_ms = 25\n", "")), "missing 'tpot_slo_ms'"),
    (dict(workload=WORKLOAD + "seeds = []\n"), "workload.seeds"),
    (dict(workload=WORKLOAD + "slo_classes = 3\n"), "workload.slo_classes"),
    (dict(workload=WORKLOAD + "burst = 2\n"), "[workload]: unknown key 'burst'"),
    (dict(extra="[target]\nattainment = 1.5\n"), "target.attainment"),
    (dict(search=SEARCH.replace("replicas = [1, 6]", "replicas = [1]")), "search.replicas"),
    (dict(search=SEARCH.replace('policies = ["fixed-512"]', "policies = []")), "at least one"),
    (dict(search=SEARCH.replace('routers = ["round-robin"]', "routers = 3")), "search.routers"),
]


@pytest.mark.parametrize(("parts", "message"), BAD)
def test_each_mistake_is_one_line_naming_the_key(tmp_path: Path, parts: dict, message: str):
    with pytest.raises(InputError) as exc:
        _load(tmp_path, **parts)
    text = str(exc.value)
    assert "\n" not in text and message in text, text
