"""Source values: CSV inference, canonical key text, column types and their conversions.

Column types: boolean, int, long, double, decimal(p,s), string, date,
timestamp (an instant, UTC), timestamp_ntz (wall-clock time), binary; nested
values are JSON text. A column's type comes from the file (Avro or Parquet
schema), else from the table's `columns:` map, else from inference over its
values. Inferred types form a small lattice, null < boolean | int < long <
double < string, in which a column takes the join of every value it has seen.

Numbers written as text (JSON and CSV literals) are kept exact as `NumberText`:
they are typed double by inference, yet a decimal column takes them digit for
digit, never through a float.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, TypeAlias, cast

from .errors import TerminalError

# ASCII digits only: \d alone matches any Unicode digit, which would read CSV text "1٣" as the
# integer 13 (and the key 13) and "٣.5" as 3.5.
_INT = re.compile(r"[+-]?(0|[1-9]\d*)", re.ASCII)
_FLOAT = re.compile(r"[+-]?(\d+\.\d+)", re.ASCII)
_DIGITS = re.compile(r"[+-]?\d+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)  # a number's text, as JSON and CSV writers spell it

NULL, BOOLEAN, INT, LONG, DOUBLE, STRING = "null", "boolean", "int", "long", "double", "string"
DATE, TIMESTAMP, TIMESTAMP_NTZ, BINARY = "date", "timestamp", "timestamp_ntz", "binary"
SIMPLE_TYPES = (BOOLEAN, INT, LONG, DOUBLE, STRING, DATE, TIMESTAMP, TIMESTAMP_NTZ, BINARY)
MAX_PRECISION = 38
_DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)", re.ASCII)
_INT_RANGE = {INT: 1 << 31, LONG: 1 << 63}


# A value as a row image holds it (`source_value`): what every reader's values become.
Value: TypeAlias = "None | bool | int | float | str | Decimal | dt.date | bytes"
# A row image: column name -> value.
Row: TypeAlias = "dict[str, Value]"


class NumberText(Decimal):
    """A number as written in JSON or CSV text: inferred as double, exact for a decimal column."""

    __slots__ = ()


class Misfit(TerminalError, ValueError):
    """A value that does not fit a column type; the message names types, never the value."""


def decimal_type(precision: int, scale: int) -> str:
    return f"decimal({precision},{scale})"


def decimal_parts(type_: str) -> tuple[int, int] | None:
    m = _DECIMAL_TYPE.fullmatch(type_ or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_type(text: object) -> str:
    """A type named in `columns:`, in canonical spelling; ValueError names what is allowed."""
    t = str(text).strip().lower()
    if t in SIMPLE_TYPES:
        return t
    parts = decimal_parts(t)
    if parts and 1 <= parts[0] <= MAX_PRECISION and parts[1] <= parts[0]:
        return decimal_type(*parts)
    raise ValueError(f"unknown column type {text!r} (known: {', '.join(SIMPLE_TYPES)}, decimal(p,s) "
                     f"with 1 <= p <= {MAX_PRECISION} and s <= p)")


def infer_text(text: str) -> int | NumberText | str | None:
    """A CSV field as a typed value: '' is NULL, plain integers and decimals are numbers.

    Leading zeros ('007') and anything else stay text, so codes keep their spelling.
    """
    if text == "":
        return None
    if _INT.fullmatch(text):
        n = int(text)
        return n if -(1 << 63) <= n < (1 << 63) else text
    if _FLOAT.fullmatch(text) and not re.match(r"[+-]?0\d", text):
        return NumberText(text)
    return text


def _plain(value: object) -> object:
    """Reader objects without a column type of their own (time of day, UUID) as text."""
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dt.datetime) and type(value) is not dt.datetime and hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()  # pandas' Timestamp (nanosecond Parquet columns): microseconds, as Delta keeps
    return value


def _jsonable(value: object) -> object:
    """A nested value's parts as JSON values; a decimal stays a JSON number when a float
    reproduces it exactly, and becomes its text otherwise."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        return _float_text(value)  # JSON has no NaN or infinity: the text Spark's to_json writes
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        text = _number_text(value)
        return (int(text) if _INT.fullmatch(text) else float(text)) if Decimal(text) == value and "e" not in text \
            else str(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def source_value(value: object) -> Value:
    """A reader's value as held in a row image: nested structures become JSON text; a float
    stays the IEEE double it is (NaN, the infinities and -0.0 included: a double column holds
    them); a non-finite decimal becomes text (no decimal type holds it)."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_jsonable(value), sort_keys=True, ensure_ascii=False, default=str)
    value = _plain(value)
    if isinstance(value, Decimal) and not value.is_finite():
        return str(value)
    return cast(Value, value)  # readers (JSON, CSV, Arrow, fastavro) give no other scalar type


# NaN and the infinities as text, spelled as Java (Jackson, Kafka Connect, Spark) and BigQuery's
# JSON spell them; a double column also reads Python's and Arrow's spellings (nan, inf, -inf).
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_NON_FINITE_TEXT = re.compile(r"[+-]?(nan|inf|infinity)", re.ASCII | re.IGNORECASE)


def _float_text(value: float) -> str:
    return repr(value) if math.isfinite(value) else _NON_FINITE[repr(value)]


def _double(value: object) -> float | None:
    """A number, or the text of one, as the double nearest to it; None when no double is near
    (a number whose double would be an infinity, or zero while the number is not)."""
    if isinstance(value, float):
        return value
    text = value.strip() if isinstance(value, str) else None
    if text is not None and _NON_FINITE_TEXT.fullmatch(text):
        return math.nan if text[-1] in "nN" else float(text)  # "-NaN" is NaN, as Java reads it
    exact = _exact_decimal(value) if not isinstance(value, (bool, float)) else None
    if exact is None:
        return None
    try:
        d = float(exact)
    except OverflowError:
        return None
    return d if math.isfinite(d) and (d != 0 or exact == 0) else None


_E18 = Decimal(10) ** 18


def _number_text(d: Decimal) -> str:
    """A decimal's canonical text, the same as a float's of equal value (1.5 and 1.50 alike)."""
    if d.copy_abs() < _E18 and d == d.to_integral_value():  # copy_abs: abs() rounds to 28 digits
        return str(int(d))
    f = float(d)
    if math.isfinite(f) and Decimal(repr(f)) == d:
        return repr(f)
    # without trailing zeros, exactly: Decimal.normalize rounds to its context's digits (28 by
    # default, making two decimal(38,s) keys one) and exponent range (making 1e-9999999 zero)
    sign, digits, exp = d.as_tuple()
    exponent = cast(int, exp)  # a finite decimal's: the caller's decimals are finite
    while len(digits) > 1 and digits[-1] == 0:
        digits, exponent = digits[:-1], exponent + 1
    return str(Decimal((sign, digits, exponent)))


def same(a: object, b: object) -> bool:
    """Whether two values of one column are the same value: as `==`, but a NaN is the same as
    a NaN and -0.0 is not the same as 0.0 (a row holding either is unchanged only by itself)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def canonical_text(value: object) -> str | None:
    """Text that is equal for values equal by meaning: 5, 5.0 and '5' compare equal, as a
    reconciliation compares an export's text with a typed value (keys: `key_part`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # every NaN is one NaN; -0.0 equals 0.0
        return str(int(value)) if value.is_integer() and abs(value) < 1e18 else _float_text(value)
    if isinstance(value, Decimal):
        return _number_text(value) if value.is_finite() else str(value)
    if isinstance(value, str):
        inferred = infer_text(value.strip()) if value.strip() == value else value
        if isinstance(inferred, (int, Decimal)):
            return canonical_text(inferred)
        return value
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def key_part(value: object) -> str | None:
    """One key column's value as key text: a text is exactly itself (a zip code, a version
    or a SKU is never read as a number); other values by `canonical_text`, so equal numbers
    of a column's type are one key."""
    return value if isinstance(value, str) else canonical_text(value)


