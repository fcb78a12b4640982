"""A small pure-Python reference for the apply rules (rules.md#rule-1 to rules.md#rule-4, and rules.md#rule-10).

It knows nothing of the change formats and imports nothing from `cdc_assets`:
a test generates a source history and gives every change its TRUE position in
that history (`seq`, an integer: the order in which the source made the
changes). The reference replays what was delivered so far by that position:

- per key, the delivered change with the greatest `seq` wins (rules.md#rule-1);
- a winning delete removes the key, and is remembered, so a change with a
  smaller `seq` delivered later never brings the row back (rules.md#rule-2, tombstones);
- base snapshot rows rank below every change, whatever their content (rules.md#rule-3);
- a change delivered again with the same event id counts once (rules.md#rule-4);
- a truncate (op TRUNCATE, no key) removes every key whose latest change ranks at or below
  it, and the greatest one delivered stays the whole table's tombstone (rules.md#rule-9);
- a column a change does not carry keeps the key's value: each column takes the
  value of the latest delivered change that carried it since the key's last
  delete or the table's last truncate before it (rules.md#rule-10). A change leaves out its
  `unset` columns (TOAST placeholders), and on a `partial` table also its null or absent ones;
- in a soft-delete table (`soft_state`), a key whose latest change is a delete, or ranks at or
  below a truncate, keeps its last live row flagged deleted, each column a later delete's image
  carries (not null, not a placeholder: the row as the source deleted it) laid over it; a
  key-only delete image carries nothing (rules.md#rule-12).

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
    row: dict = field(hash=False, compare=False)  # the image of the source columns
    event_id: str = ""
    unset: frozenset = field(default=frozenset(), hash=False, compare=False)  # columns not carried


class ReferenceTable:
    """The expected current state of one table (or one feed's key namespace)."""

    def __init__(self, base_rows: dict[tuple, dict] | None = None, partial: bool = False):
        self.partial = partial
        # every delivered change of each key: (rank, op, row, unset)
        self._changes: dict[tuple, list[tuple[tuple, str, dict, frozenset]]] = {}
        self._seen: dict[str, SourceChange] = {}
        self._truncated: tuple = (-1,)  # the greatest truncate's rank: below every row
        self._cuts: list[tuple] = []  # every truncate's rank
        for i, (key, row) in enumerate((base_rows or {}).items()):
            self._changes[key] = [((_BASE, i), UPSERT, dict(row), frozenset())]

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
            self._cuts.append(rank)
            return True
        self._changes.setdefault(change.key, []).append((rank, change.op, dict(change.row), frozenset(change.unset)))
        return True

    def _latest(self, key: tuple) -> tuple[tuple, str, dict, frozenset]:
        return max(self._changes[key], key=lambda c: c[0])

    def _live(self, rank: tuple, op: str) -> bool:
        return op == UPSERT and rank > self._truncated

    def _row(self, key: tuple) -> dict:
        """The key's columns, each from the latest change that carried it since the last delete or
        truncate before the key's last upsert; the deletes after that upsert carry their non-null
        columns (they matter only to a soft-delete table's flagged row)."""
        changes = sorted(self._changes[key], key=lambda c: c[0])
        last_upsert = max((rank for rank, op, _, _ in changes if op == UPSERT), default=None)
        ends = [rank for rank, op, _, _ in changes if op == DELETE] + self._cuts
        since = max((r for r in ends if last_upsert is not None and r < last_upsert), default=(-1,))
        used = [c for c in changes if c[0] > since]
        columns = {col for _, _, row, _ in used for col in row}
        out = {}
        for _, op, row, unset in used:  # ascending rank: a later carrier overwrites
            for col in columns:
                if col in unset or ((self.partial or op == DELETE) and row.get(col) is None):
                    continue
                out[col] = row.get(col)
        return out

    def state(self) -> dict[tuple, dict]:
        """key -> row of every live key."""
        return {k: self._row(k) for k in self._changes if self._live(*self._latest(k)[:2])}

    def soft_state(self) -> dict[tuple, tuple[dict, bool]]:
        """A soft-delete table's rows: key -> (row, flagged deleted) of every key ever changed; a
        flagged key's row is its last live row, with what its later deletes' images carry."""
        return {k: (self._row(k), not self._live(*self._latest(k)[:2])) for k in self._changes}

    def tombstones(self) -> set[tuple]:
        return {k for k in self._changes if not self._live(*self._latest(k)[:2])}
