"""The target's columns and their types, and records as typed target rows.

Staged and base records hold either typed columns or a row image; a target row holds the target's
columns, each cast exactly to its type (a cast that could change a value goes value by value
through `convert`), then the bookkeeping columns. In this process with Arrow (`cast_typed`,
`as_target_rows`), on Spark as typed frames (`as_target_types`, `typed_frame`, `target_frame`).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..core import names
from ..core import target as shape
from ..core.changes import DELETE, RECORD_FIELDS
from ..core.config import TableConfig
from ..core.partition_text import is_derived_column
from ..core.values import DATE, DOUBLE, INT, LONG, NULL, STRING, convert, decimal_parts, decode_row
from . import delta, spark_files
from .records import stored_columns
from .spark import map_in_arrow

# A MERGE rewrites every target file that holds a touched key, so a file's size is what a
# small batch costs: a 1M-row file took delta-rs 0.84 s to rewrite, a 250k-row one 0.22 s.
ROWS_PER_FILE = 250_000


_SPARK_TYPES = {"boolean": "boolean", INT: "int", LONG: "bigint", DOUBLE: "double", STRING: "string", DATE: "date",
                "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz", "binary": "binary"}


def spark_type(type_: str) -> str:
    parts = decimal_parts(type_)
    return f"decimal({parts[0]},{parts[1]})" if parts else _SPARK_TYPES[type_]


def spark_columns(columns: dict[str, str]) -> str:
    return ", ".join(f"{names.spark(c)} {spark_type(t)}" for c, t in columns.items())


def _target_ddl(columns: dict[str, str]) -> str:
    """Target rows' Spark schema: the columns, then the bookkeeping ones."""
    return spark_columns(columns) + ", " + ", ".join(f"`{m}` string" for m in shape.META_COLUMNS)


def existing_columns(dt_: DeltaTable | None) -> dict[str, str]:
    if dt_ is None:
        return {}
    # a derived partition column (engine/partition_layout.py) is the layout's, not a column of the rows
    return {f.name: shape.column_type(f.type) for f in pa.schema(dt_.schema()) if not is_derived_column(f.name)}


def known_columns(dt_: DeltaTable | None) -> dict[str, str]:
    """The target's columns with their types, as the column types of a history build on them:
    a column that holds no value yet (a table whose first batch held only deletes has its key
    columns, and no row) has the type `null`, so that its first value decides it, as in a table
    whose first batch held that value."""
    columns = existing_columns(dt_)
    valueless = valueless_columns(dt_)
    return {c: NULL if c in valueless and c not in shape.META_COLUMNS else t for c, t in columns.items()}


def valueless_columns(dt_: DeltaTable | None) -> set[str]:
    """The columns of a Delta table that hold no value (every row null, or no row), by the files'
    statistics (a file without them is taken to hold values)."""
    if dt_ is None:
        return set()
    columns = existing_columns(dt_)
    actions = pa.table(dt_.get_add_actions(flatten=True))
    if not actions.num_rows or not pc.sum(actions["num_records"]).as_py():
        return set(columns)
    return {c for c in columns if f"null_count.{c}" in actions.column_names and
            pc.all(pc.fill_null(pc.equal(actions[f"null_count.{c}"], actions["num_records"]), False)).as_py()}


def target_schema(columns: dict[str, str], meta=shape.META_COLUMNS) -> pa.Schema:
    return pa.schema([pa.field(c, shape.arrow_type(t)) for c, t in columns.items()] + [pa.field(m, pa.string()) for m in meta])


def target_rows(winners: list[dict], columns: dict[str, str], images: list[dict], extra=()) -> pa.Table:
    data = shape.typed_columns(images, columns)
    meta = shape.META_COLUMNS + tuple(extra)
    arrays = [pa.array(data[c], type=shape.arrow_type(t)) for c, t in columns.items()]
    arrays += [pa.array([w[m] for w in winners], pa.string()) for m in meta]
    return pa.Table.from_arrays(arrays, schema=target_schema(columns, meta))


def _typed_batches(columns: dict[str, str], extra=()):
    """What Spark runs on each slice of winners stored as row images: images -> typed target columns
    (then the meta columns and `extra` ones)."""
    def run(batches):
        for batch in batches:
            if batch.num_rows:
                winners = batch.to_pylist()
                images = [decode_row(w["_cdc_row"]) for w in winners]
                yield from target_rows(winners, columns, images, extra).to_batches()
    return run


def cast_keeps(have: str, want: str) -> bool:
    """Whether a cast (Spark's or Arrow's) from column type `have` to `want` keeps every value as
    `convert` would: the same type, or a widening no value can overflow (with ANSI off, Spark's
    overflowing cast gives NULL, so anything narrower goes value by value through `convert`)."""
    if have == want or (have, want) in ((INT, LONG), (INT, DOUBLE), (LONG, DOUBLE)):
        return True
    integer_digits = {INT: 10, LONG: 19}
    want_parts, have_parts = decimal_parts(want), decimal_parts(have)
    if want_parts is None:
        return False
    if have in integer_digits:
        return want_parts[0] - want_parts[1] >= integer_digits[have]
    return have_parts is not None and want_parts[1] >= have_parts[1] and \
        want_parts[0] - want_parts[1] >= have_parts[0] - have_parts[1]


