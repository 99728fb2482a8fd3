"""Truth models and predictors by name: one table each.

``--truth NAME[:ARG]`` and ``--predictor NAME[:ARG]`` resolve through the
registries :data:`TRUTHS` and :data:`PREDICTORS` (:mod:`servecal.plugins`); each
entry names its loader by import path (imported on use, so a run pays only for the
model it uses), and ``module:attr[:ARG]`` names a user's loader. A truth loader takes
the text after ``NAME:``; a predictor loader takes that text and the run's truth.
Adding a truth or a predictor is one file and one line here. Loaded models are kept per
process (a worker of a sweep reads a samples file or a cost table once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servecal.costmodels.provenance import NO_TRUST, TableTrust
from servecal.plugins import Registry, is_import_path, load_object
from servecal.sched.truth_protocol import check_truth
from servecal.util.errors import InputError, NoticeWarning

#: What ``--truth`` and ``--predictor`` default to: a truth with a device's noise and
#: structure, planned against by a table fitted on its samples (docs/truth.md). The
#: predictor never knows the truth exactly; ``oracle`` (it does) is there by name.
DEFAULT_TRUTH = "device"
DEFAULT_PREDICTOR = "fitted"
#: The predictor that is the truth's own formula (a run on it grades itself).
ORACLE = "oracle"


class OracleWarning(NoticeWarning):
    """A run plans with the truth's own formula: its scheduling figures are an upper
    bound on what a calibrated table gives, and its online errors are zero by design."""


def oracle_notice(predictor_spec: str) -> str | None:
    """The one-line warning for a run planned on the oracle, else ``None``."""
    if predictor_spec.partition(":")[0] != ORACLE:
        return None
    return (
        "the predictor is the oracle (the truth's own formula): the scheduler plans with "
        f"what it is graded against; studies use the default --predictor {DEFAULT_PREDICTOR}"
    )


def models_label(truth_spec: str | None, predictor_spec: str) -> str:
    """``truth device · predictor fitted``: what every printed table says it ran on
    (``truth_spec`` ``None``: measured, not simulated)."""
    truth = "measured (no simulated truth)" if truth_spec is None else truth_spec
    return f"truth {truth} · predictor {predictor_spec}"


#: ``--truth``: what the simulated executor draws iteration times from. A truth is
#: made by ``loader(arg: str) -> Truth`` (:class:`~servecal.sched.truth_protocol.Truth`);
#: a user's loads by ``module:attr[:ARG]`` (docs/plugins.md).
TRUTHS = Registry("truth", "--truth", "loader(arg: str) -> Truth (docs/plugins.md)")
# fmt: off
TRUTHS.add("analytic", "servecal.sched.truth:analytic_truth", "docs/spec.md §1's formula × log-normal noise, with rare spikes", "analytic[:sigma=S,spike_prob=P,spike_factor=F,power_w=W]")  # noqa: E501
TRUTHS.add("samples", "servecal.sched.truth:SampledTruth.load", "a measured row of the nearest measured point (bootstrap)", "samples:PATH")  # noqa: E501
TRUTHS.add("fit", "servecal.sched.fitted_truth:fitted_truth", "docs/spec.md §1's formula with coefficients fitted to measured samples", "fit:PATH")  # noqa: E501
TRUTHS.add("device", "servecal.sched.device_truth:device_truth", "docs/spec.md §1's scale with an A100's shape: attention grows with context, GEMM steps, jitter, stalls (docs/truth.md); energy from the A100 power model (docs/energy.md)", "device[:sigma=S,spike_prob=P,...,power=NAME|none]")  # noqa: E501
# fmt: on

#: ``--predictor``: what the policy plans with, made by ``loader(arg, truth) ->
#: Predictor``. A bare path is ``table:PATH``.
PREDICTORS = Registry("predictor", "--predictor", "loader(arg: str, truth) -> Predictor")
# fmt: off
PREDICTORS.add("oracle", "servecal.sched.experiment.models:oracle", "the truth's own formula and noise (device, analytic, fit): a reference, never the default")  # noqa: E501
PREDICTORS.add("table", "servecal.sched.experiment.models:cost_table", "a cost table JSON (servecal fit / calibrate)", "table:PATH (or PATH)")  # noqa: E501
PREDICTORS.add("fitted", "servecal.sched.fitted_table:fitted", "a cost table fitted on samples of the run's truth (other seeds), margin set on off-grid probes")  # noqa: E501
PREDICTORS.add("fitted-grid", "servecal.sched.fitted_table:fitted_grid", "the same table with the margin fit sets on grid points only")  # noqa: E501
# fmt: on

_TRUTH_CACHE: dict[str, Any] = {}
_PREDICTOR_CACHE: dict[tuple[str, str, bool], Any] = {}


def _split_predictor(spec: str) -> tuple[str, str]:
    """``(import path of the loader, arg)``; a spec that is no name and no
    ``module:attr`` is a cost table's path."""
    if spec.partition(":")[0] not in PREDICTORS and (
        Path(spec).is_file() or not is_import_path(spec)
    ):
        return PREDICTORS.entries["table"].target, spec
    _, target, arg = PREDICTORS.split(spec)
    return target, arg


