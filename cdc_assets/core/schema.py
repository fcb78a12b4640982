"""Column types of a table's history, and the changes whose values cannot fit them.

Each column's type is recorded in a ledger with how it was set:
- `!t` strict: declared in `columns:` or given by a file's schema (Avro, Parquet). It only
  widens safely (int to long, a decimal to a wider decimal); any other value must convert
  to it exactly (a JSON number into a decimal column, ISO text into a timestamp column).
- `t` inferred from typed values (JSON): joins in the lattice of `values.join_types`, but a
  typed source that sends text into a numeric or boolean column, or a boolean into a
  numeric one (or the reverse), changed its type in a way that cannot widen: turning the
  column into text would change it for every reader, so that change goes to quarantine.
- `~t` soft: seen only in CSV, whose types are a guess; CSV text still widens it to text,
  and the first typed value sets it.
An inferred or soft integer column that holds an integer a double cannot hold exactly (past
2^53) is marked `=` before its mark (`=long`, `=~long`): it never becomes a double, which would
round that integer; and a double column takes no such integer.
A key column keeps one row per key value (`Rules.keys`): it widens to text only from integers,
whose key is their text; a double or decimal key column never becomes text (1 and 1.0, one key
as numbers, would be two as text).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from . import names
from .values import (
    BOOLEAN,
    DOUBLE,
    INT,
    LONG,
    NULL,
    STRING,
    Row,
    Value,
    canonical_text,
    decimal_parts,
    exact_type,
    infer_text,
    join_types,
    value_type,
    widen,
)
from .values import fits as value_fits

NUMBERS = {INT, LONG, DOUBLE}
SOFT, STRICT = "~", "!"
EXACT_ONLY = "="  # an integer column holding an integer a double cannot hold: it never becomes a double


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a table says about its column types beyond their values: its key columns, and
    whether an inferred column may widen to text (`widen_to_text`; else the value is quarantined)."""
    keys: tuple[str, ...] = ()
    to_text: bool = True


ANY = Rules()


def is_text_source(file_name: str) -> bool:
    """Files whose values are inferred from text (CSV), not typed by the writer."""
    name = file_name.lower()
    return name.endswith(".csv") or name.endswith(".csv.gz")


def split(ledger_type: str) -> tuple[str, str]:
    """('!', 'decimal(12,2)') from '!decimal(12,2)'; the mark is '' for inferred types."""
    ledger_type = ledger_type.removeprefix(EXACT_ONLY)
    if ledger_type[:1] in (SOFT, STRICT):
        return ledger_type[0], ledger_type[1:]
    return "", ledger_type


def exact_only(ledger_type: str) -> bool:
    """Whether the column holds an integer a double cannot hold exactly (it never becomes a double)."""
    return ledger_type.startswith(EXACT_ONLY)


def beyond_double(value: Value) -> bool:
    """An integer no double holds exactly (2^53 + 1 and the like)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    try:
        return int(float(value)) != value
    except OverflowError:
        return True


def plain(ledger: dict[str, str]) -> dict[str, str]:
    """Column types without their marks."""
    return {c: split(t)[1] for c, t in ledger.items()}


def _numeric(t: str) -> bool:
    return t in NUMBERS or decimal_parts(t) is not None


def fits(column_type: str, value: Value, text_source: bool) -> bool:
    """The inferred rule: may this value join an inferred column of this type?"""
    t = value_type(value)
    if NULL in (column_type, t) or column_type == t or column_type == STRING:
        return True
    if _numeric(column_type) and _numeric(t):
        return True
    if isinstance(value, str) and _numeric(column_type) and _is_number_text(value.strip()):
        return True  # a number spelled as text ("13", as exports and JSON writers quote them)
    return text_source and t == STRING


def _is_number_text(text: str) -> bool:
    return not isinstance(infer_text(text), str)


def _holds(column_type: str, value: Value) -> bool:
    """Whether a strict column holds the value as it is: it converts, and an integer into a
    double column keeps its value (a double holds 53 bits; 2**53 + 1 has no double)."""
    if column_type == DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return int(float(value)) == value
    return value_fits(value, column_type)


def _strict_over_strict(have: str, typed: str, value: Value) -> str | None:
    w = widen(have, typed)
    if w is not None:
        return w
    return have if _holds(have, value) else None


def _strict_column(have: str, value: Value, typed: str | None) -> str | None:
    """The strict column's type after this value, or None when it cannot hold it."""
    if typed:
        return _strict_over_strict(have, typed, value)
    if _holds(have, value):
        return have
    # An integer or decimal literal too wide for the column widens it (int to long, more digits).
    t = value_type(value)
    if t == LONG or decimal_parts(t):
        w = widen(have, t)
        if w is not None and value_fits(value, w):
            return w
    exact = exact_type(value)
    if t == DOUBLE and exact and decimal_parts(have):  # a JSON literal with more digits than the column
        w = widen(have, exact)
        if w is not None and value_fits(value, w):
            return w
    return None


