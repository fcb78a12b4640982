"""A table whose changes are rows of a BigQuery table: `source: bigquery://project.dataset.table`.

A Datastream append-mode table (`format: bigquery-append`, rules.md#bigquery-append) and a table of BigQuery CDC
rows (`format: bigquery-cdc`) are read the same way: each run extracts the rows it has not taken
yet into one Parquet change file in the warehouse (`<warehouse>/<TABLE>/extracts/`), which then
becomes a batch like any landed file, so ordering, deduplication and quarantine are those of
files. A row is new when its position column (`source_position`; for bigquery-append
`datastream_metadata.change_sequence_number` by default) is greater than the greatest position an
earlier extract took. That position is written into each extract's own Parquet metadata, and the
extract appears under its final name in one rename, so a crash either leaves a complete extract,
which the next registration takes, or none, and the rows are read again: the warehouse alone says
how far the source was read.

An extract holds what a batch holds, and a first run over a long history holds that history:
its rows are written page by page, never all held in memory.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from ..core.config import BIGQUERY_SOURCE, TableConfig
from ..core.errors import TerminalError

if TYPE_CHECKING:
    from google.cloud.bigquery import SchemaField

SCHEME = "bigquery://"
EXTRACTS = "extracts"
POSITION_KEY = b"cdc_assets.source_position"
# BigQuery types a position can have: they compare as numbers or instants.
POSITION_TYPES = {"INTEGER": "INT64", "INT64": "INT64", "NUMERIC": "NUMERIC", "BIGNUMERIC": "BIGNUMERIC",
                  "TIMESTAMP": "TIMESTAMP", "DATETIME": "DATETIME", "DATE": "DATE"}


# A position a source row has: a number, an instant or a day (POSITION_TYPES).
Position = int | decimal.Decimal | dt.datetime | dt.date


class SourceError(TerminalError, RuntimeError):
    """The BigQuery source cannot be read; the message names the table, the source and the cause."""


@dataclass(frozen=True)
class Extract:
    file: str  # relative to the table's extracts folder
    rows: int
    after: Position | None  # the position the extract started after (None: the first extract)
    through: Position  # the greatest position it holds


def source_table(url: str) -> str:
    """'project.dataset.table' from 'bigquery://project.dataset.table' (SourceError otherwise)."""
    if not BIGQUERY_SOURCE.fullmatch(url):
        raise SourceError(f"{url!r} is not bigquery://project.dataset.table")
    return url[len(SCHEME):]


def position_column(table: TableConfig) -> str:
    position = table.source_position or table.spec.source_position
    assert position is not None  # the configuration requires one where the format has none
    return position


def extracts_dir(table_dir: str) -> str:
    return os.path.join(table_dir, EXTRACTS)


def last_extract(folder: str) -> tuple[int, Position | None]:
    """(how many extracts there are, the greatest position they took, or None)."""
    if not os.path.isdir(folder):
        return 0, None
    names = sorted(n for n in os.listdir(folder) if n.endswith(".parquet") and not n.startswith((".", "_")))
    if not names:
        return 0, None
    meta = pq.read_metadata(os.path.join(folder, names[-1])).metadata or {}
    return len(names), _decode(json.loads(meta[POSITION_KEY])) if POSITION_KEY in meta else None


def extract_new_rows(client, table: TableConfig, table_dir: str, page_rows: int = 100_000) -> Extract | None:
    """Write the source rows after the last extract's position as the next extract (None: no new rows)."""
    from google.api_core import exceptions
    from google.cloud import bigquery

    where = f"table {table.name}: source {table.source}"
    if table.source is None:
        raise SourceError(f"{where}: the table has no source: to extract from")
    source = source_table(table.source)
    column = position_column(table)
    try:
        kind = _position_type(client.get_table(source).schema, column, where)
        count, after = last_extract(extracts_dir(table_dir))
        params = [bigquery.ScalarQueryParameter("after", kind, after)] if after is not None else []
        newer = f" WHERE {_ref(column)} > @after" if after is not None else ""
        bound = client.query(f"SELECT MAX({_ref(column)}) AS upto FROM `{source}`{newer}",
                             job_config=bigquery.QueryJobConfig(query_parameters=params)).result()
        upto = next(iter(bound))["upto"]
        if upto is None:
            return None
        # A fixed upper bound: rows appended while this runs belong to the next extract, whole.
        rows = client.query(
            f"SELECT * FROM `{source}` WHERE {_ref(column)} <= @upto"
            + (f" AND {_ref(column)} > @after" if after is not None else "") + f" ORDER BY {_ref(column)}",
            job_config=bigquery.QueryJobConfig(
                query_parameters=params + [bigquery.ScalarQueryParameter("upto", kind, upto)])).result(
                page_size=page_rows)
        return _write(rows, extracts_dir(table_dir), count + 1, after, upto)
    except exceptions.GoogleAPICallError as e:
        raise SourceError(f"{where}: {e.message or e}") from None


def _write(rows, folder: str, number: int, after: Position | None, upto: Position) -> Extract:
    os.makedirs(folder, exist_ok=True)
    name = f"extract-{number:08d}.parquet"  # names sort in extraction order: arrival order
    final, partial = os.path.join(folder, name), os.path.join(folder, f".{name}.partial")
    writer, written = None, 0
    try:
        for page in rows.to_arrow_iterable():
            if page.num_rows == 0:
                continue
            if writer is None:
                schema = page.schema.with_metadata({POSITION_KEY: json.dumps(_encode(upto)).encode()})
                writer = pq.ParquetWriter(partial, schema)
            writer.write_batch(page.replace_schema_metadata(writer.schema.metadata))
            written += page.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise SourceError(f"the source returned no rows up to position {upto!r}, which it reported as its greatest")
    os.replace(partial, final)  # complete under its final name, or not there at all
    return Extract(name, written, after, upto)


def _position_type(schema: Sequence[SchemaField], column: str, where: str) -> str:
    def named(fields: Sequence[SchemaField], part: str) -> SchemaField:
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            raise SourceError(f"{where}: no column {column!r} to take the position from "
                              f"(columns: {', '.join(f.name for f in schema)}); set source_position")
        return found

    *parents, leaf = column.split(".")
    fields = schema
    for part in parents:
        fields = named(fields, part).fields or ()
    found = named(fields, leaf)
    kind = POSITION_TYPES.get(found.field_type)
    if kind is None or found.mode == "REPEATED":
        raise SourceError(f"{where}: position column {column!r} is {found.field_type}; it must be a number, "
                          "a timestamp or a date that grows as rows are appended (set source_position)")
    return kind


def _ref(column: str) -> str:
    return ".".join(f"`{p}`" for p in column.split("."))


def _encode(value: Position) -> dict[str, str | int]:
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    return {"int": int(value)}


def _decode(raw: dict[str, str | int]) -> Position:
    (kind, text), = raw.items()
    decoders: dict[str, Callable[[str], Position]] = {
        "datetime": dt.datetime.fromisoformat, "date": dt.date.fromisoformat, "decimal": decimal.Decimal, "int": int}
    return decoders[kind](str(text))
