"""The `cdc-assets` command line, on top of the Dagster definitions."""
