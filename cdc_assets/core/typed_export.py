"""A typed source export (Parquet) as base records whose source columns stay typed columns.

A Parquet export already says each column's type, so its rows need no row image: a
base record keeps the export's columns as Arrow columns of their column types, and only
the key, the partition and the ordering key are computed per row, by the same functions
that compute them for changes. Exports with a column no column type holds (nested
values, time of day, decimals wider than 38 digits) are read row by row instead
(`formats.parquet_row_group`), where such values become JSON text.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pt

from . import ordering
from .changes import RECORD_FIELDS, UPSERT, storable_name
from .formats import RAW_PREVIEW, declared_types, scalar_column_type
from .values import Misfit, convert, key_text, source_value

_STRING = pa.string()
SNAPSHOT = "SNAPSHOT"
# A column type's Arrow type (the caller passes `target.arrow_type`)
ArrowType = Callable[[str], pa.DataType]


def export_columns(schema: pa.Schema, keys: Iterable[str], partition_by: Iterable[str] = ()) -> dict[str, str] | None:
    """The column types of an export whose every column has one (columns of the null type,
    which hold nothing, are left out); None when a column needs row-by-row reading."""
    declared = declared_types(schema)  # text columns of another type: converted by export_batch
    out: dict[str, str] = {}
    for f in schema:
        if pt.is_null(f.type):
            continue
        t = declared.get(f.name) or scalar_column_type(f.type)
        if t is None or not storable_name(f.name) or f.name in out:
            return None
        out[f.name] = t
    if any(k not in out for k in list(keys) + list(partition_by)):
        return None  # a missing key column: every row is rejected, with its reason, row by row
    return out


def base_schema(columns: dict[str, str], arrow_type: ArrowType) -> pa.Schema:
    """Base records with typed source columns, as `base` holds them."""
    meta = [pa.field(n, pa.int64() if t == "long" else pa.string()) for n, t in RECORD_FIELDS]
    return pa.schema(meta + [pa.field(c, arrow_type(t)) for c, t in columns.items()])


def record_schema(columns: dict[str, str], arrow_type: ArrowType) -> pa.Schema:
    """Base records as an export's rows become them: `_cdc_reason`/`_cdc_raw` mark rejections."""
    return base_schema(columns, arrow_type).append(pa.field("_cdc_reason", pa.string())) \
        .append(pa.field("_cdc_raw", pa.string()))


def _as_column_type(values: pa.Array, type_: str, arrow_type: ArrowType) -> pa.Array:
    if pt.is_dictionary(values.type):
        values = values.dictionary_decode()
    want = arrow_type(type_)
    if values.type == want:
        return values
    if pt.is_timestamp(values.type) and values.type.unit == "ns":
        # Delta keeps microseconds, as the row-by-row reader does (pandas' Timestamp.to_pydatetime)
        return pc.cast(values, want, safe=False)
    return pc.cast(values, want)


def key_texts(arrays: Sequence[pa.Array | pa.ChunkedArray]) -> list[str | None] | pa.Array:
    """Key or partition text per row, from the values as the row-by-row reader holds them."""
    if not arrays:
        return []
    parts = [_canonical_json(a) for a in arrays]
    if all(p is not None for p in parts):
        return pc.binary_join_element_wise("[", pc.binary_join_element_wise(*parts, ","), "]", "")
    return [key_text(vs) for vs in zip(*([source_value(v) for v in a.to_pylist()] for a in arrays))]


# Characters json.dumps writes as an escape other than a quote or a backslash.
_CONTROL = r"[\x00-\x1f]"


