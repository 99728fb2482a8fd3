"""``servecal offline``: output shapes, file formats, and one-line errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["offline", *args])


def test_json_shape_on_generated_workload() -> None:
    res = _run(
        "--generate", "short-long:0.8", "--n", "20", "--memory", "12000", "--seeds", "2", "--json"
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"algos", "lp_bound", "gap"}
    assert set(out["algos"]) == {"fcfs", "mc-sf", "sorted-f", "sorted-lp"}
    for row in out["algos"].values():
        assert set(row) == {"mean_latency", "solver_s"}
        assert row["mean_latency"] > 0 and row["solver_s"] >= 0
    assert 0 < out["lp_bound"] <= min(r["mean_latency"] for r in out["algos"].values())
    assert abs(out["gap"] - out["algos"]["sorted-f"]["mean_latency"] / out["lp_bound"]) < 0.2


def test_azure_trace_format_and_no_lp(data_dir) -> None:
    res = _run(
        "--requests",
        str(data_dir / "azure_conv_head.csv"),
        "--n",
        "6",
        "--memory",
        "6000",
        "--algos",
        "sorted-f,opt",
        "--no-lp",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["lp_bound"] is None and out["gap"] is None
    assert out["algos"]["opt"]["mean_latency"] <= out["algos"]["sorted-f"]["mean_latency"]


def test_table_output(data_dir) -> None:
    res = _run("--requests", str(data_dir / "arxiv_head.csv"), "--n", "20", "--memory", "16000")
    assert res.exit_code == 0, res.output
    assert "sorted-f" in res.stdout and "LP lower bound" in res.stdout


def test_prompt_output_columns(tmp_path) -> None:
    f = tmp_path / "r.csv"
    f.write_text("prompt_tokens,output_tokens\n10,5\n20,3\n7,9\n")
    res = _run("--requests", str(f), "--memory", "40", "--algos", "mc-sf,opt", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["algos"]["opt"]["mean_latency"] <= out["algos"]["mc-sf"]["mean_latency"]


def test_errors_are_one_line_exit_2(tmp_path, data_dir) -> None:
    bad_col = tmp_path / "c.csv"
    bad_col.write_text("a,b\n1,2\n")
    bad_row = tmp_path / "r.csv"
    bad_row.write_text("prompt_tokens,output_tokens\n10,5\n20,x\n")
    cases = [
        (["--requests", str(tmp_path / "none.csv")], "no such file"),
        (["--requests", str(bad_col)], "needs columns"),
        (["--requests", str(bad_row)], "column output_tokens, row 3"),
        (["--requests", str(data_dir / "arxiv_head.csv"), "--memory", "100"], "row 2"),
        (["--generate", "uniform"], "short-long"),
        (["--generate", "short-long:1.5"], "in [0, 1]"),
        (["--generate", "short-long:0.8", "--algos", "magic"], "unknown algorithm"),
        (["--generate", "short-long:0.8", "--algos", "opt", "--n", "20"], "at most 8 requests"),
        ([], "exactly one of"),
    ]
    for args, message in cases:
        res = _run(*args)
        assert res.exit_code == 2, (args, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_amin_and_forced_solver(data_dir) -> None:
    args = ["--requests", str(data_dir / "azure_conv_head.csv"), "--n", "30", "--memory", "5000"]
    res = _run(*args, "--algos", "sorted-f,sorted-f-amin", "--solver", "quantile", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out["algos"]) == {"sorted-f", "sorted-f-amin"}
    bad = _run(*args, "--solver", "magic")
    assert bad.exit_code == 2 and "unknown solver" in bad.output


def test_phase2_rule_and_lookahead_are_options(data_dir) -> None:
    args = ["--requests", str(data_dir / "azure_conv_head.csv"), "--n", "40", "--memory", "5000"]
    means = {}
    for rule in ("head", "batch", "best"):
        res = _run(*args, "--algos", "sorted-f", "--phase2", rule, "--no-lp", "--json")
        assert res.exit_code == 0, res.output
        means[rule] = json.loads(res.stdout)["algos"]["sorted-f"]["mean_latency"]
    assert means["batch"] <= means["head"]  # skipping inside a batch never starts later here
    assert means["best"] <= min(means["batch"], means["head"])  # batch+1 and list too
    ahead = _run(*args, "--algos", "sorted-f", "--lookahead", "1", "--no-lp", "--json")
    assert ahead.exit_code == 0, ahead.output
    for flag, value, message in (
        ("--phase2", "magic", "Phase-2"),
        ("--lookahead", "-1", "lookahead"),
    ):
        bad = _run(*args, flag, value)
        assert bad.exit_code == 2 and message in bad.output, bad.output
