"""Run in the Python of NVIDIA Dynamo's mocker (``scripts/dynamo_env.sh``; not a test
module): ask the mocker's own code about one exported NPZ and print its answer as JSON.

``python dynamo_driver.py check NPZ``: ``{"mocker_format": is_mocker_format_npz(NPZ)}``.
``python dynamo_driver.py replay NPZ ISL OSL N``: the summary of the mocker's offline
replay (its engine on a virtual clock) of ``N`` requests of ``ISL`` prompt and ``OSL``
output tokens arriving together, timed by the NPZ (``dynamo_profile``), prefix caching off.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> dict:
    from dynamo.mocker.utils.planner_profiler_perf_data_converter import is_mocker_format_npz

    what, npz = argv[0], Path(argv[1])
    if what == "check":
        return {"mocker_format": bool(is_mocker_format_npz(npz))}
    from dynamo._core import run_mocker_synthetic_trace_replay
    from dynamo.mocker.config import normalize_mocker_config

    isl, osl, n = (int(x) for x in argv[2:5])
    timing = {"type": "external", "provider": "dynamo_profile", "config": {"path": str(npz)}}
    config = normalize_mocker_config(
        {"engine": {"timing_model": timing, "enable_prefix_caching": False}}
    )
    result = run_mocker_synthetic_trace_replay(
        isl, osl, n, extra_engine_args=config, arrival_interval_ms=0.0
    )
    return {k: v for k, v in result.summary.items() if isinstance(v, (int, float, str))}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
