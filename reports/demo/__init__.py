"""``servecal demo``: calibrate this device, fit, simulate the schedulers, write the report."""

from servecal.reports.demo.pipeline import DemoCallbacks, DemoConfig, DemoResult, run_demo

__all__ = ["DemoCallbacks", "DemoConfig", "DemoResult", "run_demo"]
