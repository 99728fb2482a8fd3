"""The fleet's combined samples: one hive-partitioned Parquet dataset under ``DIR/samples/``.

``DIR/samples/device=<kind>/model=<name>/tp=<n>/<job>.parquet`` holds one finished
job's rows (the samples contract plus a ``job`` column); every file has the same
schema (absent optional columns are null), so::

    pyarrow.dataset.dataset("DIR/samples", partitioning="hive").to_table()
    pandas.read_parquet("DIR/samples")

both read all jobs with ``device``, ``model`` and ``tp`` as columns. The dataset is
derived from the job folders: a file is (re)written when its job finishes, and files
of jobs that are no longer finished jobs of the plan are removed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servecal.profiler.fleet.plan import JobSpec
from servecal.util.atomic import atomic_path

SAMPLES_DIR = "samples"

#: Every file's columns, in this order (partition keys live in the path, not the file).
SCHEMA = pa.schema(
    [
        ("n_decode", pa.int64()),
        ("chunk", pa.int64()),
        ("ctx", pa.int64()),
        ("prefix", pa.int64()),
        ("ms", pa.float64()),
        ("energy_j", pa.float64()),
        ("rep", pa.int64()),
        ("power_w", pa.float64()),
        ("sm_clock_mhz", pa.float64()),
        ("temp_c", pa.float64()),
        ("throttle", pa.int64()),
        ("ts", pa.float64()),
        ("job", pa.string()),
    ]
)


def partition_path(root: Path, spec: JobSpec) -> Path:
    """Where ``spec``'s rows go under the fleet folder ``root``."""
    parts = [f"{k}={v}" for k, v in spec.partition.items()]
    return root.joinpath(SAMPLES_DIR, *parts, f"{spec.name}.parquet")


def write_partition(root: Path, spec: JobSpec, samples: Path) -> int:
    """Copy a finished job's samples into the dataset (atomically); return the row count."""
    from servecal.costmodels.samples import read_samples

    frame = read_samples(samples).frame
    columns = {}
    for field in SCHEMA:
        if field.name == "job":
            columns["job"] = pa.array([spec.name] * len(frame), pa.string())
        elif field.name in frame:
            columns[field.name] = pa.array(frame[field.name], from_pandas=True).cast(field.type)
        else:
            columns[field.name] = pa.nulls(len(frame), field.type)
    table = pa.table(columns, schema=SCHEMA)
    with atomic_path(partition_path(root, spec)) as tmp:
        pq.write_table(table, tmp)
    return len(frame)


def prune(root: Path, keep: Iterable[JobSpec]) -> list[Path]:
    """Remove dataset files that belong to no job in ``keep``; return what was removed."""
    wanted = {partition_path(root, spec) for spec in keep}
    removed = []
    base = root / SAMPLES_DIR
    if not base.is_dir():
        return removed
    for path in sorted(base.rglob("*.parquet")):
        if path not in wanted:
            path.unlink()
            removed.append(path)
    for folder in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return removed
