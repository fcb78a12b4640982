"""A typed change file (Parquet, format `changeset`) as change records, column by column.

A Parquet change set already says each column's type, so the ordering key, the key and
partition text and the content event id of every change can be computed a column at a
time instead of a record at a time. The records are exactly those `formats.parse_file`
and `changes.to_record` make of the same file (a property test holds the two side by side),
except that the row image is not written as JSON: the file's values travel beside the
records (`TypedFile.values`, row i holding the file's i-th line read) and become a JSON image
only for a change that cannot be stored in typed columns. Spark's tasks, which carry records
alone, ask for the images too (`images=True`): they are joined a column at a time, the text
`values.encode_row` gives each row.

A big file is read a row group at a time (`read_typed_row_group`), so that a task holds one row
group's records; lines still count from the file's first row.

A file takes the record-at-a-time path instead when any of its records would be rejected
(a null key, an unknown op), when a column has no column type of its own (nested values,
time of day, nanosecond timestamps, unsigned 64-bit integers) or when a
sequence column cannot order changes: that path names each bad record in quarantine.
"""
from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pt

from . import ordering
from .changes import DELETE, UPSERT, storable_name
from .formats import ChangesetOptions, arrow_column_type, scalar_column_type
from .ordering import OrderingError
from .typed_export import json_quoted, key_texts, string_array
from .values import encode_value

_STRING = pa.string()
_encode_text = json.encoder.encode_basestring  # json.dumps(text, ensure_ascii=False), without the call


@dataclass
class TypedFile:
    records: pa.Table  # the parsed records (ingest.PARSED_FIELDS), `_cdc_row` null unless images were asked for
    values: pa.Table   # the source columns of each record, in the order of `records`


def read_by_column(fmt: str, name: str) -> bool:
    """Whether a file of this format and name may be read column by column (worth reading its
    bytes for: `read_typed_change_file` may still leave it to the record-at-a-time reader)."""
    return fmt == "changeset" and name.lower().endswith(".parquet")


def read_typed_change_file(fmt: str, options: ChangesetOptions, keys: Sequence[str], name: str, data: bytes,
                           declared: dict[str, str] | None, partition_by: Sequence[str], *, batch_seq: int, batch_id: str, file_index: int,
                           schema: pa.Schema, images: bool = False) -> TypedFile | None:
    """The file's records computed column by column, or None when the file must be read
    record by record (see the module's docstring). `images`: with each record's row image."""
    if not read_by_column(fmt, name):
        return None
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - the record-at-a-time reader quarantines it with its reason
        return None
    return typed_change_records(table, options, keys, name, declared, partition_by, batch_seq=batch_seq,
                                batch_id=batch_id, file_index=file_index, schema=schema, images=images)


def read_typed_row_group(fmt: str, options: ChangesetOptions, keys: Sequence[str], name: str, source: str | io.IOBase,
                         row_group: int, declared: dict[str, str] | None, partition_by: Sequence[str], *,
                         batch_seq: int, batch_id: str, file_index: int, schema: pa.Schema,
                         images: bool = False) -> TypedFile | None:
    """One row group of a Parquet change file (`source`: its path or an open file) as
    `read_typed_change_file` reads a whole file: the records of the lines it holds, or None
    when they must be read record by record. Only that row group is read."""
    if not read_by_column(fmt, name):
        return None
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(source) as pf:
            first = sum(pf.metadata.row_group(g).num_rows for g in range(row_group))
            table = pf.read_row_group(row_group)
    except Exception:  # noqa: BLE001 - the record-at-a-time reader quarantines it with its reason
        return None
    return typed_change_records(table, options, keys, name, declared, partition_by, batch_seq=batch_seq,
                                batch_id=batch_id, file_index=file_index, schema=schema, first_line=first + 1,
                                images=images)


def _usable(table: pa.Table) -> bool:
    names = table.column_names
    if len({n.lower() for n in names}) != len(names) or table.num_rows == 0:
        return False  # names one but for case are quarantined, record by record
    if any(not storable_name(n) for n in names):
        return False  # and so are names no target can hold
    for f in table.schema:
        t = f.type.value_type if pt.is_dictionary(f.type) else f.type
        if pt.is_null(t):
            continue
        if scalar_column_type(t) is None or pt.is_uint64(t) or (pt.is_timestamp(t) and t.unit == "ns"):
            return False
    return True


def _plain_column(column: pa.ChunkedArray) -> pa.Array:
    column = column.combine_chunks()
    return column.dictionary_decode() if pt.is_dictionary(column.type) else column