def _inferred_to_strict(have: str, typed: str, value: Value) -> str | None:
    """An inferred column meeting a value whose type a file or declaration gives."""
    if have in (NULL, typed):
        return STRICT + typed
    if have in (INT, LONG) and (typed in (INT, LONG) or decimal_parts(typed)):
        w = widen(typed, have)
        return STRICT + w if w else None
    if have == STRING:
        return have  # anything fits a text column, as its text
    if have == DOUBLE and typed in NUMBERS:
        return have
    return None  # e.g. a decimal never silently becomes a double


def admit(types: dict[str, str], row: Mapping[str, Value], text_source: bool,
          row_types: Mapping[str, str] | None = None, rules: Rules = ANY) -> str | None:
    """Widen `types` with the row's values and return None, or return why the row cannot fit
    (and leave `types` as it was). `row_types`: the types the file or `columns:` gives;
    `rules`: the table's key columns and whether inference may widen a column to text."""
    seen: dict[str, str] = {}
    row_types = row_types or {}
    for col, value in row.items():
        typed = row_types.get(col)
        t = typed or value_type(value)
        if col not in types:
            other = names.same_but_case(col, types)
            if other is not None:
                return (f"column {col!r} and the table's column {other!r} are one column to Spark and Delta (case "
                        f"is not told apart); {names.way_out(col)}")
        if value is None:
            continue
        mark, have = split(types.get(col, SOFT + NULL))
        if not rules.to_text and not typed and mark != STRICT:
            t = _as_number(col, have, value, rules) or t
        if mark == STRICT:
            new = _strict_column(have, value, typed)
            if new is None:
                return _misfit(col, have, t)
            seen[col] = STRICT + new
        elif typed:
            new = typed if mark == SOFT else _inferred_to_strict(have, typed, value)
            if new is None:
                return _misfit(col, have, t)
            seen[col] = new if new[:1] == STRICT or new == have else STRICT + new
        elif mark == SOFT:
            seen[col] = (SOFT if text_source else "") + join_types(have, t)
        else:
            if not fits(have, value, text_source):
                return _misfit(col, have, t)
            seen[col] = join_types(have, t)
        before = types.get(col, SOFT + NULL)
        why = _refused(col, before, seen[col], value, rules)
        if why is not None:
            return why
        if (exact_only(before) or beyond_double(value)) and split(seen[col])[1] in (INT, LONG) \
                and split(seen[col])[0] != STRICT:
            seen[col] = EXACT_ONLY + seen[col]
    types.update(seen)
    return None


def _as_number(col: str, have: str, value: Value, rules: Rules) -> str | None:
    """With `widen_to_text: false`, the type of a number spelled as text (CSV, where a column
    holding any text in a file is text there) that a number column takes as the number: a
    column kept numeric holds it as one. A key's text must be the number's own spelling (`1`,
    not `1.0`), so that its key is the same either way."""
    if not isinstance(value, str) or not _numeric(have):
        return None
    number = infer_text(value.strip())
    if isinstance(number, str) or number is None:
        return None
    if col in rules.keys and canonical_text(number) != value:
        return None
    return value_type(number)


