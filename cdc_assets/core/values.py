"""Source values: CSV inference, canonical key text, and column types for the target.

Column types form a small lattice: null < boolean | long < double < string.
A column takes the join of every value it has seen, so an integer column that
receives a decimal widens to double, and anything mixed with text is text.
"""
from __future__ import annotations

import json
import math
import re

_INT = re.compile(r"[+-]?(0|[1-9]\d*)")
_FLOAT = re.compile(r"[+-]?(\d+\.\d+)")

NULL, BOOLEAN, LONG, DOUBLE, STRING = "null", "boolean", "long", "double", "string"


def infer_text(text: str):
    """A CSV field as a typed value: '' is NULL, plain integers and decimals are numbers.

    Leading zeros ('007') and anything else stay text, so codes keep their spelling.
    """
    if text == "":
        return None
    if _INT.fullmatch(text):
        n = int(text)
        return n if -(1 << 63) <= n < (1 << 63) else text
    if _FLOAT.fullmatch(text) and not re.match(r"[+-]?0\d", text):
        return float(text)
    return text


def source_value(value):
    """A JSON value as stored in a row image: nested structures become JSON text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def canonical_text(value) -> str | None:
    """Text that is equal for values equal by meaning: 5, 5.0 and '5' are one key."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e18 else repr(value)
    if isinstance(value, str):
        inferred = infer_text(value.strip()) if value.strip() == value else value
        if isinstance(inferred, (int, float)):
            return canonical_text(inferred)
        return value
    return str(value)


def key_text(values) -> str:
    return json.dumps([canonical_text(v) for v in values], ensure_ascii=False, separators=(",", ":"))


def value_type(value) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return LONG
    if isinstance(value, float):
        return DOUBLE
    return STRING


def join_types(a: str, b: str) -> str:
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    if {a, b} == {LONG, DOUBLE}:
        return DOUBLE
    return STRING


def coerce(value, type_: str):
    """A value as the column's (joined) type; only widening conversions happen here."""
    if value is None:
        return None
    if type_ == STRING:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        return canonical_text(value) if isinstance(value, int) else repr(value) if isinstance(value, float) else str(value)
    if type_ == DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
