"""Spark and Delta input/output: Spark computes, delta-rs commits: delta-spark does not load here."""
