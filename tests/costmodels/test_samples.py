"""The samples contract: round trips, provenance, and one clear line per defect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servecal.costmodels import InputError
from servecal.costmodels.samples import (
    SAMPLE_COLUMNS,
    SAMPLES_SCHEMA,
    check_samples,
    read_samples,
    write_samples,
)


def good_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "n_decode": [0, 4, 4, 8],
            "chunk": [64, 0, 128, 128],
            "ctx": [0, 100, 100, 200],
            "prefix": [0, 0, 32, 0],
            "ms": [1.5, 2.0, 3.25, 4.0],
            "energy_j": [0.4, np.nan, 1.0, 1.2],
            "rep": [0, 0, 1, 0],
            "temp_c": [60.0, 61.0, np.nan, 62.0],
        }
    )


def test_parquet_round_trip_keeps_rows_and_provenance(tmp_path: Path) -> None:
    prov = {"device_name": "H200", "model_hash": "abc", "layers": 2}
    write_samples(good_frame(), tmp_path / "s.parquet", prov)
    got = read_samples(tmp_path / "s.parquet")
    assert got.provenance == prov
    assert list(got.frame.columns[: len(SAMPLE_COLUMNS)]) == list(SAMPLE_COLUMNS)
    assert got.frame["n_decode"].dtype == np.int64
    assert np.isnan(got.frame["energy_j"].iloc[1])
    assert got.frame["ms"].tolist() == [1.5, 2.0, 3.25, 4.0]
    side = json.loads((tmp_path / "s.fingerprint.json").read_text())
    assert side["schema"] == SAMPLES_SCHEMA and side["device_name"] == "H200"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_csv_takes_provenance_from_fingerprint_json(tmp_path: Path) -> None:
    good_frame().to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "fingerprint.json").write_text(json.dumps({"device_name": "A100"}))
    got = read_samples(tmp_path / "s.csv")
    assert got.provenance == {"device_name": "A100"}
    assert len(got.frame) == 4


def test_whole_floats_are_accepted_as_counts() -> None:
    frame = good_frame().astype({"n_decode": float})
    assert check_samples(frame, "x")["n_decode"].dtype == np.int64


def _one_line(exc: pytest.ExceptionInfo[InputError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    ("column", "row", "value", "words"),
    [
        ("ms", 2, np.nan, "NaN"),
        ("ms", 1, -1.0, "> 0"),
        ("ms", 3, 0.0, "> 0"),
        ("n_decode", 2, 1.5, "whole number"),
        ("chunk", 1, -3, "negative"),
        ("ctx", 0, "abc", "not a number"),
        ("rep", 3, np.nan, "NaN"),
        ("energy_j", 2, -0.5, ">= 0"),
    ],
)
def test_bad_values_name_file_column_and_first_row(
    tmp_path: Path, column: str, row: int, value: object, words: str
) -> None:
    frame = good_frame().astype({column: object})
    frame.loc[row, column] = value
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError) as exc:
        read_samples(path)
    msg = _one_line(exc)
    assert str(path) in msg and f"'{column}'" in msg and f"row {row}" in msg and words in msg


def test_iteration_without_tokens_is_rejected(tmp_path: Path) -> None:
    frame = good_frame()
    frame.loc[2, ["n_decode", "chunk"]] = 0
    with pytest.raises(InputError) as exc:
        check_samples(frame, "f.parquet")
    msg = _one_line(exc)
    assert "f.parquet" in msg and "n_decode+chunk" in msg and "row 2" in msg


def test_missing_and_misspelt_columns(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"f: column 'rep': missing$"):
        check_samples(good_frame().drop(columns="rep"), "f")
    with pytest.raises(InputError) as exc:
        check_samples(good_frame().rename(columns={"chunk": "chunks"}), "f")
    assert "'chunk'" in _one_line(exc) and "'chunks'" in str(exc.value)


def test_empty_and_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "zero.parquet").write_bytes(b"")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    good_frame().iloc[:0].to_csv(tmp_path / "header.csv", index=False)
    for name, words in [
        ("zero.parquet", "empty file"),
        ("junk.parquet", "unreadable"),
        ("header.csv", "no rows"),
        ("missing.csv", "no such file"),
    ]:
        with pytest.raises(InputError) as exc:
            read_samples(tmp_path / name)
        assert name in _one_line(exc) and words in str(exc.value)


def test_wrong_schema_version_in_parquet_and_fingerprint(tmp_path: Path) -> None:
    table = pa.Table.from_pandas(good_frame(), preserve_index=False)
    table = table.replace_schema_metadata({b"servecal.schema": b"servecal.samples/9"})
    pq.write_table(table, tmp_path / "old.parquet")
    with pytest.raises(InputError) as exc:
        read_samples(tmp_path / "old.parquet")
    assert "servecal.samples/9" in _one_line(exc) and "old.parquet" in str(exc.value)

    good_frame().to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "fingerprint.json").write_text(json.dumps({"schema": "other/2"}))
    with pytest.raises(InputError) as exc:
        read_samples(tmp_path / "s.csv")
    assert "other/2" in _one_line(exc)


def test_write_refuses_bad_rows_without_leaving_a_file(tmp_path: Path) -> None:
    frame = good_frame()
    frame.loc[0, "ms"] = -2.0
    with pytest.raises(InputError):
        write_samples(frame, tmp_path / "s.parquet", {})
    assert list(tmp_path.iterdir()) == []
