"""The experiment layer: one way to describe a run, run it, and sweep many.

* :class:`RunSpec` (:mod:`.spec`): everything a run depends on, frozen.
* :func:`run` (:mod:`.run`): ``run(spec, seed) -> RunResult`` on the spec's
  backend (engine, operator driver, torch); :func:`summarize` its metrics.
* :func:`sweep` (:mod:`.sweep`): many specs × seeds in a pool, run folders, means
  over seeds, max-goodput searches (:mod:`.goodput`), progress callbacks;
  :func:`open_pool` picks the pool by name (``local``, ``ray``).
* :func:`check` (:mod:`.check`): refuse a spec that cannot run, up front.
* :class:`Study` (:mod:`.study`): what ``compare`` runs, every policy × workload ×
  TPOT target, as checked specs (:func:`study_specs`); :func:`run_spec` one run's.
* :mod:`.models`: truth models and predictors by name.

``servecal simulate``, ``servecal compare``, the FlowPrefill study, the torch
backend and ``servecal demo`` are all clients of these few functions.
"""

from servecal.sched.experiment.check import check
from servecal.sched.experiment.goodput import Bracket, Goodput, GoodputSearch
from servecal.sched.experiment.models import DEFAULT_PREDICTOR, DEFAULT_TRUTH
from servecal.sched.experiment.run import run, summarize
from servecal.sched.experiment.spec import (
    BACKENDS,
    SETTINGS,
    DriverOptions,
    RunSpec,
    TorchOptions,
    choose_backend,
    default_rate,
)
from servecal.sched.experiment.study import (
    DEFAULT_TARGETS,
    Study,
    run_spec,
    study_folder,
    study_folders,
    study_specs,
)
from servecal.sched.experiment.sweep import (
    POOLS,
    SpecOutcome,
    SweepProgress,
    Task,
    execute,
    open_pool,
    sweep,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_PREDICTOR",
    "DEFAULT_TARGETS",
    "DEFAULT_TRUTH",
    "POOLS",
    "SETTINGS",
    "Bracket",
    "DriverOptions",
    "Goodput",
    "GoodputSearch",
    "RunSpec",
    "SpecOutcome",
    "Study",
    "SweepProgress",
    "Task",
    "TorchOptions",
    "check",
    "choose_backend",
    "default_rate",
    "execute",
    "open_pool",
    "run",
    "run_spec",
    "study_folder",
    "study_folders",
    "study_specs",
    "summarize",
    "sweep",
]