def _canonical_json(values: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """`values.key_part` of each value as a JSON string, built by Arrow for integers and text
    without nulls; None for the others, which are built value by value."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        return None
    if pt.is_integer(values.type):
        return pc.binary_join_element_wise('"', pc.cast(values, pa.string()), '"', "")
    if pt.is_string(values.type) or pt.is_large_string(values.type):
        if pc.any(pc.match_substring_regex(values, _CONTROL)).as_py():
            return None
        return json_quoted(values)
    return None


def json_quoted(texts: pa.Array) -> pa.Array:
    """Text without control characters as JSON strings, as json.dumps quotes them."""
    escaped = pc.replace_substring(pc.replace_substring(texts, "\\", "\\\\"), '"', '\\"')
    return pc.binary_join_element_wise('"', escaped.cast(pa.string()), '"', "")


def string_array(values: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.cast(pa.string()) if isinstance(values, pa.Array) else pa.array(values, pa.string())


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# A base row's ordering key: BASE_TIER + u64(line) + "|" + arrival(0, 0, line), where arrival is
# u64(batch 0) + 8 hex digits of file 0 + u64(line); the line's digits sit at these offsets.
_BASE_ORDER = (ordering.BASE_TIER + ordering.u64(0) + "|" + ordering.arrival(0, 0, 0)).encode("ascii")
_BASE_LINE_AT = (1, len(_BASE_ORDER) - 16)


# The two hex digits of each byte value
_HEX_PAIRS = np.stack([_HEX_DIGITS[np.arange(256) >> 4], _HEX_DIGITS[np.arange(256) & 15]], axis=1)


def _hex16(values: np.ndarray) -> np.ndarray:
    """`ordering.u64` of each value as a row of 16 ASCII bytes: its 8 big-endian bytes, each
    looked up as its two digits."""
    big_endian = np.ascontiguousarray(values.astype(np.uint64).astype(">u8")).view(np.uint8).reshape(-1, 8)
    digits: np.ndarray = _HEX_PAIRS[big_endian].reshape(-1, 16)
    return digits


def base_orders(lines: np.ndarray) -> pa.Array:
    """The ordering key of the base row at each line, byte for byte what the row-by-row reader
    stores (`changes.to_record` of a snapshot change)."""
    return _line_orders(_BASE_ORDER, _BASE_LINE_AT, lines)


def batch_orders(batch_seq: int, file_index: int, lines: np.ndarray) -> pa.Array:
    """The ordering key of each line of file `file_index` of a `format: snapshot` batch, which
    ranks by its batch: CHANGE_TIER + u64(batch) + "|" + arrival(batch, file, line), byte for
    byte what the row-by-row reader stores."""
    template = (ordering.CHANGE_TIER + ordering.u64(batch_seq) + "|"
                + ordering.arrival(batch_seq, file_index, 0)).encode("ascii")
    return _line_orders(template, (len(template) - 16,), lines)


def _line_orders(template: bytes, line_at: Sequence[int], lines: np.ndarray) -> pa.Array:
    """`template` with each line's 16 hex digits at the offsets `line_at`: every key has the same
    width, so the keys are written by numpy into one buffer instead of formatted row by row."""
    n, width = len(lines), len(template)
    out = np.tile(np.frombuffer(template, dtype=np.uint8), (n, 1))
    digits = _hex16(lines)
    for at in line_at:
        out[:, at:at + 16] = digits
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)]) \
        .cast(pa.string())


def export_batch(data: pa.Table, first_line: int, keys: Sequence[str], partition_by: Sequence[str], file_name: str,
                 columns: dict[str, str], arrow_type: ArrowType, batch_seq: int = 0, batch_id: str = "base",
                 file_index: int = 0, rejected: Mapping[int, str] | None = None,
                 raw_of: Callable[[list[int]], list[str]] | None = None) -> pa.RecordBatch:
    """Rows of an export (lines first_line+1 ...) as base records (batch 0), or as the records
    of file `file_index` of a `format: snapshot` batch; a row without a key value is a rejection
    naming the key column, as when the export is read row by row. `rejected`: rows already
    refused, with why; `raw_of`: the text a rejected row is quarantined with (default: the row as
    JSON)."""
    n = data.num_rows
    schema = record_schema(columns, arrow_type)
    declared = declared_types(data.schema)
    reasons: dict[int, str] = dict(rejected or {})  # row -> why it is rejected (few, usually none)
    typed = {c: declared_column(data.column(c), c, t, arrow_type, reasons) if c in declared
             else _as_column_type(data.column(c).combine_chunks(), t, arrow_type) for c, t in columns.items()}
    lines = np.arange(first_line + 1, first_line + n + 1, dtype=np.int64)
    for k in keys:
        missing = typed[k].is_null()
        if missing.null_count == 0 and not pc.any(missing).as_py():
            continue
        for row in np.flatnonzero(missing.to_numpy(zero_copy_only=False)):
            reasons.setdefault(int(row), f"key column {k!r} is null")
    bad = sorted(reasons)
    keys_text = key_texts([typed[k] if k in declared else data.column(k) for k in keys])
    if bad:
        keys_text = keys_text if isinstance(keys_text, list) else keys_text.to_pylist()
        for i in bad:
            keys_text[i] = None
    partitions = key_texts([typed[c] if c in declared else data.column(c) for c in partition_by]) \
        if partition_by else pa.nulls(n, pa.string())

    def constant(v: object, t: pa.DataType = _STRING) -> pa.Array:
        return pa.nulls(n, t) if v is None else pa.repeat(pa.scalar(v, t), n)

    orders = base_orders(lines) if batch_seq == 0 else batch_orders(batch_seq, file_index, lines)
    meta = {
        "_cdc_key": string_array(keys_text), "_cdc_op": constant(UPSERT), "_cdc_order": orders,
        "_cdc_event_id": constant(None), "_cdc_row": constant(None), "_cdc_partition": string_array(partitions),
        "_cdc_change_type": constant(SNAPSHOT), "_cdc_batch_seq": constant(batch_seq, pa.int64()),
        "_cdc_batch": constant(batch_id), "_cdc_file": constant(file_name), "_cdc_line": pa.array(lines),
        "_cdc_reason": _at_rows(n, reasons), "_cdc_raw": _at_rows(n, dict(zip(bad, raw_of(bad))) if raw_of and bad else {
            i: json.dumps(data.slice(i, 1).to_pylist()[0], default=str)[:RAW_PREVIEW] for i in bad}),
    }
    arrays = [meta[f.name] if f.name in meta else typed[f.name] for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def declared_column(values: pa.ChunkedArray | pa.Array, name: str, type_: str, arrow_type: ArrowType,
                    reasons: dict[int, str], reason: str | None = None) -> pa.Array:
    """A text column of another type (formats.DECLARED_TYPE) as that type; a row whose value does
    not fit it is rejected naming the column. Text that is its value's own spelling in Arrow is
    cast by Arrow (`canonical_cast`); the rest goes value by value through `convert`."""
    text = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    want = arrow_type(type_)
    typed, done = canonical_cast(text, type_, want)
    slow = np.flatnonzero(~done)
    if len(slow) == 0:
        return typed
    out = []
    for i, v in zip(slow.tolist(), pc.take(text, pa.array(slow)).to_pylist()):
        try:
            out.append(None if v is None else convert(v, type_))
        except Misfit:
            reasons.setdefault(i, reason or f"column {name!r} is {type_} at the source; this row's value does not fit it")
            out.append(None)
    mask = np.zeros(len(text), dtype=bool)
    mask[slow] = True
    return pc.replace_with_mask(typed, pa.array(mask), pa.array(out, want))


# Column types whose text Arrow casts to the value `values.convert` gives when the text is the
# value's own spelling (Arrow writes the value back as the same text): integers, decimals, doubles,
# dates. Text of any other spelling ('+5', '1e3', ' 7', '1.5' for a decimal(4,2)) is left to `convert`.
_ARROW_SPELLED = re.compile(r"^(int|long|double|date|decimal\(\d+,\s*\d+\))$")


def canonical_cast(text: pa.Array, type_: str, want: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """`text` (strings) cast to `want` where that is exactly what `convert(text, type_)` gives,
    and which rows that holds for (null text counts as done: it stays null)."""
    n = len(text)
    nulls = text.is_null().to_numpy(zero_copy_only=False)
    if type_ == "string":
        return text.cast(want), np.ones(n, dtype=bool)
    if not _ARROW_SPELLED.match(type_) or not (pt.is_string(text.type) or pt.is_large_string(text.type)):
        return pa.nulls(n, want), nulls
    try:
        # a value that does not parse makes Arrow's cast fail for the whole array: the strict cast
        # runs on the text shaped like a number or a date, and anything else is left to `convert`
        shaped = pc.fill_null(pc.match_substring_regex(text, _SHAPES[type_.split("(")[0]]), False)
        cast = pc.cast(pc.if_else(shaped, text, pa.scalar(None, text.type)), want)
        same = pc.fill_null(pc.equal(pc.cast(cast, text.type), text), False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(n, want), nulls
    return cast, same.to_numpy(zero_copy_only=False) | nulls


_SHAPES = {"int": r"^-?[0-9]{1,10}$", "long": r"^-?[0-9]{1,19}$", "double": r"^-?[0-9]+(\.[0-9]+)?$",
           "decimal": r"^-?[0-9]+(\.[0-9]+)?$", "date": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}


def _at_rows(n: int, texts: dict[int, str]) -> pa.Array:
    """n strings, null but at the rows `texts` names."""
    if not texts:
        return pa.nulls(n, pa.string())
    return pa.array([texts.get(i) for i in range(n)], pa.string())