def typed_change_records(table: pa.Table, options: ChangesetOptions, keys: Sequence[str], name: str,
                         declared: dict[str, str] | None, partition_by: Sequence[str], *,
                         batch_seq: int, batch_id: str, file_index: int, schema: pa.Schema, first_line: int = 1,
                         images: bool = False) -> TypedFile | None:
    """`table`'s rows as records of lines `first_line` on (see `read_typed_change_file`)."""
    op_column, sequence_by = options["op_column"], list(options.get("sequence_by", []))
    if not _usable(table) or op_column not in table.column_names:
        return None
    if any(c not in table.column_names for c in [*keys, *sequence_by]) or op_column in keys:
        return None  # a key outside the row image (the op column) is rejected, record by record
    columns = {c: _plain_column(table.column(c)) for c in table.column_names}
    n = table.num_rows
    flags = ["" if v is None else str(v) for v in columns[op_column].to_pylist()]
    deletes = set(map(str, options.get("deletes", [])))
    upserts = set(map(str, options.get("inserts", []))) | set(map(str, options.get("updates", [])))
    ops = [DELETE if f in deletes else UPSERT if f in upserts else None for f in flags]
    if None in ops or any(columns[k].null_count for k in keys):
        return None
    try:
        source_orders = _source_orders([columns[c] for c in sequence_by], n,
                                       [(declared or {}).get(c) for c in sequence_by])
    except OrderingError:
        return None
    values = pa.table({c: a for c, a in columns.items() if c != op_column})
    key_text = string_array(key_texts([values.column(k) for k in keys]))
    # "|" + ordering.arrival(batch_seq, file_index, line): the line is its last 16 hex digits
    head = "|" + ordering.arrival(batch_seq, file_index, 0)[:-16]
    lines = range(first_line, first_line + n)
    arrivals = pa.array([f"{head}{line:016x}" for line in lines], pa.string())
    orders = pc.binary_join_element_wise(ordering.CHANGE_TIER, source_orders, arrivals, "")
    op_array = pa.array(ops, pa.string())
    members = _members(values) if sequence_by or images else {}
    event_ids = (_content_ids(key_text, op_array, source_orders, _object([members[c] for c in sorted(members)], n))
                 if sequence_by else pa.nulls(n, pa.string()))
    file_types = {f.name: t for f in table.schema if (t := arrow_column_type(f.type))}
    types = {**(declared or {}), **file_types}
    partitions = string_array(key_texts([values.column(c) if c in values.column_names else pa.nulls(n)
                                     for c in partition_by])) if partition_by else pa.nulls(n, pa.string())

    def constant(v: object, t: pa.DataType = _STRING) -> pa.Array:
        return pa.array([v] * n, t)

    record = {
        "_cdc_key": key_text, "_cdc_op": op_array, "_cdc_order": orders, "_cdc_event_id": event_ids,
        "_cdc_row": _object(list(members.values()), n) if images else pa.nulls(n, pa.string()),
        "_cdc_partition": partitions,
        "_cdc_change_type": pa.array(flags, pa.string()), "_cdc_batch_seq": constant(batch_seq, pa.int64()),
        "_cdc_batch": constant(batch_id), "_cdc_file": constant(name),
        "_cdc_line": pa.array(lines, pa.int64()),
        "_cdc_types": constant(json.dumps(types, sort_keys=True) if types else None),
        "_cdc_reason": pa.nulls(n, pa.string()), "_cdc_raw": pa.nulls(n, pa.string()),
    }
    return TypedFile(pa.table({f.name: record[f.name] for f in schema}, schema=schema), values)


def _source_orders(columns: list[pa.Array], n: int, declared: list[str | None]) -> pa.Array:
    """The changeset ordering key of every record (`ordering.typed_value` per sequence column,
    with the column's declared type)."""
    if not columns:
        return pa.array([""] * n, pa.string())
    return pc.binary_join_element_wise(*[_typed_values(c, t) for c, t in zip(columns, declared)], "")


def _typed_values(column: pa.Array, declared: str | None) -> pa.Array:
    """`ordering.typed_value` of each value; non-negative integers of a column not declared
    otherwise by Arrow: "1" + "6", the exponent + 5000, and the digits without trailing zeros,
    then "." (zero is "15")."""
    if (declared is None and pt.is_integer(column.type) and column.null_count == 0
            and pc.min(column).as_py() >= 0):
        digits = pc.cast(column, pa.string())
        exponent = pc.cast(pc.add(pc.utf8_length(digits), 4999), pa.string())
        positive = pc.binary_join_element_wise("16", exponent, pc.utf8_rtrim(digits, "0"), ".", "")
        return pc.if_else(pc.equal(column, 0), "15", positive)
    return pa.array([ordering.typed_value(v, declared) for v in column.to_pylist()], pa.string())


def _json_texts(column: pa.Array) -> pa.Array:
    """Each value as `values.encode_row` writes it (JSON, with the tags of `encode_value`)."""
    t = column.type
    values = column.to_pylist()
    if pt.is_string(t) or pt.is_large_string(t):
        texts = ["null" if v is None else _encode_text(v) for v in values]
    elif pt.is_integer(t):
        texts = ["null" if v is None else str(v) for v in values]
    elif pt.is_decimal(t):
        texts = ["null" if v is None else '{"$decimal": "' + str(v) + '"}' for v in values]
    else:
        texts = [json.dumps(encode_value(v), ensure_ascii=False) for v in values]
    return pa.array(texts, pa.string())


def _members(values: pa.Table) -> dict[str, pa.Array]:
    """Each column's `"name": value` member of the rows' JSON images, in the file's column order."""
    return {c: pc.binary_join_element_wise(_encode_text(c) + ": ", _json_texts(values.column(c).combine_chunks()), "")
            for c in values.column_names}


def _object(members: list[pa.Array], n: int) -> pa.Array:
    """The rows' JSON objects of these members, in this order (`values.encode_row`'s text)."""
    if not members:
        return pa.array(["{}"] * n, pa.string())
    return pc.binary_join_element_wise("{", pc.binary_join_element_wise(*members, ", "), "}", "")


def _content_ids(keys: pa.Array, ops: pa.Array, source_orders: pa.Array, rows: pa.Array) -> pa.Array:
    """`changes.content_id` of every record: sha1 of [key text, op, source order, the sorted
    row image (`rows`)]."""
    texts = pc.binary_join_element_wise("[", json_quoted(keys), ", ", json_quoted(ops), ", ",
                                        json_quoted(source_orders), ", ", json_quoted(rows), "]", "")
    return pa.array(["sha1:" + hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts.to_pylist()], pa.string())
