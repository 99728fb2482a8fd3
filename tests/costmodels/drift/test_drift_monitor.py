"""The monitor: quiet on stationary streams, catches shifts and broken tails, says where."""

import numpy as np
import pytest

from servecal.costmodels.drift import DriftMonitor
from servecal.costmodels.drift.detectors import StreamBank

N = 6000
CHANGE = 3000


def points(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(1, 64, n), rng.choice([0, 128, 512, 2048], n)


def test_stationary_stream_stays_ok(feed, draw) -> None:
    rng = np.random.default_rng(0)
    mon = feed(draw(rng, N), *points(rng, N))
    s = mon.summary()["drift"]
    assert mon.state == "ok" or s["changes"][-1]["to"] == "ok"
    assert s["alarms"] == []
    assert s["iterations"] == N
    assert "holds" in s["recommendation"]


def test_slowdown_detected_soon_after_change_with_its_size(feed, draw) -> None:
    rng = np.random.default_rng(1)
    x = draw(rng, N)
    x[CHANGE:] *= 1.10
    mon = feed(x, *points(rng, N))
    s = mon.summary()["drift"]
    assert mon.state == "drift"
    alarm = s["alarms"][0]
    assert alarm["detector"] == "slowdown"
    assert CHANGE <= alarm["index"] < CHANGE + 300
    assert abs(alarm["onset_index"] - CHANGE) < 60
    assert alarm["time_ms"] == pytest.approx(10.0 * alarm["index"])
    assert s["factor"] == pytest.approx(1.10, abs=0.03)
    assert [c["to"] for c in s["changes"]][-1] == "drift"
    assert "recalibrate" in s["recommendation"]


def test_speedup_is_a_separate_detector(feed, draw) -> None:
    rng = np.random.default_rng(2)
    x = draw(rng, N)
    x[CHANGE:] /= 1.10
    mon = feed(x, *points(rng, N))
    dets = [a["detector"] for a in mon.alarms]
    assert dets[0] == "speedup"
    assert "slowdown" not in dets
    assert mon.summary()["drift"]["factor"] < 0.95


def test_p99_only_break_is_caught_by_the_tail_test(feed, draw) -> None:
    rng = np.random.default_rng(3)
    n = 30_000
    x = draw(rng, n)
    tail = draw(rng, n, spike_p=0.03)  # same median, stalls six times as often
    x[CHANGE:] = tail[CHANGE:]
    mon = feed(x, *points(rng, n))
    dets = {a["detector"]: a for a in mon.alarms}
    assert "tail" in dets
    assert dets["tail"]["index"] > CHANGE
    assert "slowdown" not in dets or dets["slowdown"]["index"] > dets["tail"]["index"]
    assert dets["tail"]["exceed_rate"] > 0.015


def test_regional_drift_is_attributed_to_its_region(feed, draw) -> None:
    rng = np.random.default_rng(4)
    n_dec, chunk = points(rng, N)
    x = draw(rng, N)
    hit = (np.arange(N) >= CHANGE // 2) & (chunk == 2048) & (n_dec >= 32)
    x[hit] *= 1.25
    mon = feed(x, n_dec, chunk)
    assert mon.state == "drift"
    bad = [r for r in mon.regions() if r["status"] == "drift"]
    assert [r["region"] for r in bad] == ["n_decode 32-127, chunk 1024+"]
    assert bad[0]["factor"] == pytest.approx(1.25, abs=0.05)
    assert "n_decode 32-127, chunk 1024+" in mon.recommendation()


def test_malformed_and_idle_records_are_skipped(profile, config) -> None:
    mon = DriftMonitor(profile, config)
    out = mon.observe({"n_decode": 1, "chunk": 0, "pred_p50": 0.0, "pred_p99": 0.0,
                       "margin": 0.0, "actual_ms": 1.0})  # fmt: skip
    assert out == {"drift_state": "ok"}
    assert mon.summary()["drift"]["skipped"] == 1


def test_stream_bank_matches_the_scalar_monitor(profile, config, p99_ratio, draw) -> None:
    rng = np.random.default_rng(5)
    streams, n = 4, 3000
    x = draw(rng, n * streams).reshape(n, streams)
    x[1000:] *= np.array([1.0, 1.08, 0.9, 1.0])
    x[1000:, 3] = draw(rng, 2000, spike_p=0.05)
    mon0 = DriftMonitor(profile, config)
    bank = StreamBank(mon0.thresholds, streams)
    bank.feed(profile.standardise(np.log(x)), x > p99_ratio)
    for j in range(streams):
        mon = DriftMonitor(profile, config)
        for i in range(n):
            rec = {"index": i, "n_decode": 4, "chunk": 0, "pred_p50": 1.0}
            rec.update({"pred_p99": p99_ratio, "margin": 0.0, "actual_ms": float(x[i, j])})
            mon.observe(rec)
        first = {a["detector"]: a["index"] for a in mon.alarms}
        for det in StreamBank.DETECTORS:
            assert bank.first[det][j] == first.get(det, -1), (j, det)
    assert (bank.first_any()[1:] > 0).all()
