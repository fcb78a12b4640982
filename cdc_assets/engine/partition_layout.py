"""How a target's configured partition columns are laid out in its Delta table.

Natively (as configured) each `partition_by` column is a Delta partition column. Delta's protocol
writes "" and null alike as a null partition value, and a writer names a file's folder by its
partition value, so once a string partition column receives "" or a value too long for a folder
name, the target is laid out again, once, in the derived layout: that column is stored as data in
the files, exact, and the Delta table is partitioned by `_cdc_part_<column>`, the value escaped by
core/partition_text.py, in its place. The layout is read from the Delta table's own metadata (its
partition columns); every writer takes the Delta partition columns, and the rows' derived
columns, from here, and every reader of the log's partition values decodes them here.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from ..core import names
from ..core.partition_text import (
    DIGEST,
    ESCAPE,
    KEPT,
    MAX_FOLDER_NAME,
    derived_column,
    derived_value,
    fits_a_folder,
    folder_bytes,
    is_derived_column,
    is_digest,
    is_plain,
    original_value,
)
from . import delta, storage

# The step (cdc.step) of the commit that lays a target out again.
RELAYOUT = "relayout"

__all__ = ["RELAYOUT", "PartitionLayout", "arrow_derived", "spark_derived", "is_derived_column"]


def _longest_escaped(column: str) -> int:
    """The longest escaped value (plain characters only) whose folder name for `column` fits."""
    return MAX_FOLDER_NAME - folder_bytes(derived_column(column), "")


def arrow_derived(values: pa.Array | pa.ChunkedArray, column: str) -> pa.Array | pa.ChunkedArray:
    """core/partition_text.derived_value of column `column` over an Arrow string array: a value of
    kept characters short enough is itself; each other distinct value is derived once."""
    values = values.cast(pa.string())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kept = pc.and_(pc.match_substring_regex(values, f"^{KEPT.pattern}+$"),
                   pc.less_equal(pc.binary_length(values), _longest_escaped(column)))
    other = pc.invert(pc.fill_null(kept, True))
    if not pc.any(other).as_py():
        return values
    distinct = pc.unique(pc.filter(values, other))
    derived = pa.array([derived_value(v, column) for v in distinct.to_pylist()], pa.string())
    return pc.if_else(other, pc.take(derived, pc.index_in(values, value_set=distinct)), values)


def spark_derived(column: str):
    """core/partition_text.derived_value of column `column` as a Spark column expression."""
    from pyspark.sql import functions as F

    c = F.col(names.spark(column))
    # URL encoding keeps letters, digits and "._-*", writes a space as "+" and any other byte as
    # "%" and two upper-case hex digits; "." and "*" are escaped too, and "%" becomes the escape
    encoded = F.url_encode(c)
    for kept, hex_ in ((".", "2E"), ("*", "2A"), ("+", "20")):
        encoded = F.replace(encoded, F.lit(kept), F.lit("%" + hex_))
    text = F.when(c == F.lit(""), F.lit(ESCAPE)).otherwise(F.translate(encoded, "%", ESCAPE))
    return F.when(F.octet_length(text) > _longest_escaped(column), F.concat(F.lit(DIGEST), F.sha2(c, 256))) \
        .otherwise(text).alias(derived_column(column))


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
            value = arrow_derived(rows[c], c)
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

    def values(self, partition_values: dict, file: str) -> list:
        """The configured columns' values of a file, from its partition values in the log (as
        get_add_actions or the log's text gives them); a value the log names by its digest is
        read from the file (`file`: its location), whose rows all hold it."""
        out = []
        for c in self.partition_by:
            if c not in self.derived:
                out.append(partition_values.get(c))
                continue
            derived = partition_values.get(derived_column(c))
            if not is_digest(derived):
                out.append(original_value(derived))
                continue
            fs, p = storage.filesystem(file)
            with fs.open_input_file(p) as stream:
                column = pq.ParquetFile(stream).read_row_group(0, columns=[c]).column(0)
            out.append(column[0].as_py())
        return out

    def unfit_values(self, values: Sequence, texts: Collection[str], change_feed: bool) -> list[str]:
        """The native text partition columns (of `texts`) of which `values` holds "", a value too
        long for a folder name, or, in a table recording its change data feed, a value a folder
        name encodes: what a Delta partition value of this layout cannot stand for."""
        return [c for c, v in zip(self.partition_by, values) if c not in self.derived and c in texts
                and isinstance(v, str) and (v == "" or not fits_a_folder(c, v) or (change_feed and not is_plain(v)))]

    def unfit_in_staging(self, table_dir: str, where: str, texts: Collection[str], change_feed: bool,
                         base: bool = False) -> list[str]:
        """The native text partition columns (of `texts`) that some staged change (of `where`, an
        SQL condition on staging; and of the base with `base`) holds a value of in that this
        layout cannot stand for (`unfit_values`), from the changes' `_cdc_partition`."""
        from .table_layout import BASE, STAGING, path

        watched = [c for c in self.partition_by if c not in self.derived and c in texts]
        if not watched:
            return []
        # `""` is how the partition text (JSON) spells an empty text, and a value too long for a
        # folder name makes a long text; a text can hold those two characters or be long
        # otherwise, so each candidate is parsed
        shortest = max(0, MAX_FOLDER_NAME // 3 - max(len(f"{c}=".encode()) for c in watched))
        candidate = f"_cdc_partition LIKE '%\"\"%' OR octet_length(_cdc_partition) > {shortest}"
        if change_feed:  # any character outside the plain ones, or JSON's escape of one
            candidate += " OR _cdc_partition ~ '[^A-Za-z0-9_.\\-\\[\\],\"]'"
        found: set[str] = set()
        for name, condition in [(STAGING, where)] + ([(BASE, "true")] if base else []):
            rows = delta.query(path(table_dir, name), "SELECT DISTINCT _cdc_partition AS p FROM t WHERE "
                                                      f"({condition}) AND ({candidate})")
            for text in (rows["p"].to_pylist() if rows is not None else []):
                found.update(self.unfit_values(json.loads(text), watched, change_feed))
        return sorted(found)
