"""Engine figures as Dagster metadata a user can read in the UI."""
from __future__ import annotations

from collections.abc import Mapping

import dagster as dg


def as_metadata(figures: Mapping[str, object]) -> dict[str, dg.MetadataValue]:
    out: dict[str, dg.MetadataValue] = {}
    for k, v in figures.items():
        if isinstance(v, bool):
            out[k] = dg.MetadataValue.bool(v)
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        elif isinstance(v, float):
            out[k] = dg.MetadataValue.float(v)
        elif isinstance(v, (list, dict)):
            out[k] = dg.MetadataValue.json(v)
        elif v is not None:
            out[k] = dg.MetadataValue.text(str(v))
    return out


def delta_table_metadata(table_path: str, table_name: str, keys=(), partition_rows: int | None = None) -> dict:
    """Dagster's standard table metadata for a Delta table: its row count (summed from the log's
    file statistics, not by reading rows), its columns with their types, its name and its URI. The
    UI's catalog draws the row-count chart and lists the columns from these."""
    from ..engine import delta

    dt = delta.snapshot(table_path)
    if dt is None:
        return {}
    rows = delta.file_stats(dt)[2]
    columns = [dg.TableColumn(name=f.name, type=_type_name(f.type), description=_column_role(f.name, keys),
                              constraints=dg.TableColumnConstraints(nullable=f.nullable))
               for f in dt.schema().fields]
    out = {
        "dagster/row_count": dg.MetadataValue.int(rows),
        "dagster/column_schema": dg.TableSchema(columns=columns),
        "dagster/table_name": dg.MetadataValue.text(table_name),
        "dagster/uri": dg.MetadataValue.text(_uri(table_path)),
        "dagster/storage_kind": dg.MetadataValue.text("delta"),
    }
    if partition_rows is not None:
        out["dagster/partition_row_count"] = dg.MetadataValue.int(int(partition_rows))
    return out


def _type_name(type_) -> str:
    # a primitive's own name (long, decimal(12,2), timestamp); a nested type's kind
    return str(getattr(type_, "type", None) or type(type_).__name__.replace("Type", "").lower())


def _column_role(name: str, keys) -> str | None:
    if name in keys:
        return "key column"
    if name.startswith("_cdc_"):
        return "cdc_assets bookkeeping"
    return None


def _uri(table_path: str) -> str:
    import os
    import pathlib

    return table_path if "://" in table_path else pathlib.Path(os.path.abspath(table_path)).as_uri()
