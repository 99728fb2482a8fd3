"""Calibrate a fleet: many (device, model, TP) calibrations from one plan, locally or on Ray.

``run_fleet(load_plan("plan.toml"), "fleet/", open_backend("ray", "auto"))`` runs every
job of the plan where its resources are, each into ``fleet/jobs/<name>/`` (exactly a
``servecal calibrate`` folder), indexes them in ``fleet/index.json`` and combines their
samples into ``fleet/samples/`` (hive-partitioned Parquet). See docs/fleet.md.
"""

from servecal.profiler.fleet.index import INDEX_FILE, INDEX_SCHEMA, is_index, read_index
from servecal.profiler.fleet.plan import FleetPlan, JobSpec, fingerprint_mismatches, load_plan
from servecal.profiler.fleet.runner import FleetOutcome, resources_for, run_fleet

__all__ = [
    "INDEX_FILE",
    "INDEX_SCHEMA",
    "FleetOutcome",
    "FleetPlan",
    "JobSpec",
    "fingerprint_mismatches",
    "is_index",
    "load_plan",
    "read_index",
    "resources_for",
    "run_fleet",
]
