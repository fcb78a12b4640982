"""Reconciliation against a source export: counts and row by row; and against a
live source, by digests of buckets of keys."""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from .figures import Figures
from .ordering import origin
from .values import Misfit, Row, Value, canonical_text, convert, key_text, same, value_type

SAMPLE = 10


@dataclasses.dataclass(frozen=True)
class Report(Figures):
    """A reconciliation's counts and samples (a place each, never a value); the engine adds what
    it could not read of the export."""
    source_rows: int
    target_rows: int
    missing_rows: int
    extra_rows: int
    differing_rows: int
    sample_missing_rows: tuple[str, ...]
    sample_extra_rows: tuple[str, ...]
    sample_differing_rows: tuple[str, ...]
    duplicate_source_keys: int
    unreadable_source_rows: int | None = None
    sample_unreadable_source_rows: tuple[str, ...] | None = None


def compare(target_rows: list[Row], source_rows: list[Row], keys: Sequence[str],
            source_lines: list[int] | None = None) -> Report:
    """Rows compare by meaning (5 == 5.0 == '5') on the export's columns. The samples name
    where a row is (the export's line, the target row's origin), never its values: keys are
    row data too."""
    columns = sorted({c for r in source_rows for c in r})
    target = {key_text([r.get(k) for k in keys]): r for r in target_rows}
    key_types = {k: next((value_type(r[k]) for r in target_rows if r.get(k) is not None), None) for k in keys}
    lines = source_lines if source_lines is not None else list(range(1, len(source_rows) + 1))
    source = {key_text([_as_key(r.get(k), key_types[k]) for k in keys]): (line, r)
              for line, r in zip(lines, source_rows)}
    missing = sorted(source[k][0] for k in set(source) - set(target))
    extra = sorted(_origin(target[k]) for k in set(target) - set(source))
    differing = sorted((source[k][0], [c for c in columns if not same_value(source[k][1].get(c), target[k].get(c))])
                       for k in set(source) & set(target))
    differing = [(line, cols) for line, cols in differing if cols]
    return Report(
        source_rows=len(source_rows), target_rows=len(target_rows),
        missing_rows=len(missing), extra_rows=len(extra), differing_rows=len(differing),
        sample_missing_rows=tuple(f"export line {line}" for line in missing[:SAMPLE]),
        sample_extra_rows=tuple(extra[:SAMPLE]),
        sample_differing_rows=tuple(f"export line {line}: {', '.join(cols)}" for line, cols in differing[:SAMPLE]),
        duplicate_source_keys=len(source_rows) - len(source),
    )


def _origin(row: Row) -> str:
    order = row.get("_cdc_order")
    return origin(order) if isinstance(order, str) and len(order) >= 40 else "a target row"


def _as_key(value: Value, type_: str | None) -> Value:
    """An export's key value as the target's key column holds it ('1.10' stays text in a text
    column, 5.0 is 5 in a long one), so that a key compares by its column's type."""
    if value is None or type_ is None:
        return value
    try:
        return convert(value, type_)
    except Misfit:
        return value


def same_value(source: Value, target: Value) -> bool:
    """Equal by meaning: an export's text equals a typed target value it converts to exactly
    ('2024-01-01 10:00:00' and that instant, '12.50' and Decimal('12.5')), or to the same
    double ('4.9E-324' and 5e-324, 'nan' and NaN)."""
    if canonical_text(source) == canonical_text(target):
        return True
    if source is None or not isinstance(target, (dt.date, Decimal, bytes, float)):
        return False
    try:
        value = convert(source, value_type(target))
    except Misfit:
        return False
    # a double by meaning: NaN is NaN, and -0.0 is 0.0 (as the export's text compares)
    return value == target or (isinstance(target, float) and same(value, target))


def discrepancies(report: Report) -> int:
    """Rows that differ, plus export rows that could not be read (they cannot be vouched for)."""
    return report.missing_rows + report.extra_rows + report.differing_rows + (report.unreadable_source_rows or 0)


# ---- a live source compared with the target, bucket by bucket ----------------------------------
# Neither side is held whole: each row is reduced to (its key's digest, its row's digest), the
# row digests are summed per bucket of keys, and only the keys of buckets whose sums differ are
# looked at one by one, in a second pass over both sides.

BUCKETS = 1024
_MOD = 1 << 128


class _Misfit:
    """A value that does not fit its column's type: it equals nothing the target can hold."""

    def __repr__(self) -> str:
        return "misfit"


MISFIT = _Misfit()


def typed(value: object, type_: str) -> object:
    """A value as a target column of `type_` holds it (both sides go through this, so a value
    compares by its column's type: 12.5 and 12.50 in a decimal(12,2) are one value)."""
    try:
        return convert(value, type_)
    except Misfit:
        return MISFIT


def key_digest(key_values: Sequence[object]) -> bytes:
    """A key's identity (typed values, as `typed` gives them), 16 bytes: keys are compared and kept
    by it, never by their values."""
    return hashlib.blake2b(key_text(key_values).encode(), digest_size=16).digest()


def _encoded(value: object) -> str:
    if value is None:
        return "\x00"
    if isinstance(value, bytes):
        text = value.hex()
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (dt.date, dt.datetime)):
        text = value.isoformat()
    else:
        text = str(value)
    return f"{type(value).__name__}\x02{text}"


def row_digest(key: bytes, values: Sequence[object]) -> int:
    """A row's digest: its key's and every value's, with its type (a text '5' is not the number 5)."""
    h = hashlib.blake2b(key, digest_size=16)
    h.update("\x1f".join(_encoded(v) for v in values).encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big")


def bucket_of(key: bytes, buckets: int = BUCKETS) -> int:
    return int.from_bytes(key[:8], "big") % buckets


class BucketSums:
    """Per bucket of keys: how many rows, and the sum of their digests (modulo 2**128)."""

    def __init__(self, buckets: int = BUCKETS):
        self.buckets = buckets
        self.rows = 0
        self.counts = [0] * buckets
        self.sums = [0] * buckets

    def add(self, key: bytes, digest: int) -> None:
        b = bucket_of(key, self.buckets)
        self.rows += 1
        self.counts[b] += 1
        self.sums[b] = (self.sums[b] + digest) % _MOD

    def differing(self, other: BucketSums) -> set[int]:
        return {b for b in range(self.buckets)
                if self.counts[b] != other.counts[b] or self.sums[b] != other.sums[b]}


@dataclass(frozen=True)
class KeyDifferences:
    missing: int  # keys in the source, not in the target
    extra: int  # keys in the target, not in the source (a key twice in the target counts once more)
    differing: int  # keys in both whose rows differ

    @property
    def total(self) -> int:
        return self.missing + self.extra + self.differing


def key_differences(source: Iterable[tuple[bytes, int]], target: Iterable[tuple[bytes, int]]) -> KeyDifferences:
    """The differing keys of some buckets, counted: (key digest, row digest) pairs of each side."""
    theirs: dict[bytes, int] = {}
    repeated = 0
    for key, digest in target:
        if key in theirs:
            repeated += 1
        theirs[key] = digest
    ours = dict(source)
    return KeyDifferences(missing=sum(1 for k in ours if k not in theirs),
                          extra=sum(1 for k in theirs if k not in ours) + repeated,
                          differing=sum(1 for k, d in ours.items() if k in theirs and theirs[k] != d))
