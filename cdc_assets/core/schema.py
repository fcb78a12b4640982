"""Column types of a table's history, and the changes whose values cannot fit them.

A column's type is set by the first value it receives and only widens the way a
reader can follow (SPEC 4.6): null to anything, integer to decimal, a number
spelled as text widens it to text (as before), anything fits a text column. A typed source (JSON, Avro, Parquet) that sends
text into a numeric or boolean column, or a boolean into a numeric one (or the
reverse), changed its type in a way that cannot widen: turning the column into
text would change it for every reader, so that change goes to quarantine
instead. CSV values are typed by inference, a guess, so CSV text still widens a
column to text, and CSV exports and typed files may share a table: a column
seen only in CSV is not held against a typed value.
"""
from __future__ import annotations

from .values import DOUBLE, LONG, NULL, STRING, infer_text, join_types, value_type

NUMBERS = {LONG, DOUBLE}


def is_text_source(file_name: str) -> bool:
    """Files whose values are inferred from text (CSV), not typed by the writer."""
    name = file_name.lower()
    return name.endswith(".csv") or name.endswith(".csv.gz")


def fits(column_type: str, value, text_source: bool) -> bool:
    t = value_type(value)
    if NULL in (column_type, t) or column_type == t or column_type == STRING:
        return True
    if {column_type, t} <= NUMBERS:
        return True
    if t == STRING and column_type in NUMBERS and isinstance(infer_text(value.strip()), (int, float)):
        return True  # a number spelled as text ("13", as exports and JSON writers quote them)
    return text_source and t == STRING


SOFT = "~"  # marks a type only inferred from text so far: a typed value may still set it


def admit(types: dict[str, str], row: dict, text_source: bool) -> str | None:
    """Widen `types` with the row's values and return None, or return why the row cannot fit
    (and leave `types` as it was).

    A column seen only in CSV has a soft type (a guess): the first typed value joins it and
    makes it firm. A firm column takes typed values only when they fit."""
    seen = {}
    for col, value in row.items():
        t = value_type(value)
        if t == NULL:
            continue
        have = types.get(col, SOFT + NULL)
        soft, base = have.startswith(SOFT), have.lstrip(SOFT)
        if not soft and not fits(base, value, text_source):
            return (f"column {col!r} holds {_name(base)} values; this change has {_name(t)} there, "
                    f"which cannot widen to it")
        seen[col] = (SOFT if soft and text_source else "") + join_types(base, t)
    types.update(seen)
    return None


def joined(*ledgers: dict[str, str]) -> dict[str, str]:
    """Several ledgers as one: firm wherever any of them is firm."""
    out: dict[str, str] = {}
    for ledger in ledgers:
        for col, t in ledger.items():
            have = out.get(col, SOFT + NULL)
            soft = have.startswith(SOFT) and t.startswith(SOFT)
            out[col] = (SOFT if soft else "") + join_types(have.lstrip(SOFT), t.lstrip(SOFT))
    return out


def _name(t: str) -> str:
    return {LONG: "integer", DOUBLE: "decimal", STRING: "text", "boolean": "boolean"}.get(t, t)