def typed_frame(live, columns: dict[str, str], schema: str, extra=()):
    """Winners as typed target rows: those stored typed have their columns already (`_history`);
    those stored as row images go through `_typed_batches`. `extra`: string columns kept after
    the meta columns."""
    from pyspark.sql import functions as F

    imaged = map_in_arrow(live.where(F.col("_cdc_row").isNotNull()), _typed_batches(columns, extra), schema)
    plain = live.where(F.col("_cdc_row").isNull()).select(*[F.col(names.spark(c)) for c in columns],
                                                          *[F.col(m) for m in shape.META_COLUMNS + tuple(extra)])
    return plain.unionByName(imaged)


def target_frame(live, columns: dict[str, str], table: TableConfig, floor: str | None):
    """Winners (upserts, and a soft-delete table's deletes) as typed target rows on Spark; in a
    soft-delete table, `_cdc_deleted` says whether each is a delete or ranks at or below the
    truncate `floor` (rules.md#rule-12)."""
    from pyspark.sql import functions as F

    if not table.soft_deletes:
        return typed_frame(live, columns, _target_ddl(columns))
    typed = typed_frame(live, columns, _target_ddl(columns) + ", `_cdc_op` string", extra=("_cdc_op",))
    deleted = F.col("_cdc_op") == DELETE
    if floor:
        deleted = deleted | (F.col("_cdc_order") <= F.lit(floor))
    return typed.withColumn(shape.DELETED, deleted).drop("_cdc_op")


def cast_typed(batch, columns: dict[str, str], meta=shape.META_COLUMNS):
    """Typed records (a RecordBatch or Table) as target rows: each column cast to its target
    type, exactly (a cast that could change a value goes value by value through `convert`, as
    row images do), followed by the `meta` columns."""
    arrays, fields = [], []
    names = set(batch.schema.names)
    for c, t in columns.items():
        want = shape.arrow_type(t)
        if c not in names:
            values = pa.nulls(batch.num_rows, want)
        else:
            values = batch.column(c)
            if values.type != want:
                values = pc.cast(values, want) if cast_keeps(shape.column_type(values.type), t) else \
                    pa.array([convert(v, t) for v in values.to_pylist()], want)
        arrays.append(values)
        fields.append(pa.field(c, want))
    for m in meta:
        arrays.append(batch.column(m))
        fields.append(batch.schema.field(m))
    return type(batch).from_arrays(arrays, schema=pa.schema(fields))


def as_target_types(spark, table_path: str, columns: dict[str, str]):
    """A record table's rows with its typed columns cast to the target's types: by Spark when
    every cast keeps its values, else value by value (`cast_typed`)."""
    from pyspark.sql import functions as F

    stored = stored_columns(table_path)
    frame = spark_files.spark_frame(spark, table_path, list(RECORD_FIELDS) + [(c, spark_type(t)) for c, t in stored.items()])
    record = [F.col(n) for n, _ in RECORD_FIELDS]
    if all(cast_keeps(stored[c], t) for c, t in columns.items() if c in stored):
        cast = [(F.col(names.spark(c)) if c in stored else F.lit(None)).cast(spark_type(t)).alias(c)
                for c, t in columns.items()]
        return frame.select(*record, *cast)
    schema = spark_columns(columns) + ", " + delta.spark_schema(RECORD_FIELDS)
    return map_in_arrow(frame, lambda batches: (cast_typed(b, columns, [n for n, _ in RECORD_FIELDS]) for b in batches),
                        schema)


def rows_where(rows: pa.Table, mask) -> pa.Table:
    """rows.filter(mask), without copying the rows when the mask keeps all of them."""
    return rows if pc.all(pc.fill_null(mask, False)).as_py() else rows.filter(mask)


def as_target_rows(live: pa.Table, columns: dict[str, str], extra=(), images: list[dict] | None = None) -> pa.Table:
    """Staged records as target rows: row images decoded into typed columns, typed columns cast
    (`cast_typed`), the `extra` columns kept after the bookkeeping ones. `images`: the decoded
    images of `live`'s imaged records, in order, when the caller has them already."""
    imaged = pc.is_valid(live["_cdc_row"])
    meta = shape.META_COLUMNS + tuple(extra)
    typed = cast_typed(rows_where(live, pc.invert(imaged)), columns, meta).cast(target_schema(columns, meta))
    if live["_cdc_row"].null_count == live.num_rows:
        return typed
    image_rows = live.filter(imaged).to_pylist()
    if images is None:
        images = [decode_row(w["_cdc_row"]) for w in image_rows]
    return pa.concat_tables([target_rows(image_rows, columns, images, extra), typed])


def flagged_columns(columns: dict[str, str], table: TableConfig) -> dict[str, str]:
    """A soft-delete table's target columns end with its `_cdc_deleted` flag (rules.md#rule-12); another
    table has none (one switched back to hard deletes loses it)."""
    if not table.soft_deletes:
        return {c: t for c, t in columns.items() if c != shape.DELETED}
    return {**columns, shape.DELETED: "boolean"} if shape.DELETED not in columns else columns
