"""``servecal demo``: calibrate this device, fit, simulate the schedulers, write the report."""

from servecal.reports.demo.pipeline import DemoConfig, DemoResult, run_demo

__all__ = ["DemoConfig", "DemoResult", "run_demo"]
