"""The Dagster wiring: per-table assets, checks, sensors and jobs over the engine."""
