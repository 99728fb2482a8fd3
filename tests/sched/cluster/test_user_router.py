"""A router written outside the project loads by import path, with its options
(the example printed in docs/plugins.md), and a built-in router is one registry line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from userplugins import docs_example

from servecal.sched.cluster import ClusterSpec, ReplicaSpec
from servecal.sched.experiment import run
from servecal.sched.policies.registry import ROUTER, ROUTERS, PolicyEntry, PolicySpec


@pytest.fixture
def sticky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    code = docs_example("A router")
    assert "def route" in code
    (tmp_path / "sticky_router.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "sticky_router:Sticky"
    sys.modules.pop("sticky_router", None)


def _cluster(router: PolicySpec, n: int = 3) -> ClusterSpec:
    replicas = tuple(ReplicaSpec(PolicySpec("sloweave")) for _ in range(n))
    return ClusterSpec("mixed", replicas, router, tpot_slo_ms=25, n_requests=120, rate=40.0)


def test_the_docs_router_routes_by_import_path_with_its_options(sticky: str) -> None:
    cols = run(_cluster(PolicySpec.parse(sticky, {"sessions": "2"})), 0).request_columns
    # sessions=2: request rid goes to replica rid % 2 of 3, never to replica 2
    assert np.array_equal(cols["replica"], cols["rid"] % 2)
    default = run(_cluster(PolicySpec(sticky)), 0).request_columns  # sessions=64
    assert np.array_equal(default["replica"], (default["rid"] % 64) % 3)


def test_a_router_option_it_does_not_take_is_one_line(sticky: str) -> None:
    from servecal.util.errors import InputError

    with pytest.raises(InputError, match="sessions=many.*whole number"):
        PolicySpec.parse(sticky, {"sessions": "many"})
    with pytest.raises(InputError, match="shards"):
        PolicySpec.parse(sticky, {"shards": "2"})


def test_a_built_in_router_is_one_registry_line(sticky: str, monkeypatch) -> None:
    monkeypatch.setattr(ROUTERS, "entries", dict(ROUTERS.entries))
    ROUTERS.add_entry(PolicyEntry("sticky", "router: a session's requests to one replica",
                                  {ROUTER: sticky}))  # fmt: skip
    cols = run(_cluster(PolicySpec.parse("sticky", {"sessions": "1"})), 0).request_columns
    assert (cols["replica"] == 0).all()
    listed = {e["name"]: e for e in ROUTERS.listing()}
    assert listed["sticky"]["options"] == ["sessions: int = 64"]
