"""Ordering keys as plain ASCII strings whose byte order is the source's order.

Every component is fixed-width or self-terminating, so comparing two encoded
keys as strings (in Python, Spark or SQL) gives the comparison the source
defines: numbers compare as unsigned 64-bit numbers, never as text.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal, InvalidOperation

from .errors import TerminalError

U64_MAX = (1 << 64) - 1
_HEX = re.compile(r"[0-9A-Fa-f]{1,16}")
_EPOCH_MS = re.compile(r"[+-]?\d{1,19}")

# Rule 3: a base snapshot row ranks below every change, whatever its source order.
BASE_TIER = "0"
CHANGE_TIER = "1"


class OrderingError(TerminalError, ValueError):
    """A value that cannot be turned into an ordering key component."""


def u64(n: int) -> str:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > U64_MAX:
        raise OrderingError(f"{n!r} is not an unsigned 64-bit number")
    return f"{n:016x}"


def i64(n: int) -> str:
    """Signed 64-bit, shifted so that negative numbers sort first."""
    if not -(1 << 63) <= n < (1 << 63):
        raise OrderingError(f"{n!r} is out of the signed 64-bit range")
    return u64(n + (1 << 63))


def hex_number(text: str) -> int:
    t = text.strip()
    if t[:2] in ("0x", "0X"):
        t = t[2:]
    if not _HEX.fullmatch(t):
        raise OrderingError(f"{text!r} is not a hexadecimal number of 1 to 16 digits")
    return int(t, 16)


def change_sequence_number(value: object) -> str:
    """BigQuery `_CHANGE_SEQUENCE_NUMBER`: 1-4 '/'-separated hex sections (seed 004).

    Sections compare as unsigned numbers; with an equal prefix fewer sections rank
    lower, which the '1' section marker / '0' terminator gives. An integer (as
    Datastream writes `change_sequence_number`) is one section.
    """
    if isinstance(value, bool):
        raise OrderingError(f"change sequence number {value!r} is not a number or string")
    if isinstance(value, int):
        return "1" + u64(value) + "0"
    if not isinstance(value, str):
        raise OrderingError(f"change sequence number {value!r} is not a number or string")
    sections = value.split("/")
    if not 1 <= len(sections) <= 4 or len(value) > 4 * 17:
        raise OrderingError(f"change sequence number {value[:80]!r} must have 1 to 4 '/'-separated sections")
    out = []
    for s in sections:
        if not _HEX.fullmatch(s):
            raise OrderingError(f"change sequence number {value[:80]!r}: section {s[:20]!r} is not 1 to 16 hexadecimal digits")
        out.append("1" + u64(int(s, 16)))
    return "".join(out) + "0"


def parse_timestamp(value: object) -> int:
    """Microseconds since the epoch (UTC) from ISO text or epoch milliseconds."""
    if isinstance(value, bool):
        raise OrderingError(f"timestamp {value!r} is not a time")
    if isinstance(value, float) and not math.isfinite(value):
        # JSON's NaN and Infinity are no time: the record goes to quarantine, it does not fail the table.
        raise OrderingError(f"timestamp {value!r} is not a time")
    if isinstance(value, Decimal):  # a JSON number with a fraction, kept exact
        if not value.is_finite():
            raise OrderingError(f"timestamp {value!r} is not a time")
        return int((value * 1000).to_integral_value())
    if isinstance(value, (int, float)):
        return int(round(value * 1000))  # Datastream/BigQuery write epoch milliseconds
    if isinstance(value, dt.date):  # Avro timestamp-millis arrive as datetimes (Parquet dates as dates)
        value = value.isoformat()
    if not isinstance(value, str) or not value.strip():
        raise OrderingError(f"timestamp {value!r} is not a time")
    text = value.strip()
    if _EPOCH_MS.fullmatch(text):
        # Digit-only text is epoch milliseconds (seed 003's source_timestamp is such a JSON string).
        return int(text) * 1000
    try:
        t = dt.datetime.fromisoformat(text.replace(" UTC", "+00:00"))
    except ValueError:
        raise OrderingError(f"timestamp {text[:60]!r} does not parse") from None
    if t.tzinfo is not None:
        try:
            t = t.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            raise OrderingError(f"timestamp {text[:60]!r} is outside years 1 to 9999 in UTC") from None
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
_INT_RE = re.compile(r"[+-]?\d+", re.ASCII)
_DEC_RE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", re.ASCII)  # ASCII: "1٣" is text


def _decimal(d: Decimal) -> str:
    if d.is_nan() or d.is_infinite():
        raise OrderingError(f"{d} cannot order changes")
    if d == 0:
        return "5"
    sign, digits, _ = d.normalize().as_tuple()
    exp = d.normalize().adjusted() + 5000
    if not 0 <= exp <= 9999:
        raise OrderingError(f"{d} is out of range")
    body = "".join(map(str, digits))
    if sign == 0:
        return "6" + f"{exp:04d}" + body + "."  # '.' < any digit: a shorter significand is smaller
    return "4" + f"{9999 - exp:04d}" + "".join(str(9 - int(c)) for c in body) + "~"


def _text(s: str) -> str:
    return "".join(f"{b + 1:03x}" for b in s.encode("utf-8")) + "000"


def typed_value(value: object) -> str:
    """Null < numbers < timestamps < text; integers compare as numbers, times as time."""
    if value is None:
        return "0"
    if isinstance(value, bool):
        return "1" + _decimal(Decimal(int(value)))
    if isinstance(value, int):
        return "1" + _decimal(Decimal(value))
    if isinstance(value, float):
        return "1" + _decimal(Decimal(repr(value)))
    # Parquet and Avro timestamp and decimal columns arrive as datetime, date and Decimal objects,
    # ordered as the times and numbers they are.
    if isinstance(value, Decimal):
        return "1" + _decimal(value)
    if isinstance(value, dt.date):
        return "2" + timestamp(value)
    if isinstance(value, str):
        t = value.strip()
        if _DEC_RE.fullmatch(t):
            try:
                return "1" + _decimal(Decimal(t))
            except InvalidOperation:
                pass
        if t and t[0].isdigit() and ("-" in t or ":" in t):
            try:
                return "2" + timestamp(t)
            except OrderingError:
                pass
        return "3" + _text(value)
    raise OrderingError(f"{type(value).__name__} value cannot order changes")
