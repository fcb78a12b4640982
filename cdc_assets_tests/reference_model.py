"""A small pure-Python reference for the apply rules (SPEC section 4, rules 1 to 4).

It knows nothing of the change formats and imports nothing from `cdc_assets`:
a test generates a source history and gives every change its TRUE position in
that history (`seq`, an integer: the order in which the source made the
changes). The reference replays what was delivered so far by that position:

- per key, the delivered change with the greatest `seq` wins (rule 1);
- a winning delete removes the key, and is remembered, so a change with a
  smaller `seq` delivered later never brings the row back (rule 2, tombstones);
- base snapshot rows rank below every change, whatever their content (rule 3);
- a change delivered again with the same event id counts once (rule 4);
- a truncate (op TRUNCATE, no key) removes every key whose latest change ranks at or below
  it, and the greatest one delivered stays the whole table's tombstone (rule 9);
- in a soft-delete table (`soft_state`), a key whose latest change is a delete, or ranks at or
  below a truncate, keeps a row flagged deleted: the image of that latest change (a delete's
  image is the row as the source deleted it) (rule 12).

The formats' own ordering fields (timestamps, SCNs, LSNs, CSNs...) never
appear here: the generator derives them from `seq`, and the product must
recover `seq`'s order from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

UPSERT, DELETE, TRUNCATE = "upsert", "delete", "truncate"

# Ranks compare as tuples: (0, ...) is a base row, (1, seq) a change.
_BASE, _CHANGE = 0, 1


@dataclass(frozen=True)
class SourceChange:
    key: tuple  # () for a truncate
    seq: int  # true position in the source history
    op: str  # UPSERT, DELETE or TRUNCATE
    row: dict = field(hash=False, compare=False)  # full image of the source columns
    event_id: str = ""


class ReferenceTable:
    """The expected current state of one table (or one feed's key namespace)."""

    def __init__(self, base_rows: dict[tuple, dict] | None = None):
        self._latest: dict[tuple, tuple[tuple, str, dict]] = {}
        self._seen: dict[str, SourceChange] = {}
        self._truncated: tuple = (-1,)  # the greatest truncate's rank: below every row
        for i, (key, row) in enumerate((base_rows or {}).items()):
            self._latest[key] = ((_BASE, i), UPSERT, dict(row))

    def deliver(self, change: SourceChange) -> bool:
        """Take one delivered change; returns False for a re-delivery (same event id)."""
        if change.op not in (UPSERT, DELETE, TRUNCATE):
            raise ValueError(f"unknown op {change.op!r}")
        if change.event_id:
            first = self._seen.get(change.event_id)
            if first is not None:
                if (first.key, first.seq, first.op) != (change.key, change.seq, change.op):
                    raise ValueError(f"event id {change.event_id!r} names two different changes")
                return False
            self._seen[change.event_id] = change
        rank = (_CHANGE, change.seq)
        if change.op == TRUNCATE:
            self._truncated = max(self._truncated, rank)
            return True
        current = self._latest.get(change.key)
        if current is None or rank > current[0]:
            self._latest[change.key] = (rank, change.op, dict(change.row))
        return True

    def _live(self, rank: tuple, op: str) -> bool:
        return op == UPSERT and rank > self._truncated

    def state(self) -> dict[tuple, dict]:
        """key -> row of every live key."""
        return {k: dict(row) for k, (rank, op, row) in self._latest.items() if self._live(rank, op)}

    def soft_state(self) -> dict[tuple, tuple[dict, bool]]:
        """A soft-delete table's rows: key -> (row, flagged deleted) of every key ever changed."""
        return {k: (dict(row), not self._live(rank, op)) for k, (rank, op, row) in self._latest.items()}

    def tombstones(self) -> set[tuple]:
        return {k for k, (rank, op, _) in self._latest.items() if not self._live(rank, op)}
