"""`calibrate --dtype/--kv-dtype`: what the timed model cannot run is refused in one line."""

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.profiler.calibrate import refuse_unrunnable_dtypes
from servecal.util.errors import InputError


@pytest.mark.parametrize(
    ("dtype", "kv_dtype", "message"),
    [
        ("fp8", None, "--dtype fp8: the timed model runs float32, bfloat16 or float16"),
        ("int4", None, "--dtype int4: the timed model runs"),
        ("bfloat16", "fp8", "--kv-dtype fp8: the timed model stores its KV cache in its own"),
        ("float32", "bfloat16", "--kv-dtype bfloat16: the timed model stores"),
        ("bf16", None, "--dtype must be one of float32, bfloat16, float16"),
    ],
)
def test_combinations_the_timed_model_cannot_run_are_refused(dtype, kv_dtype, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        refuse_unrunnable_dtypes(dtype, kv_dtype)


@pytest.mark.parametrize(
    ("dtype", "kv_dtype"), [(None, None), ("bfloat16", "auto"), ("float32", "float32")]
)
def test_the_model_dtype_for_the_kv_cache_is_accepted(dtype, kv_dtype):
    refuse_unrunnable_dtypes(dtype, kv_dtype)


def test_the_cli_refuses_an_fp8_kv_cache_with_exit_2_before_it_runs(tmp_path):
    out = tmp_path / "cal"
    result = CliRunner().invoke(app, ["calibrate", "--kv-dtype", "fp8", "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("error: --kv-dtype fp8")
    assert not out.exists()
