"""Data the simulated engine ships with.

* ``device_a100.json``: the ``device`` truth's parameters (``servecal.device_truth/1``),
  written by ``scripts/derive_device_truth.py`` from public A100 profiles (docs/truth.md).
* ``device_a100_fitted.json``: the cost table fitted on samples of that truth (the
  ``fitted`` predictor), written by ``scripts/fit_device_table.py``.
"""
