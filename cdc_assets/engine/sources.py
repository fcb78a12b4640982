"""A table whose changes come from a database instead of landed files: each extraction writes what
the source has that no earlier one took as the next extract, which becomes a batch like a landed file."""
from __future__ import annotations

from ..core.config import TableConfig
from ..core.postgres import is_postgresql
from . import bigquery_source, postgres_source


def extract_new_rows(table: TableConfig, table_dir: str, bigquery=None) -> None:
    """The source's new rows as the table's next extract (`bigquery`: the BigQuery client of a table
    read from BigQuery)."""
    if is_postgresql(table.source):
        postgres_source.extract_new_rows(table, table_dir)
    else:
        bigquery_source.extract_new_rows(bigquery, table, table_dir)
