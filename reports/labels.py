"""Short policy labels for the page, with each label's options kept for a legend.

A run names its policy with every option it was given
(``sloweave[aging_chunk=32,aging_ms=564.0,c_max=512]``): exact, but too long for a
table column or a figure legend. The page shows ``SLOWeave`` and says once, in a
legend, what it stands for. Two option sets of the same policy in one report get
numbered labels (``SLOWeave (1)``, ``SLOWeave (2)``), so no two cells merge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from servecal.reports.loading import ReportInputs, RunData

#: Display names of policies whose registry name is not how the docs write them.
DISPLAY = {"sloweave": "SLOWeave"}


def split_label(label: str) -> tuple[str, str]:
    """``("sloweave", "aging_chunk=32, c_max=512")`` from ``sloweave[aging_chunk=32,c_max=512]``."""
    name, _, rest = label.partition("[")
    options = rest[:-1] if rest.endswith("]") else rest
    return name, ", ".join(o.strip() for o in options.split(",") if o.strip())


def short_labels(labels: Sequence[str]) -> dict[str, str]:
    """Each full label's short one, unique within ``labels``."""
    by_short: dict[str, list[str]] = {}
    for label in dict.fromkeys(labels):
        name = split_label(label)[0]
        by_short.setdefault(DISPLAY.get(name, name), []).append(label)
    out = {}
    for short, fulls in by_short.items():
        if len(fulls) == 1:
            out[fulls[0]] = short
        else:
            for k, full in enumerate(sorted(fulls), start=1):
                out[full] = f"{short} ({k})"
    return out


def legend(labels: Sequence[str]) -> str:
    """One sentence naming what each short label with options stands for (``""`` if none)."""
    shorts = short_labels(labels)
    parts = []
    for full, short in sorted(shorts.items(), key=lambda kv: kv[1]):
        name, options = split_label(full)
        if options or short != DISPLAY.get(name, name):
            parts.append(f"{short} = {name} with {options or 'its defaults'}")
    return ("Policies: " + "; ".join(parts) + ".") if parts else ""


def relabel(inputs: ReportInputs) -> ReportInputs:
    """The same inputs with every run's policy shown by its short label; the full label
    stays in ``RunData.full_policy`` (for the legend)."""
    shorts = short_labels([r.full_policy for r in inputs.runs])
    runs = tuple(dataclasses.replace(r, label=shorts[r.full_policy]) for r in inputs.runs)
    return dataclasses.replace(inputs, runs=runs)


def full_labels(runs: Sequence[RunData]) -> list[str]:
    return list(dict.fromkeys(r.full_policy for r in runs))
