"""Drift-monitor benchmark: detection delay, false alarms, P99-only breaks (no engine).

    python benchmarks/drift.py                         # log-normal + spike noise model
    python benchmarks/drift.py --calibration DIR       # residuals of a real calibration
    python benchmarks/drift.py --e2e                   # SLOWeave, +15% drift mid-run

Each iteration's log residual ``log(actual / P50)`` is drawn from a *pool*: either
2,000,000 draws of the noise model (log-normal σ plus rare stalls), or the
residuals of a real ``servecal calibrate`` folder (``samples.parquet`` against its
``costtable.json`` P50, model error included). The monitor's profile is built
from an independent calibration sample of that pool, as ``fit`` would see it;
its bound ``P99 + δ`` is the pool's exact 99% quantile (a perfectly calibrated
table). Streams run vectorised through :class:`StreamBank`, the monitor's own
recursions, many streams at a time.

* delay: ``--pre`` in-control iterations, then the median × (1 + shift) until
  an alarm; the delay is counted from the change;
* false alarms: ``--streams × --length`` stationary iterations, restart after
  each alarm; rate per 10⁶ iterations with a Poisson 95% upper bound;
* P99-only break: after the change, 1% of iterations are drawn from the pool's
  top 1% instead, so the rate above P99 doubles (1% → ~2%) while the median
  moves by about 0.01 quantile.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from servecal.costmodels.drift import DriftConfig, NoiseProfile
from servecal.costmodels.drift.detectors import StreamBank
from servecal.costmodels.drift.thresholds import derive_thresholds

BLOCK = 2000


def model_pool(sigma: float, spike_p: float, spike_lo: float, spike_hi: float, seed: int):
    rng = np.random.default_rng(seed)
    r = sigma * rng.standard_normal(2_000_000)
    s = rng.random(r.size) < spike_p
    r[s] += np.log(rng.uniform(spike_lo, spike_hi, int(s.sum())))
    return r


def calibration_pool(folder: Path, against: str) -> np.ndarray:
    """Log residuals of a calibration folder's rows.

    ``point``: against the median of the point's other repeats (measurement noise);
    ``table``: against the folder's ``costtable.json`` P50 (noise + model error).
    """
    from servecal.costmodels.samples import POINT_COLUMNS, read_samples

    frame = read_samples(folder / "samples.parquet").frame
    ms = frame["ms"].to_numpy(dtype=float)
    if against == "point":  # leave-one-out: a row is not compared with itself
        logs = np.log(ms)
        keys = frame.groupby(list(POINT_COLUMNS), sort=False).ngroup().to_numpy()
        out = np.empty_like(logs)
        for k in np.unique(keys):
            idx = np.flatnonzero(keys == k)
            v = logs[idx]
            for j, i in enumerate(idx):
                out[i] = v[j] - np.median(np.delete(v, j))
        return out
    from servecal.costmodels import CostTable

    table = CostTable.load(folder / "costtable.json")
    cols = [frame[c].to_numpy(dtype=float) for c in POINT_COLUMNS]
    return np.log(ms / np.asarray(table.predict(*cols, q=0.5), dtype=float))


class Source:
    """Log residuals bootstrapped from a pool; ``tail`` draws from its top 1%."""

    def __init__(self, pool: np.ndarray) -> None:
        self.pool = np.sort(pool)
        self.q99 = float(np.quantile(self.pool, 0.99))
        self.top = self.pool[self.pool > self.q99]

    def draw(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return self.pool[rng.integers(0, self.pool.size, shape)]

    def draw_tail_doubled(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        r = self.draw(rng, shape)
        swap = rng.random(shape) < 0.01
        r[swap] = self.top[rng.integers(0, self.top.size, int(swap.sum()))]
        return r


def delays(
    src: Source, profile: NoiseProfile, th, rng, streams: int, pre: int, post: int, kind: str,
    shift: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """Iterations from the change to the first alarm, per stream."""
    bank = StreamBank(th, streams)
    for start in range(0, pre + post, BLOCK):
        n = min(BLOCK, pre + post - start)
        after = np.arange(start, start + n)[:, None] >= pre
        if kind == "tail":
            r = np.where(
                after, src.draw_tail_doubled(rng, (n, streams)), src.draw(rng, (n, streams))
            )
        else:
            r = src.draw(rng, (n, streams)) + after * math.log1p(shift)
        bank.feed(profile.standardise(r), r > src.q99)
        first = bank.first_any()
        if (first >= 0).all():
            break
    first = bank.first_any()
    early = int(((first >= 0) & (first < pre)).sum())
    ok = first >= pre
    # a stream that never alarmed counts as "later than the horizon", not as absent
    d = np.where(ok, first - pre, np.inf)[(first < 0) | ok]
    firsts = {k: v for k, v in bank.first.items()}
    which = {
        det: int(sum(1 for j in np.flatnonzero(ok) if firsts[det][j] == first[j]))
        for det in StreamBank.DETECTORS
    }
    return {
        "streams": streams,
        "detected": int(ok.sum()),
        "missed": int((first < 0).sum()),
        "alarm_before_change": early,
        "median_delay": _finite(np.median(d)) if d.size else None,
        "p90_delay": _finite(np.quantile(d, 0.9)) if d.size else None,
        "first_detector": which,
        "horizon": post,
    }


class _Progress:
    """``label: done/total`` on stderr, rewritten in place (no UI library here)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        end = "\n" if self.done >= self.total else ""
        print(f"\r{self.label}: {self.done}/{self.total}", end=end, file=sys.stderr, flush=True)


