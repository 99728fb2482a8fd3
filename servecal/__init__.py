"""servecal: calibrated iteration-cost models and SLO-aware LLM scheduling."""

__version__ = "0.1.0"