def _refused(col: str, before: str, after: str, value: Value, rules: Rules) -> str | None:
    """Why a widening the values allow would change a stored value or a key, or is one the table
    refuses (`widen_to_text: false`); None when it may be done."""
    have = split(before)[1]
    new_mark, new = split(after)
    if new == DOUBLE and exact_only(before):
        return (f"column {col!r} holds an integer a double cannot hold exactly (past 2^53); this change has a "
                f"fraction there, and as a double the column would round that integer: declare the column's "
                f"type in `columns:` (a decimal(p,s) holds both)")
    if new == DOUBLE and beyond_double(value):
        return (f"column {col!r} holds {_name(DOUBLE)} values (double); this change has an integer a double cannot "
                f"hold exactly (past 2^53) there: declare the column's type in `columns:` (a decimal(p,s) holds both)")
    if new != STRING or have in (NULL, STRING) or new_mark == STRICT:
        return None
    if col in rules.keys and have not in (INT, LONG, BOOLEAN):
        return (f"key column {col!r} holds {_name(have)} values; this change has text there, and as text numbers "
                f"that are one key (1 and 1.0) would be two: the column keeps its type (declare the key's type "
                f"in `columns:`)")
    if not rules.to_text:
        return (f"column {col!r} holds {_name(have)} values; this change has text there, and the table's "
                f"`widen_to_text: false` keeps the column's type")
    return None


def admit_columns(types: dict[str, str], rows: list[Row], row_types: Mapping[str, str]) -> bool:
    """Admit rows of one typed file (Avro, Parquet: every value has its column's file type) all
    at once, when whether each fits depends only on the column types, not on the values: then
    one row holding a value of each column admits all of them, and `types` ends as if each row
    had been admitted in turn. False (and `types` unchanged) when a value could decide, or a
    column misfits: the rows are then admitted one by one, which names each misfit."""
    sample: Row = {}
    for row in rows:
        for col, value in row.items():
            if value is not None and col not in sample:
                sample[col] = value
    for col in sample:
        typed = row_types.get(col)
        if typed is None:
            return False
        mark, have = split(types.get(col, SOFT + NULL))
        if mark == STRICT and widen(have, typed) is None:
            return False  # whether a value converts to the column's own type depends on the value
        if mark != STRICT and have == DOUBLE and typed in (INT, LONG):
            return False  # whether an integer is a double depends on the value (2^53 + 1 is none)
    return admit(types, sample, False, row_types) is None


def _misfit(col: str, have: str, got: str) -> str:
    return f"column {col!r} holds {_name(have)} values; this change has {_name(got)} there, which cannot widen to it"


def widened_to_text(before: dict[str, str], after: dict[str, str]) -> tuple[str, ...]:
    """The columns inference widened to text between two ledgers (a declaration or a file's type
    is no inference; a column's first values are no widening)."""
    out = []
    for col, t in after.items():
        mark, new = split(t)
        old = split(before.get(col, SOFT + NULL))[1]
        if new == STRING and mark != STRICT and old not in (NULL, STRING):
            out.append(col)
    return tuple(out)


def joined(*ledgers: dict[str, str]) -> dict[str, str]:
    """Several ledgers as one: strict wherever any of them is strict, soft only where all are."""
    out: dict[str, str] = {}
    for ledger in ledgers:
        for col, t in ledger.items():
            ledger_was = out.get(col, SOFT + NULL)
            m1, a = split(ledger_was)
            m2, b = split(t)
            if STRICT in (m1, m2):
                joined_type = widen(a, b) or (a if m1 == STRICT else b)
                out[col] = STRICT + joined_type
            else:
                out[col] = (SOFT if m1 == m2 == SOFT else "") + join_types(a, b)
            if (exact_only(t) or exact_only(ledger_was)) and split(out[col])[1] in (INT, LONG):
                out[col] = EXACT_ONLY + out[col]
    return out


def _name(t: str) -> str:
    return {LONG: "integer", INT: "integer", DOUBLE: "decimal", STRING: "text", BOOLEAN: "boolean"}.get(t, t)
