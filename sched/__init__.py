"""sched: the reference engine, workloads, SLO metrics and scheduling policies."""