def _finite(x: float) -> float | str:
    return float(x) if math.isfinite(x) else "> horizon"


def false_alarms(src: Source, profile: NoiseProfile, th, rng, streams: int, length: int) -> dict:
    bank = StreamBank(th, streams)
    bar = _Progress("stationary streams", length)
    for start in range(0, length, BLOCK):
        n = min(BLOCK, length - start)
        r = src.draw(rng, (n, streams))
        bank.feed(profile.standardise(r), r > src.q99)
        bar.advance(n)
    total = streams * length
    alarms = sum(bank.alarms.values())
    upper = 3.0 if alarms == 0 else alarms + 2.0 * math.sqrt(alarms) + 2.0  # ~95% Poisson
    return {
        "iterations": total,
        "alarms": dict(bank.alarms),
        "per_million": alarms / total * 1e6,
        "per_million_upper95": upper / total * 1e6,
    }


def sloweave_under_drift(seeds: int, n_requests: int, sigma: float, factor: float) -> dict:
    """SLOWeave · mixed (default rate) · TPOT 25 ms, oracle predictor, × ``factor`` mid-run.

    Per seed: a clean run (monitor attached) fixes the run's length; the drift
    starts at half of it. Then the drifted run without and with adaptive margins.
    """
    from servecal.costmodels.drift import AdaptiveMargin, DriftMonitor
    from servecal.sched.engine import Engine, EngineConfig
    from servecal.sched.experiment import RunSpec, default_rate, summarize
    from servecal.sched.policies import PolicySpec, make_policy
    from servecal.sched.truth import AnalyticTruth, Drift
    from servecal.sched.workloads import generate

    truth = AnalyticTruth(sigma=sigma)
    profile = NoiseProfile.lognormal(sigma)

    def one(seed: int, drift: Drift | None, adaptive: bool):
        ws, es = np.random.SeedSequence(seed).spawn(2)
        reqs = generate("mixed", default_rate("mixed"), n_requests=n_requests, tpot_slo_ms=25.0,
                        rng=np.random.default_rng(ws))  # fmt: skip
        monitor = DriftMonitor(profile)
        pred = AdaptiveMargin(truth.oracle(), monitor) if adaptive else truth.oracle()
        engine = Engine(reqs, make_policy("sloweave"), pred,
                        truth.executor(np.random.default_rng(es), drift), EngineConfig(),
                        observers=[monitor], policy_name="sloweave")  # fmt: skip
        res = engine.run()
        alarms = res.observers["DriftMonitor"]["drift"]["alarms"]
        spec = RunSpec("mixed", PolicySpec("sloweave"), 25.0, default_rate("mixed"))
        return res, summarize(spec, res), alarms

    rows: dict[str, list[dict[str, float]]] = {"no_drift": [], "drift": [], "drift_adaptive": []}
    bar = _Progress("SLOWeave runs", 3 * seeds)
    for seed in range(seeds):
        res, s, alarms = one(seed, None, False)
        at = float(res.iterations["start_ms"].iloc[-1]) / 2
        rows["no_drift"].append({**_pick(s), "false_alarms": len(alarms)})
        bar.advance()
        for name, adaptive in (("drift", False), ("drift_adaptive", True)):
            _, s, alarms = one(seed, Drift(at, factor), adaptive)
            first = min((a["time_ms"] for a in alarms), default=math.nan)
            rows[name].append({**_pick(s), "detected_after_ms": first - at})
            bar.advance()
    means = {k: {m: float(np.mean([r[m] for r in v])) for m in v[0]} for k, v in rows.items()}
    return {"seeds": seeds, "requests": n_requests, "sigma": sigma, "factor": factor,
            "mean_over_seeds": means, "per_seed": rows}  # fmt: skip