def load_truth(spec: str) -> Any:
    """The truth model ``spec`` names (loaded once per process)."""
    if spec not in _TRUTH_CACHE:
        entry, _, arg = TRUTHS.split(spec)
        truth = TRUTHS.call(spec, arg)
        if entry is None:
            truth = check_truth(truth, spec)
        _TRUTH_CACHE[spec] = truth
    return _TRUTH_CACHE[spec]


def load_predictor(spec: str, truth_spec: str, trust: TableTrust = NO_TRUST) -> Any:
    """The predictor ``spec`` names for the truth ``truth_spec`` (once per process); a
    cost table file is loaded as far as ``trust`` (the command's table flags) allows."""
    target, arg = _split_predictor(spec)
    is_table = target == PREDICTORS.entries["table"].target
    # a cost table file is the same whatever the truth; oracle and fitted are the truth's
    key = (spec, "" if is_table else truth_spec, trust.allow_edited if is_table else False)
    if key not in _PREDICTOR_CACHE:
        truth = load_truth(truth_spec)
        if is_table:  # also a bare path
            predictor = load_object(target, "--predictor")(arg, truth, trust=trust)
        else:
            predictor = PREDICTORS.call(spec, arg, truth)
        _PREDICTOR_CACHE[key] = predictor
    return _PREDICTOR_CACHE[key]


def oracle(arg: str, truth: Any) -> Any:
    """``oracle``: the truth's own formula and noise (not its spikes or stalls)."""
    if arg:
        raise InputError(f"--predictor oracle:{arg}: oracle takes no argument")
    if not callable(getattr(truth, "oracle", None)):
        raise InputError(
            "--predictor oracle needs a truth with a formula (--truth device, analytic or "
            "fit:PATH); give a cost table JSON"
        )
    return truth.oracle()


def cost_table(path: str, truth: Any, trust: TableTrust = NO_TRUST) -> Any:
    """``table:PATH``: a cost table JSON (``trust``: how far to trust it)."""
    from servecal.costmodels.table import CostTable

    if not Path(path).is_file():
        raise InputError(f"--predictor {path}: expected oracle or a cost table JSON file")
    return CostTable.load(path, trust=trust)


#: The fingerprint of a simulated truth a cost table can be compared with: the device
#: truth is an A100's shape at TP 1, and tables fitted on it say ``simulated``.
SIMULATED_DEVICE = {"device_name": "simulated", "tp": 1}


def truth_fingerprint(truth_spec: str) -> tuple[dict[str, Any] | None, str]:
    """``(fingerprint, name)`` of what a truth was measured on: a samples file's
    provenance (``samples:PATH``, ``fit:PATH``), the device truth's
    :data:`SIMULATED_DEVICE`; ``None`` for the analytic formula (no device)."""
    name, _, arg = truth_spec.partition(":")
    if name in ("samples", "fit") and arg:
        from servecal.costmodels.samples import read_provenance

        return read_provenance(arg) or None, arg
    if name == "device":
        return dict(SIMULATED_DEVICE), f"--truth {truth_spec}"
    return None, f"--truth {truth_spec}"


def compare_provenance(predictor_spec: str, truth_spec: str, trust: TableTrust = NO_TRUST) -> None:
    """Refuse (``--allow-mismatch``: warn) a cost table that plans for a truth of
    another device, model or TP degree: a samples or fitted truth measured elsewhere,
    or the simulated device truth (not cached: the CLI dedupes the warning per
    command, and the refusal must hold on every command)."""
    path = table_path(predictor_spec)
    if path is None:
        return
    fingerprint, source = truth_fingerprint(truth_spec)
    if fingerprint is None:
        return
    from servecal.costmodels.provenance import compare_fingerprints

    load_truth(truth_spec)  # a bad truth is its own error first
    table = load_predictor(predictor_spec, truth_spec, trust)
    compare_fingerprints(table.fingerprint, fingerprint, str(path), source, trust.refuse_mismatch)


def table_path(predictor_spec: str) -> Path | None:
    """The cost table file a predictor spec names, if it names one."""
    target, arg = _split_predictor(predictor_spec)
    return Path(arg) if target == PREDICTORS.entries["table"].target else None


def noise_profile(predictor: Any, predictor_spec: str) -> Any:
    """The drift monitor's noise profile: the residuals ``log(ms / P50)`` of the table's
    calibration samples when ``samples.parquet`` lies beside the table, else ``None``
    (the monitor then reads the predictor's own P50→P99 spread)."""
    path = table_path(predictor_spec)
    samples = None if path is None else path.parent / "samples.parquet"
    if samples is None or not samples.is_file():
        return None
    import numpy as np

    from servecal.costmodels.drift import NoiseProfile
    from servecal.costmodels.samples import read_samples

    frame = read_samples(samples).frame
    args = [frame[c].to_numpy(dtype=float) for c in ("n_decode", "chunk", "ctx", "prefix")]
    p50 = np.asarray(predictor.predict(*args, q=0.5), dtype=float)
    ratio = np.log(frame["ms"].to_numpy(dtype=float) / p50)
    try:
        return NoiseProfile.from_residuals(ratio, source=f"calibration residuals ({samples})")
    except ValueError:  # too few rows
        return None
