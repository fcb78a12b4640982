"""Spark and Delta input/output: Spark computes, delta-rs commits (FIELD_NOTES)."""
