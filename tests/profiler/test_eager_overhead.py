"""Host-overhead model: fit, file formats, CLI, and the held-out error on published steps."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.samples import read_samples
from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.holdout import gpu_ms, holdout
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.overhead import HostOverhead, fit_overhead, read_parameters
from servecal.profiler.importers.published import halves, sarathi_steps, splitwise_steps
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

EAGER = Path(__file__).parents[1] / "data" / "eager"
AIC = Path(__file__).parents[1] / "data" / "profiler" / "aiconfigurator"


def test_fit_recovers_the_parameters_that_made_the_steps():
    rng = np.random.default_rng(3)
    gpu = rng.uniform(5, 200, 40)
    attention = gpu * rng.uniform(0.0, 0.3, 40)
    n = rng.integers(1, 128, 40).astype(float)
    truth = HostOverhead(floor_ms=30.0, c0_ms=4.0, c1_ms=0.5, gpu_scale=1.2, attention_scale=2.0)
    steps = truth.step_ms(gpu, n, attention)
    fitted = fit_overhead(gpu, n, steps, attention)
    assert fitted.gpu_scale == pytest.approx(1.2) and fitted.attention_scale == pytest.approx(2.0)
    assert fitted.c1_ms == pytest.approx(0.5, rel=0.02)
    assert fitted.floor_ms + fitted.c0_ms == pytest.approx(34.0, rel=0.02)
    assert np.allclose(fitted.step_ms(gpu, n, attention), steps, rtol=0.01)
    plain = fit_overhead(gpu, n, steps, attention, fit_scale=False)
    assert plain.gpu_scale == 1.0 and plain.attention_scale == 1.0


def test_halves_split_whole_configurations_and_span_each_set():
    steps = sarathi_steps(EAGER)
    assert "n=0 c=256" not in set(steps.config[steps.set == "sarathi-prefill"])  # warm-up row
    half = halves(steps)
    for name, rows in steps.assign(half=half).groupby("set"):
        assert set(rows.half) == {0, 1}, name
        assert rows.groupby("config").half.nunique().max() == 1
    decode = steps.assign(half=half)[steps.set == "sarathi-decode"].sort_values("n_decode")
    assert list(decode.half) == [0, 1] * 4  # batch 1, 4, 16, 64 | 2, 8, 32, 128


def composed(shape, steps, tp, device=None):
    source = AiConfiguratorSource(
        EAGER / "aiconfigurator_a100", shape, tp, ExtrapolationLog(), CommOptions(), True, device
    )
    return gpu_ms(source, shape, steps)


def test_sarathi_and_splitwise_held_out_median_error_is_within_ten_percent():
    yi = ModelShape.resolve(str(EAGER / "yi-34b.json"))
    sarathi = sarathi_steps(EAGER)
    llama = ModelShape.resolve(str(EAGER / "llama-2-70b.json"))
    split = splitwise_steps(EAGER / "splitwise_llama2-70b_a100.csv", "llama2-70b", "a100-80gb")
    split_gpu = np.zeros((len(split), 2))
    for tp in (2, 4, 8):
        rows = (split.tp == tp).to_numpy()
        split_gpu[rows] = composed(llama, split[rows], tp)
    for steps, gpu, fit_scale in (
        (sarathi, composed(yi, sarathi, 2, "a100-pcie-80gb"), True),
        (split, split_gpu, False),
    ):
        gpu_only = np.median(np.abs(gpu[:, 0] / steps.ms.to_numpy() - 1))
        assert gpu_only > 0.3  # the kernels alone miss by a third or more
        for result in holdout(steps, gpu, fit_scale):
            assert result.median(on_fit_half=False) <= 0.10, result.model


def test_import_adds_the_overhead_from_a_json_or_fits_it_from_steps(tmp_path):
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps(ModelShape("s", 2, 4096, 32, 8, 128, 8192, 16384).to_dict()))
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps({"n_decode": [0, 8, 32], "chunk": [0, 128, 512], "ctx": [1023], "prefix": [0]})
    )
    base = ["import", "aiconfigurator", str(AIC), "--model", str(shape), "--grid", str(grid)]
    plain = tmp_path / "plain.parquet"
    # the GPU time as an eager engine composes it (a kernel per attention part)
    assert CliRunner().invoke(app, [*base, "--engine", "eager", "--out", str(plain)]).exit_code == 0
    params = tmp_path / "overhead.json"
    params.write_text(json.dumps({"floor_ms": 2.0, "c0_ms": 0.5, "c1_ms": 0.1}))
    (tmp_path / "a").mkdir()
    out = tmp_path / "a" / "host.parquet"
    result = CliRunner().invoke(app, [*base, "--out", str(out), "--engine-overhead", str(params)])
    assert result.exit_code == 0, result.output
    assert "engine overhead: floor 2.000 ms, c0 0.500 ms, c1 0.1000 ms/request" in result.output
    gpu, host = read_samples(plain).frame, read_samples(out)
    n = host.frame.n_decode + (host.frame.chunk > 0)
    assert np.allclose(host.frame.ms, np.maximum(gpu.ms, 2.0) + 0.5 + 0.1 * n)
    assert host.provenance["engine_overhead"]["floor_ms"] == 2.0
    # measured steps made by a known model: the fit finds it and writes it
    truth = HostOverhead(floor_ms=1.5, c0_ms=0.3, c1_ms=0.05)
    rows = gpu
    steps = tmp_path / "steps.csv"
    steps.write_text(
        "n_decode,chunk,ctx,prefix,ms\n"
        + "".join(
            f"{r.n_decode},{r.chunk},{r.ctx},{r.prefix},"
            f"{truth.step_ms(r.ms, r.n_decode + (r.chunk > 0)):.6f}\n"
            for r in rows.itertuples()
        )
    )
    (tmp_path / "b").mkdir()
    fitted = tmp_path / "b" / "fitted.json"
    result = CliRunner().invoke(
        app,
        [
            *base,
            "--out",
            str(tmp_path / "b" / "f.parquet"),
            "--engine-overhead",
            str(steps),
            "--overhead-out",
            str(fitted),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"fitted on {len(rows)} steps" in result.output
    (tmp_path / "c").mkdir()
    fixed = tmp_path / "c" / "fixed.json"
    args = ["--out", str(tmp_path / "c" / "f.parquet"), "--engine-overhead", str(steps)]
    result = CliRunner().invoke(app, [*base, *args, "--fixed-scales", "--overhead-out", str(fixed)])
    assert result.exit_code == 0, result.output
    kept = read_parameters(fixed)
    assert kept.gpu_scale == 1.0 and kept.attention_scale == 1.0
    model = read_parameters(fitted)
    assert np.allclose(
        model.step_ms(rows.ms, rows.n_decode + (rows.chunk > 0)),
        truth.step_ms(rows.ms, rows.n_decode + (rows.chunk > 0)),
        rtol=0.01,
    )


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ('{"floor_ms": -1}', ".json", "floor_ms must be a finite number >= 0"),
        ('{"floor": 1}', ".json", "unknown key 'floor'"),
        ("[1, 2]", ".json", "expected a JSON object"),
        ("{", ".json", "not JSON"),
        ("n_decode,chunk,ctx,prefix,ms\n1,0,1,0,5\n", ".csv", "needs at least 3"),
        ("n_decode,chunk,ctx,prefix\n1,0,1,0\n", ".csv", "column 'ms': missing"),
        ("x", ".txt", "expected a .json"),
    ],
)
def test_bad_engine_overhead_files_are_one_line_errors(tmp_path, text, suffix, message):
    path = tmp_path / f"o{suffix}"
    path.write_text(text)
    out = tmp_path / "s.parquet"
    args = ["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--engine-overhead", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_overhead_out_needs_an_overhead_and_parameters_must_be_positive(tmp_path):
    args = ["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b"]
    result = CliRunner().invoke(app, [*args, "--overhead-out", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "--overhead-out needs --engine-overhead" in result.output
    with pytest.raises(InputError, match="gpu_scale must be > 0"):
        HostOverhead(gpu_scale=0.0)