def _pick(summary: dict[str, Any]) -> dict[str, float]:
    return {k: float(summary[k]) for k in ("tpot_attainment", "attainment", "goodput")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", type=Path, help="folder from `servecal calibrate`")
    ap.add_argument(
        "--against",
        choices=("point", "table"),
        default="point",
        help="calibration residuals against point medians or the table's P50",
    )
    ap.add_argument("--sigma", type=float, default=0.10, help="noise model: log-normal σ")
    ap.add_argument("--spike-p", type=float, default=0.01, help="noise model: stall probability")
    ap.add_argument("--spike-range", type=float, nargs=2, default=(1.5, 3.0))
    ap.add_argument("--cal-rows", type=int, default=4000, help="residuals the profile sees")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--length", type=int, default=100_000, help="stationary stream length")
    ap.add_argument("--pre", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--e2e", action="store_true", help="only the SLOWeave drift experiment")
    ap.add_argument("--e2e-seeds", type=int, default=5)
    ap.add_argument("--e2e-requests", type=int, default=2000)
    ap.add_argument("--e2e-sigma", type=float, default=0.05, help="truth's log-normal σ")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    if args.e2e:
        out = sloweave_under_drift(args.e2e_seeds, args.e2e_requests, args.e2e_sigma, 1.15)
        print(json.dumps(out, indent=1))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
        return 0

    if args.calibration:
        pool = calibration_pool(args.calibration, args.against)
        noise = {"source": str(args.calibration), "against": args.against, "rows": int(pool.size)}
    else:
        lo, hi = args.spike_range
        pool = model_pool(args.sigma, args.spike_p, lo, hi, args.seed + 1)
        noise = {"source": "model", "sigma": args.sigma, "spike_p": args.spike_p,
                 "spike_range": [lo, hi]}  # fmt: skip
    src = Source(pool)
    cal = src.draw(rng, (min(args.cal_rows, pool.size), 1)).ravel()
    profile = NoiseProfile.from_residuals(cal)
    config = DriftConfig()
    th = derive_thresholds(
        profile, min_shift=config.min_shift, arl0=config.false_alarm_every,
        tail_p0=config.tail_p0, tail_ratio=config.tail_ratio,
    )  # fmt: skip
    noise.update(
        {
            "robust_sigma": profile.scale,
            "profile": profile.to_dict(),
            "p99_over_p50": math.exp(src.q99 - float(np.median(pool))),
            "stall_rate_above_2x": float(np.mean(pool > math.log(2.0))),
        }
    )
    out: dict[str, Any] = {"noise": noise, "thresholds": th.to_dict()}
    t0 = time.perf_counter()
    d_streams = max(args.streams // 2, 200)
    out["slowdown_10pct"] = delays(src, profile, th, rng, d_streams, args.pre, 3000, "mean", 0.10)
    out["slowdown_5pct"] = delays(src, profile, th, rng, d_streams, args.pre, 8000, "mean", 0.05)
    out["p99_only_break"] = delays(src, profile, th, rng, d_streams, args.pre, 60_000, "tail")
    out["stationary"] = false_alarms(src, profile, th, rng, args.streams, args.length)
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
