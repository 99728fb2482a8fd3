"""reports: tables, figures and one self-contained HTML page from runs and calibrations.

from servecal.reports import build_report
files = build_report(["runs/", "calib/"], "out/")   # out/report.html, out/report.md
"""

from servecal.reports.loading import CalibrationData, ReportInputs, RunData, discover
from servecal.reports.page import ReportFiles, build_report, write_report

__all__ = [
    "CalibrationData",
    "ReportFiles",
    "ReportInputs",
    "RunData",
    "build_report",
    "discover",
    "write_report",
]
