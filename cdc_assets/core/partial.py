"""Combining a key's changes column by column (rules.md#rule-10).

A change may leave a column out: Debezium's PostgreSQL connector writes a placeholder for an
unchanged TOASTed value (on every table), and on a `partial_updates` table an upsert carries only
what changed (a null or absent column). Such a column keeps the key's value: each column takes
the value of the latest change (by ordering key) that carried it since the key's last delete
or the table's last truncate. On a soft-delete table (rules.md#rule-12) a deleted key keeps its last live
row, completed by what the delete's own image carries (a key-only image carries nothing). That is a function of the set of changes alone, never of their arrival order, so any subset of
a key's changes can be combined first and combined again later with the rest: a batch's changes,
a key's target row with the changes after it, or a key's whole history give the same result.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .changes import DELETE, UPSERT
from .values import Row


@dataclass(frozen=True)
class Piece:
    """One change of a key as the combination reads it."""
    order: str  # the full ordering key (tier, source order, arrival)
    op: str  # UPSERT or DELETE
    row: Row
    unset: frozenset[str] = field(default=frozenset())  # columns it does not carry (TOAST placeholders)


@dataclass(frozen=True)
class Combined:
    latest: int  # the index of the change that ranks greatest: its op and ordering key are the key's
    row: Row  # the key's values (a live key's); a column no change carried since the last delete is absent

    def op(self, pieces: Sequence[Piece]) -> str:
        return pieces[self.latest].op


def carried(piece: Piece, column: str, partial: bool) -> bool:
    """Whether a change carries `column`: not a placeholder; on a partial_updates table, or in a
    delete's image, not null or absent either (on another table an upsert's absent column is
    null, as in a full row image)."""
    if column in piece.unset:
        return False
    return not (partial or piece.op == DELETE) or piece.row.get(column) is not None


def combine(pieces: Sequence[Piece], partial: bool, soft: bool = False, cuts: Sequence[str] = ()) -> Combined:
    """The key's state after `pieces` (at least one), whatever their order. `cuts`: the ordering
    keys of the table's truncates, each a delete of every key (rules.md#rule-9). With `soft` (rules.md#rule-12), a
    key whose latest change is a delete keeps its last live row: the columns its upserts carried
    since the delete or truncate before the last of them, each overlaid by what the deletes after
    it carried (a delete's image is the row as the source deleted it; a key-only image carries
    nothing)."""
    latest = max(range(len(pieces)), key=lambda i: pieces[i].order)
    if pieces[latest].op != UPSERT and not soft:
        return Combined(latest, {})
    last_upsert = max((p.order for p in pieces if p.op == UPSERT), default=None)
    # The last delete or truncate before the key's last upsert forgets what came before it.
    ends = [p.order for p in pieces if p.op == DELETE] + list(cuts)
    since = max((o for o in ends if last_upsert is not None and o < last_upsert), default=None)
    used = [p for p in pieces if (since is None or p.order > since) and (p.op == UPSERT or (soft and p.op == DELETE))]
    columns: dict[str, None] = {}
    for p in used:
        columns.update(dict.fromkeys(p.row))
    values: Row = {}
    at: dict[str, str] = {}
    for p in used:
        for c in columns:
            if carried(p, c, partial) and (c not in at or p.order > at[c]):
                values[c], at[c] = p.row.get(c), p.order
    return Combined(latest, values)
