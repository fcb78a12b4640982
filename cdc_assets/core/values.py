"""Source values: CSV inference, canonical key text, and column types for the target.

Column types form a small lattice: null < boolean | long < double < string.
A column takes the join of every value it has seen, so an integer column that
receives a decimal widens to double, and anything mixed with text is text.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import uuid
from decimal import Decimal

# FIX (SPEC 3, 4; found by test_random_feeds): without re.ASCII, \d matched any Unicode
# digit, so CSV text "1٣" became the integer 13 (and the key 13) and "٣.5" became 3.5.
_INT = re.compile(r"[+-]?(0|[1-9]\d*)", re.ASCII)
_FLOAT = re.compile(r"[+-]?(\d+\.\d+)", re.ASCII)

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


def _plain(value):
    """FIX (SPEC 3, 4.7): Parquet and Avro readers give datetime, date, time, Decimal,
    bytes and UUID objects (Avro logical types, Parquet timestamp/decimal columns).
    They used to reach the row image as is, and `to_record`'s json.dumps then raised
    TypeError, failing the table. They become the JSON value their JSON twin has:
    ISO text for times, a number for decimals, base64 text for bytes."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        if value == value.to_integral_value() and -(1 << 63) <= value < (1 << 63):
            return int(value)
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _json_default(value):
    plain = _plain(value)
    if plain is value:
        return str(value)
    return plain


def source_value(value):
    """A JSON value as stored in a row image: nested structures become JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=_json_default)
    value = _plain(value)
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
