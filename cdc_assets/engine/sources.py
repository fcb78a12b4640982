"""A table whose changes come from a database instead of landed files: each extraction writes what
the source has that no earlier one took as the next extract, which becomes a batch like a landed file.
A PostgreSQL source's capture goes to its method's module: postgres_source (`changelog`) or
postgres_logical (`logical`)."""
from __future__ import annotations

from ..core.config import TableConfig
from ..core.postgres import is_postgresql
from . import bigquery_source, postgres_logical, postgres_source


def extract_new_rows(table: TableConfig, table_dir: str, bigquery=None) -> int | None:
    """The source's new rows as the table's next extract (`bigquery`: the BigQuery client of a table
    read from BigQuery); how many rows it holds (None: there were none)."""
    if is_postgresql(table.source):
        found = _capture(table).extract_new_rows(table, table_dir)
    else:
        found = bigquery_source.extract_new_rows(bigquery, table, table_dir)
    return None if found is None else found.rows


def _capture(table: TableConfig):
    return postgres_logical if table.capture == "logical" else postgres_source


def enable(table: TableConfig, table_dir: str) -> postgres_source.Enabled:
    """Start capturing a PostgreSQL source and take its base snapshot."""
    return _capture(table).enable(table, table_dir)


def disable(table: TableConfig) -> list[str]:
    """Remove every object `enable` made; what was removed."""
    return _capture(table).disable(table)


def status(table: TableConfig) -> postgres_source.CaptureStatus:
    return _capture(table).status(table)
