"""Ordering keys as plain ASCII strings whose byte order is the source's order.

Every component is fixed-width or self-terminating, so comparing two encoded
keys as strings (in Python, Spark or SQL) gives the comparison the source
defines: numbers compare as unsigned 64-bit numbers, never as text.

An OrderingError's message names the kind of value and what it lacks, never the value: it
becomes a quarantine reason, which reaches logs; the caller names the column.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal, InvalidOperation

from .errors import TerminalError
from .values import BINARY, STRING, TIMESTAMP, Misfit, convert

U64_MAX = (1 << 64) - 1
_HEX = re.compile(r"[0-9A-Fa-f]{1,16}")
_EPOCH_MS = re.compile(r"[+-]?\d{1,19}")

# rules.md#rule-3: a base snapshot row ranks below every change, whatever its source order.
BASE_TIER = "0"
CHANGE_TIER = "1"


class OrderingError(TerminalError, ValueError):
    """A value that cannot be turned into an ordering key component."""


def u64(n: int) -> str:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > U64_MAX:
        raise OrderingError("a number outside the unsigned 64-bit range")
    return f"{n:016x}"


def i64(n: int) -> str:
    """Signed 64-bit, shifted so that negative numbers sort first."""
    if not -(1 << 63) <= n < (1 << 63):
        raise OrderingError("a number outside the signed 64-bit range")
    return u64(n + (1 << 63))


def hex_number(text: str) -> int:
    t = text.strip()
    if t[:2] in ("0x", "0X"):
        t = t[2:]
    if not _HEX.fullmatch(t):
        raise OrderingError("not a hexadecimal number of 1 to 16 digits")
    return int(t, 16)


def change_sequence_number(value: object) -> str:
    """BigQuery `_CHANGE_SEQUENCE_NUMBER`: 1-4 '/'-separated hex sections (rules.md#bigquery-cdc).

    Sections compare as unsigned numbers; with an equal prefix fewer sections rank
    lower, which the '1' section marker / '0' terminator gives. An integer (as
    Datastream writes `change_sequence_number`) is one section.
    """
    if isinstance(value, bool):
        raise OrderingError("change sequence number is a boolean, not a number or string")
    if isinstance(value, int):
        if not 0 <= value <= U64_MAX:
            raise OrderingError("change sequence number is outside the unsigned 64-bit range")
        return "1" + u64(value) + "0"
    if not isinstance(value, str):
        raise OrderingError(f"change sequence number is a {type(value).__name__}, not a number or string")
    sections = value.split("/")
    if not 1 <= len(sections) <= 4 or len(value) > 4 * 17:
        raise OrderingError("change sequence number must have 1 to 4 '/'-separated sections")
    out = []
    for n, s in enumerate(sections, start=1):
        if not _HEX.fullmatch(s):
            raise OrderingError(f"change sequence number: section {n} is not 1 to 16 hexadecimal digits")
        out.append("1" + u64(int(s, 16)))
    return "".join(out) + "0"


def parse_timestamp(value: object) -> int:
    """Microseconds since the epoch (UTC) from ISO text or epoch milliseconds."""
    if isinstance(value, bool):
        raise OrderingError("timestamp is a boolean, not a time")
    if isinstance(value, float) and not math.isfinite(value):
        # JSON's NaN and Infinity are no time: the record goes to quarantine, it does not fail the table.
        raise OrderingError("timestamp is NaN or an infinity, not a time")
    if isinstance(value, Decimal):  # a JSON number with a fraction, kept exact
        if not value.is_finite():
            raise OrderingError("timestamp is NaN or an infinity, not a time")
        return int((value * 1000).to_integral_value())
    if isinstance(value, (int, float)):
        return int(round(value * 1000))  # Datastream/BigQuery write epoch milliseconds
    if isinstance(value, dt.date):  # Avro timestamp-millis arrive as datetimes (Parquet dates as dates)
        value = value.isoformat()
    if not isinstance(value, str) or not value.strip():
        kind = "null" if value is None else "empty text" if isinstance(value, str) else f"a {type(value).__name__}"
        raise OrderingError(f"timestamp is {kind}, not a time")
    text = value.strip()
    if _EPOCH_MS.fullmatch(text):
        # Digit-only text is epoch milliseconds (Datastream's JSON source_timestamp, rules.md#datastream).
        return int(text) * 1000
    try:
        t = dt.datetime.fromisoformat(text.replace(" UTC", "+00:00"))
    except ValueError:
        raise OrderingError("timestamp does not parse as an ISO 8601 time or epoch milliseconds") from None
    if t.tzinfo is not None:
        try:
            t = t.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            raise OrderingError("timestamp is outside years 1 to 9999 in UTC") from None
    delta = t - dt.datetime(1970, 1, 1)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def timestamp(value: object) -> str:
    return i64(parse_timestamp(value))


def arrival(batch_seq: int, file_index: int, line: int) -> str:
    """Last tie-break: batch, file (by name within the batch), line."""
    return u64(batch_seq) + f"{file_index:08x}" + u64(line)


def origin(order: str) -> str:
    """Where a stored change came from, read back from its ordering key: a place, never a value,
    so that checks can point at a row without quoting it."""
    tail = order[-40:]
    batch_seq, file_index, line = int(tail[:16], 16), int(tail[16:24], 16), int(tail[24:], 16)
    if order.startswith(BASE_TIER) and batch_seq == 0:
        return f"base snapshot line {line}"
    return f"batch {batch_seq} file {file_index + 1} line {line}"


# Typed values (changeset `sequence_by`): a type tag, then an order-preserving body.
_DEC_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", re.ASCII)  # ASCII: "1٣" is text
NULL_TAG, NUMBER_TAG, TIME_TAG, TEXT_TAG = "0", "1", "2", "3"


def _decimal(d: Decimal) -> str:
    if d.is_nan() or d.is_infinite():
        raise OrderingError("NaN or an infinity cannot order changes")
    if d == 0:
        return "5"
    sign, digits, _ = d.normalize().as_tuple()
    exp = d.normalize().adjusted() + 5000
    if not 0 <= exp <= 9999:
        raise OrderingError("a number whose exponent is beyond 10^±4999 cannot order changes")
    body = "".join(map(str, digits))
    if sign == 0:
        return "6" + f"{exp:04d}" + body + "."  # '.' < any digit: a shorter significand is smaller
    return "4" + f"{9999 - exp:04d}" + "".join(str(9 - int(c)) for c in body) + "~"


def _text(s: str | bytes) -> str:
    return "".join(f"{b + 1:03x}" for b in (s if isinstance(s, bytes) else s.encode("utf-8"))) + "000"


def _number(value: object) -> str | None:
    """A number's component, or None when `value` is no number (text spelling a decimal number is one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return NUMBER_TAG + _decimal(Decimal(value))
    if isinstance(value, float):
        return NUMBER_TAG + _decimal(Decimal(repr(value)))
    if isinstance(value, Decimal):  # Parquet and Avro decimal columns arrive as Decimals
        return NUMBER_TAG + _decimal(value)
    if isinstance(value, str) and _DEC_RE.fullmatch(value.strip()):
        try:
            return NUMBER_TAG + _decimal(Decimal(value.strip()))
        except InvalidOperation:
            return None
    return None


def _time(value: object) -> str | None:
    """A time's component, or None when `value` is no time: exactly what a column declared
    `timestamp` takes (ISO 8601 text, a file's dates and timestamps), a time without a zone in UTC."""
    try:
        t = convert(value.strip() if isinstance(value, str) else value, TIMESTAMP)
    except Misfit:
        return None
    return TIME_TAG + timestamp(t) if isinstance(t, dt.datetime) else None


def typed_value(value: object, declared: str | None = None) -> str:
    """One `sequence_by` value's component. Inferred (no `declared` type): null < numbers < times;
    numbers (JSON numbers, text spelling a decimal number, a file's decimals) compare as numbers, and
    ISO 8601 times (text or a file's dates and timestamps) as time. Any other value (other text,
    booleans) orders nothing: OrderingError, and its change is quarantined. A `declared` column
    converts its value to its type first: `string` compares as text (UTF-8 byte order), `binary` by
    its bytes, numbers, dates and times as numbers and time; a value that does not fit is an error."""
    if value is None:
        return NULL_TAG
    if declared is None:
        found = _number(value)
        if found is None and not isinstance(value, (bool, int, float, Decimal)):
            found = _time(value)
        if found is None:
            kind = "text" if isinstance(value, str) else ("a boolean" if isinstance(value, bool)
                                                          else f"a {type(value).__name__}")
            raise OrderingError(f"holds {kind} that is neither a number nor an ISO 8601 time; declare its type "
                                "in the table's `columns:` (`string` orders it as text)")
        return found
    try:
        typed = convert(value, declared)
    except Misfit:
        raise OrderingError(f"holds a value that does not fit its declared type {declared}") from None
    if declared == STRING:
        return TEXT_TAG + _text(str(typed))
    if declared == BINARY and isinstance(typed, bytes):
        return TEXT_TAG + _text(typed)
    if isinstance(typed, bool):
        return NUMBER_TAG + _decimal(Decimal(int(typed)))
    if isinstance(typed, dt.date):
        return TIME_TAG + timestamp(typed)
    found = _number(typed)
    if found is None:
        raise OrderingError(f"holds a value that does not fit its declared type {declared}")
    return found