def key_text(values: Iterable[object]) -> str:
    return json.dumps([key_part(v) for v in values], ensure_ascii=False, separators=(",", ":"))


def decimal_size(d: Decimal) -> tuple[int, int]:
    """The precision and scale of the narrowest decimal type holding finite `d` exactly; the
    precision may pass MAX_PRECISION, which no number type then holds."""
    _, digits, exp = d.as_tuple()
    exponent = cast(int, exp)
    scale = max(0, -exponent)
    return max(len(digits) + max(0, exponent), scale, 1), scale


def _decimal_of(d: Decimal) -> str:
    if not d.is_finite():  # NaN or infinity: no decimal holds it, a row image holds its text
        return STRING
    precision, scale = decimal_size(d)
    return decimal_type(min(precision, MAX_PRECISION), min(scale, MAX_PRECISION))


def value_type(value: object) -> str:
    """The type a value has on its own (inference): what a column holding only it would be."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return LONG if -(1 << 63) <= value < (1 << 63) else _decimal_of(Decimal(value))
    if isinstance(value, (float, NumberText)):
        return DOUBLE
    if isinstance(value, Decimal):
        return _decimal_of(value)
    if isinstance(value, dt.datetime):
        return TIMESTAMP if value.tzinfo is not None else TIMESTAMP_NTZ
    if isinstance(value, dt.date):
        return DATE
    if isinstance(value, bytes):
        return BINARY
    return STRING


def exact_type(value: object) -> str | None:
    """The narrowest decimal type holding a number written as text (or a decimal) exactly."""
    if isinstance(value, Decimal) and value.is_finite():
        return _decimal_of(value)
    return None


def _wider_decimal(a: tuple[int, int], b: tuple[int, int]) -> str | None:
    scale = max(a[1], b[1])
    precision = max(a[0] - a[1], b[0] - b[1]) + scale
    return decimal_type(precision, scale) if precision <= MAX_PRECISION else None


def widen(column_type: str, other: str) -> str | None:
    """The safe widening of a declared or file-typed column to hold `other` as well, or None:
    each pair holds every value of both types exactly (int to long or to double, a decimal to a
    wider decimal, an integer and a decimal to a decimal wide enough for both, a date to a
    timestamp at its midnight). A long and a double have none: a double holds 53 bits."""
    if other in (NULL, column_type):
        return column_type
    if column_type == NULL:
        return other
    pair = {column_type, other}
    if pair == {INT, LONG}:
        return LONG
    if pair == {INT, DOUBLE}:
        return DOUBLE
    if DATE in pair and pair - {DATE} <= {TIMESTAMP, TIMESTAMP_NTZ}:
        return column_type if column_type != DATE else other
    a, b = decimal_parts(column_type), decimal_parts(other)
    if a and b:
        return _wider_decimal(a, b)
    if a and other in (INT, LONG):
        return _wider_decimal(a, (10 if other == INT else 19, 0))
    if b and column_type in (INT, LONG):
        return _wider_decimal(b, (10 if column_type == INT else 19, 0))
    return None


def join_types(a: str, b: str) -> str:
    """The inferred lattice: numbers join to the wider number, anything else mixed is text."""
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    w = widen(a, b) or widen(b, a)  # an integer column meeting a wide integer becomes a decimal
    if w is not None:
        return w
    numbers = {INT, LONG, DOUBLE}
    if {a, b} <= numbers:
        return DOUBLE
    return STRING


def _integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())  # a declared integer column takes '+5' and '007' as numbers
    return None


def _exact_decimal(value: object) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        return Decimal(value) if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        if not _NUMBER.fullmatch(text):
            return None  # Decimal also reads '1_000' and any Unicode digit; no number writer does
        try:
            return Decimal(text)
        except InvalidOperation:
            return None
    return None


def _timestamp(value: object, with_zone: bool) -> dt.datetime | None:
    if isinstance(value, str):
        text = value.strip().replace(" UTC", "+00:00")
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        frac = re.search(r"\.(\d{7,})", text)
        if frac:  # Python keeps microseconds; finer digits are cut, as Spark and Delta do
            text = text.replace(frac.group(0), "." + frac.group(1)[:6])
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        return None
    if with_zone:
        try:
            return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
        except OverflowError:
            return None  # an instant outside years 1 to 9999 in UTC: no timestamp holds it
    return value if value.tzinfo is None else None


def convert(value: object, type_: str) -> Value:
    """`value` as a value of column type `type_`, exactly, or Misfit. Text is read as the type's
    text form (ISO times, base64 binary); numbers never pass through a float on their way into
    a decimal, and a decimal or timestamp never silently becomes something narrower."""
    if value is None or type_ == NULL:
        return cast(Value, value)  # a column of no type yet holds a value as it is
    if type_ == STRING:
        if isinstance(value, str):
            return value
        if isinstance(value, NumberText):
            return str(value)
        if isinstance(value, float):
            return _float_text(value)
        return canonical_text(value)
    if type_ == BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
    elif type_ in _INT_RANGE:
        n = _integer(value) if not isinstance(value, float) else None
        if n is not None and -_INT_RANGE[type_] <= n < _INT_RANGE[type_]:
            return n
    elif type_ == DOUBLE:
        if isinstance(value, (int, float, NumberText, str)) and not isinstance(value, bool):
            double = _double(value)
            if double is not None:
                return double
    elif type_ == DATE:
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value.strip())
            except ValueError:
                pass
    elif type_ in (TIMESTAMP, TIMESTAMP_NTZ):
        t = _timestamp(value, type_ == TIMESTAMP)
        if t is not None:
            return t
    elif type_ == BINARY:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except ValueError:
                pass
    else:
        parts = decimal_parts(type_)
        d = _exact_decimal(value) if parts and not isinstance(value, float) else None
        if parts and d is not None:
            precision, scale = parts
            with localcontext(prec=2 * MAX_PRECISION + 2):  # the default 28 digits would round a decimal(38,s)
                try:
                    q = d.quantize(Decimal(1).scaleb(-scale))
                except InvalidOperation:  # more digits than the context holds (1e400): no decimal(p,s) does
                    q = None
                if q is not None and q == d and len(q.as_tuple().digits) <= precision:
                    return q
    raise Misfit(f"a {value_type(value) if not isinstance(value, str) else 'text'} value does not fit {type_}")


def fits(value: object, type_: str) -> bool:
    try:
        convert(value, type_)
    except Misfit:
        return False
    return True


# ---- row images ---------------------------------------------------------------
# A row image travels between the steps as JSON; values JSON has no type for are tagged.
_TAGS: dict[str, type[Decimal]] = {"$decimal": Decimal, "$number": NumberText}


def encode_value(value: Value) -> Value | dict[str, str]:
    """A value as a row image's JSON holds it: a value JSON has no type for is tagged."""
    if isinstance(value, NumberText):
        return {"$number": str(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$" + (TIMESTAMP if value.tzinfo is not None else TIMESTAMP_NTZ): value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, bytes):
        return {"$binary": base64.b64encode(value).decode("ascii")}
    return value


def _decode_value(value: Any) -> Any:
    if not isinstance(value, dict) or len(value) != 1:
        return value
    (tag, text), = value.items()
    if tag in _TAGS:
        return _TAGS[tag](text)
    if tag in ("$timestamp", "$timestamp_ntz"):
        return dt.datetime.fromisoformat(text)
    if tag == "$date":
        return dt.date.fromisoformat(text)
    if tag == "$binary":
        return base64.b64decode(text)
    return value


# The columns a change does not carry (a PostgreSQL TOAST placeholder): listed in its image under
# this name, which no source column can have (names starting with `_cdc_` are refused).
UNSET_KEY = "_cdc_unset"


def encode_row(row: Mapping[str, Value], sort_keys: bool = False, unset: Iterable[str] = ()) -> str:
    image: dict[str, Any] = {k: encode_value(v) for k, v in row.items()}
    if unset:
        image[UNSET_KEY] = sorted(unset)
    return json.dumps(image, ensure_ascii=False, sort_keys=sort_keys)


def decode_image(text: str) -> tuple[Row, frozenset[str]]:
    """A row image and the columns its change does not carry."""
    image = json.loads(text)
    unset = frozenset(image.pop(UNSET_KEY, None) or ())
    return {k: _decode_value(v) for k, v in image.items()}, unset


def decode_row(text: str) -> Row:
    """A row image's values; a column its change does not carry is absent."""
    return decode_image(text)[0]
