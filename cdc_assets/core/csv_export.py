"""A CSV export read column by column by Arrow, where that reads exactly what the row reader
(`formats.parse_snapshot`) reads.

The row reader takes a CSV file line by line with Python's `csv` module, makes '' null, converts
each declared column's text (`columns:`) and names the first column that does not fit. Arrow's CSV
reader does the same work on whole columns, many times faster, and agrees with it on files
whose every record is one line of the file: no line breaks inside quotes, no blank lines, UTF-8
throughout, every line with the header's number of fields, and quotes only around whole fields.
`read_text_columns` reads a stretch of such a file and returns None for one that is not, which
the import then reads row by row; `typed_columns` converts the text as `Typing.apply` does.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import names
from .typed_export import ArrowType, declared_column

BOM = b"\xef\xbb\xbf"


def header_of(first_line: bytes) -> list[str] | None:
    """The column names of a CSV file's first line (without its line break), or None."""
    if first_line.startswith(BOM):
        first_line = first_line[len(BOM):]
    try:
        rows = list(csv.reader(io.StringIO(first_line.decode("utf-8").rstrip("\r"), newline="")))
    except (UnicodeDecodeError, csv.Error):
        return None
    return rows[0] if len(rows) == 1 else None


def export_columns(header: Sequence[str], declared: Mapping[str, str], keys: Sequence[str],
                   partition_by: Sequence[str]) -> dict[str, str] | None:
    """The column types of a CSV export read by column: every column of its header declared
    (`columns:`), each name one a target can hold and no two alike but for case, the keys and the
    partition columns among them; None sends the export to the row reader, which also names
    what is wrong with a header."""
    if not header or len({h.lower() for h in header}) != len(header):
        return None
    if any(h not in declared or names.unstorable(h) for h in header):
        return None
    if any(c not in header for c in [*keys, *partition_by]):
        return None
    return {h: declared[h] for h in header}


# A field that opens with a quote and ends with one, its inner quotes doubled; or a field with no
# quote at all. Lines made only of such fields are parsed alike by Python's `csv` and by Arrow.
_FIELD = r'(?:"(?:[^"\r\x00]|"")*"|[^",\r\x00]*)'
_PLAIN_LINE = rf"^{_FIELD}(?:,{_FIELD})*\r?\n?$"  # a line with its line break
# Python's `csv` refuses a field longer than this (csv.field_size_limit()); such a line is left to it
FIELD_LIMIT = 131_072


def read_text_columns(data: bytes, header: Sequence[str]) -> pa.Table | None:
    """The records of `data` (whole lines of a CSV file after its header) as text columns, ''
    null; None when a record is not one line of the file, a line is blank or not UTF-8, has
    another number of fields than the header, or quotes a part of a field."""
    if not data:
        return pa.table({h: pa.array([], pa.string()) for h in header})
    lines = _lines(data)
    try:
        text = lines.cast(pa.string())  # fails on bytes that are not UTF-8
    except pa.ArrowInvalid:
        return None
    if not pc.all(pc.match_substring_regex(text, _PLAIN_LINE)).as_py() \
            or pc.any(pc.match_substring_regex(text, r"^\r?\n?$")).as_py() \
            or pc.max(pc.binary_length(lines)).as_py() > FIELD_LIMIT + 1:
        return None
    import pyarrow.csv as pacsv

    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=list(header), use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types={h: pa.string() for h in header},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a line with another number of fields than the header
    if table.num_rows != len(lines):
        return None
    return pa.table({h: pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col)
                     for h, col in zip(header, table.columns)})


def _lines(data: bytes) -> pa.Array:
    """Each line of `data` with its line break, as one binary array over the same bytes."""
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n")) + 1
    ends = breaks if breaks.size and breaks[-1] == len(data) else np.append(breaks, len(data))
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    return pa.Array.from_buffers(pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def line_texts(data: bytes, rows: Sequence[int]) -> list[str]:
    """The text of the given records of `data` (0-based), as the row reader quarantines a line."""
    if not rows:
        return []
    picked = _lines(data).take(pa.array(rows, pa.int64()))
    return [line.decode("utf-8").rstrip("\n").rstrip("\r") for line in picked.to_pylist()]


def typed_columns(text: pa.Table, columns: Mapping[str, str], declared_order: Sequence[str],
                  arrow_type: ArrowType) -> tuple[pa.Table, dict[int, str]]:
    """The text columns converted to their declared types, and the rows that do not fit with the
    reason the row reader gives: the first declared column (in `columns:` order) that misfits."""
    reasons: dict[int, str] = {}  # declared_column keeps a row's first reason
    typed = {c: declared_column(text.column(c), c, columns[c], arrow_type, reasons,
                                reason=f"column {c!r} is declared {columns[c]}; this change's value does not fit it")
             for c in declared_order if c in columns}
    return pa.table({c: typed[c] for c in columns}), reasons


def non_null_columns(table: pa.Table, rejected: Mapping[int, str]) -> list[str]:
    """The columns holding a value in a row that is not rejected: the row reader gives a column
    its type only from such a value."""
    keep = np.ones(table.num_rows, dtype=bool)
    keep[list(rejected)] = False
    mask = pa.array(keep)
    return [c for c in table.column_names if pc.any(pc.and_(pc.is_valid(table.column(c)), mask)).as_py()]
