"""The CDC semantics, pure: formats to canonical changes, ordering keys, apply rules.

Nothing here knows of Spark, Delta or Dagster.
"""
