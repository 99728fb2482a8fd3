"""numpy ⇄ Arrow without pyarrow's pandas hook: the same values as pyarrow's own
conversions, nulls where pandas' ``to_parquet`` puts them, and no pandas import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from servecal.util.arrow_numpy import from_numpy, read_parquet, to_numpy, write_parquet

COLUMNS = {
    "int64": np.array([0, -3, 2**40], dtype=np.int64),
    "int32": np.array([1, 2, 3], dtype=np.int32),
    "float": np.array([1.5, np.nan, -np.inf]),
    "bool": np.array([True, False, True]),
    "text": np.array(["a", None, "héllo"], dtype=object),
    "unicode": np.array(["x", "yy", ""]),
}


@pytest.mark.parametrize("name", list(COLUMNS))
def test_from_numpy_equals_pyarrow_from_pandas(name: str) -> None:
    values = COLUMNS[name]
    assert from_numpy(values).equals(pa.array(values, from_pandas=True))


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1, None, 3], type=pa.int64()),
        pa.array([1.0, 2.0, None]),
        pa.array([True, None, False]),
        pa.array([None, None], type=pa.null()),
        pa.array([5, 6, 7], type=pa.uint16()),
        pa.array([0, 10**9], type=pa.timestamp("ns")),
        pa.chunked_array([pa.array([1.0, 2.0]), pa.array([3.0])]),
        pa.array([1.0, 2.0, 3.0, 4.0]).slice(1, 2),  # an offset into the buffers
        pa.array([True, False, True, True, False, True, False, True, True]).slice(3, 5),
    ],
)
def test_to_numpy_equals_pyarrow_with_nan_for_missing(array) -> None:
    if pa.types.is_timestamp(array.type):
        expected = np.asarray(array.to_numpy(zero_copy_only=False)).astype(np.int64)
    elif array.null_count:
        expected = np.array([np.nan if v is None else v for v in array.to_pylist()], float)
    else:
        expected = np.asarray(array.to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(to_numpy(array), expected)


def test_a_parquet_round_trip_reads_back_in_pandas_as_pandas_wrote_it(tmp_path) -> None:
    import pandas as pd

    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    write_parquet(COLUMNS, ours)
    pd.DataFrame(COLUMNS).to_parquet(theirs, index=False)
    pd.testing.assert_frame_equal(pd.read_parquet(ours), pd.read_parquet(theirs))
    table = read_parquet(ours)
    assert table.column("float").null_count == 1 and table.column("text").null_count == 1
    np.testing.assert_array_equal(to_numpy(table.column("int64")), COLUMNS["int64"])


def test_a_simulated_run_from_a_trace_and_samples_never_imports_pandas(tmp_path) -> None:
    """The whole ``servecal simulate`` path (trace, samples truth, metrics, run folder)."""
    import pandas as pd

    rows = [(n, c, 0, 0, 1.0 + 0.01 * n + 0.002 * c, None, r)
            for n in (1, 8, 64) for c in (0, 256, 2048) for r in range(3) if n + c]  # fmt: skip
    samples = tmp_path / "s.parquet"
    columns = ["n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep"]
    from servecal.costmodels.samples import write_samples
    from servecal.sched.fitted_table import SHIPPED_PATH

    write_samples(pd.DataFrame(rows, columns=columns), samples, {})
    trace = "tests/data/azure_conv_head200.csv"
    out = tmp_path / "run"
    code = (
        "import sys\nfrom servecal.cli import main\n"
        f"sys.argv = ['servecal', 'simulate', '--workload', 'trace:{trace}', '--requests', '50',"
        f" '--seeds', '1', '--policy', 'sloweave-p50', '--truth', 'samples:{samples}',"
        f" '--predictor', '{SHIPPED_PATH}',"
        f" '--tpot-slo', '100', '--out', '{out}', '--json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert (out / "seed-0" / "requests.parquet").is_file()
    assert len(pd.read_parquet(out / "seed-0" / "requests.parquet")) == 50
