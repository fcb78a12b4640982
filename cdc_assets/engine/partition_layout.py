"""How a target's configured partition columns are laid out in its Delta table.

Natively (as configured) each `partition_by` column is a Delta partition column. Delta's protocol
writes "" and null alike as a null partition value, so once a string partition column receives
"" the target is laid out again, once, in the derived layout: that column is stored as data in
the files, exact, and the Delta table is partitioned by `_cdc_part_<column>`, the value escaped by
core/partition_text.py, in its place. The layout is read from the Delta table's own metadata (its
partition columns); every writer takes the Delta partition columns, and the rows' derived
columns, from here, and every reader of the log's partition values decodes them here.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..core import names
from ..core.partition_text import ESCAPE, derived_column, is_derived_column, original_value
from . import delta

# The step (cdc.step) of the commit that lays a target out again.
RELAYOUT = "relayout"

__all__ = ["RELAYOUT", "PartitionLayout", "arrow_derived", "spark_derived", "is_derived_column"]


def arrow_derived(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """core/partition_text.derived_value over an Arrow string array."""
    values = values.cast(pa.string())
    escaped = pc.binary_join_element_wise(pa.scalar(ESCAPE), values, "")
    needs = pc.or_(pc.equal(values, ""), pc.starts_with(values, ESCAPE))
    return pc.if_else(needs, escaped, values)


def spark_derived(column: str):
    """core/partition_text.derived_value as a Spark column expression of column `column`."""
    from pyspark.sql import functions as F

    c = F.col(names.spark(column))
    return F.when((c == F.lit("")) | c.startswith(ESCAPE), F.concat(F.lit(ESCAPE), c)).otherwise(c) \
        .alias(derived_column(column))


@dataclasses.dataclass(frozen=True)
class PartitionLayout:
    """`partition_by`: the configured partition columns; `derived`: those stored as data with a
    `_cdc_part_` column partitioning the table in their place."""
    partition_by: tuple[str, ...]
    derived: frozenset[str] = frozenset()

    @classmethod
    def of(cls, dt_: DeltaTable | None, partition_by: Sequence[str]) -> PartitionLayout:
        """The layout the Delta table `dt_` has (native for no table yet)."""
        delta_columns = set(dt_.metadata().partition_columns) if dt_ is not None else set()
        return cls(tuple(partition_by), frozenset(c for c in partition_by if derived_column(c) in delta_columns))

    @property
    def delta_columns(self) -> list[str]:
        """The Delta table's partition columns, in the configured order."""
        return [derived_column(c) if c in self.derived else c for c in self.partition_by]

    @property
    def derived_columns(self) -> list[str]:
        return [derived_column(c) for c in self.partition_by if c in self.derived]

    def deriving(self, columns: Iterable[str]) -> PartitionLayout:
        """This layout with `columns` (string partition columns that receive "") derived too."""
        return dataclasses.replace(self, derived=self.derived | frozenset(columns))

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """A target schema with this layout's derived columns after the others."""
        out = pa.schema([f for f in schema if not is_derived_column(f.name)])
        for c in self.derived_columns:
            out = out.append(pa.field(c, pa.string()))
        return out

    def with_derived(self, rows: pa.Table) -> pa.Table:
        """`rows` with this layout's derived columns set from their columns (replaced if present)."""
        for c in self.partition_by:
            if c not in self.derived:
                continue
            name = derived_column(c)
            value = arrow_derived(rows[c])
            if name in rows.column_names:
                rows = rows.set_column(rows.schema.get_field_index(name), pa.field(name, pa.string()), value)
            else:
                rows = rows.append_column(pa.field(name, pa.string()), value)
        return rows

    def spark_with_derived(self, frame):
        """A Spark frame with this layout's derived columns set from their columns."""
        for c in self.partition_by:
            if c in self.derived:
                frame = frame.withColumn(derived_column(c), spark_derived(c))
        return frame

    def values(self, partition_values: dict) -> list:
        """The configured columns' values of a file, from its partition values in the log (as
        get_add_actions or the log's text gives them)."""
        return [original_value(partition_values.get(derived_column(c))) if c in self.derived
                else partition_values.get(c) for c in self.partition_by]

    def empty_text_in_staging(self, table_dir: str, where: str, base: bool = False) -> list[str]:
        """The native partition columns that some staged change (of `where`, an SQL condition on
        staging; and of the base with `base`) holds "" in, from the changes' `_cdc_partition`
        (only a text column's value is ever "")."""
        from .table_layout import BASE, STAGING, path

        watched = [c for c in self.partition_by if c not in self.derived]
        if not watched:
            return []
        found: set[str] = set()
        for name, condition in [(STAGING, where)] + ([(BASE, "true")] if base else []):
            # `""` is how the partition text (JSON) spells an empty text; a longer text can hold
            # those two characters too, so each candidate is parsed
            rows = delta.query(path(table_dir, name), "SELECT DISTINCT _cdc_partition AS p FROM t WHERE "
                                                      f"({condition}) AND _cdc_partition LIKE '%\"\"%'")
            for text in (rows["p"].to_pylist() if rows is not None else []):
                values = json.loads(text)
                found.update(c for c, v in zip(self.partition_by, values) if c in watched and v == "")
        return sorted(found)
