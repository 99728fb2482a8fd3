"""reports: tables, figures and HTML pages from runs and calibrations."""
