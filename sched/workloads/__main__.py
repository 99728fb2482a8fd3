"""``python -m servecal.sched.workloads [RATE] [N] [SEED]``: the workloads' measured shape."""

from __future__ import annotations

import sys

from servecal.sched.workloads.describe import describe, format_table
from servecal.sched.workloads.spec import WORKLOADS


def main(argv: list[str]) -> int:
    try:
        rate = float(argv[0]) if argv else 10.0
        n = int(argv[1]) if len(argv) > 1 else 20000
        seed = int(argv[2]) if len(argv) > 2 else 0
        if rate <= 0 or n < 2:
            raise ValueError
    except ValueError:
        print(
            "error: usage: python -m servecal.sched.workloads [RATE>0] [N>=2] [SEED]",
            file=sys.stderr,
        )
        return 2
    print(format_table([describe(name, rate, n, seed) for name in WORKLOADS]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
