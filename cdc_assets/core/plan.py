"""What is due for a table now: its base import, the ingest of its unstaged batches, its apply.

One rule for the landing sensor, a cycle schedule's tick and `cdc-assets run`, from the table's
progress (read by engine/progress.py), the `apply:` policy's decision and the failed accounting.
The apply comes only once every registered batch is staged and the base snapshot (if any) is
imported; a batch whose `batch_accounted` check failed holds it.

Which batches are ingested is the callers' one difference, said by `Ingest`: a sensor tick asks
for the NEXT unstaged batch only, since runs it asks for together can take the table lock in any
order, and a later batch staged first made the earlier one count as already committed (its changes
lost); the next tick asks for the one after. `run` executes its ingests one after another in its
own process, so it takes ALL of them, in order.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .apply_policy import Decision


class Ingest(enum.Enum):
    NEXT = "next"  # the sensor: the next unstaged batch; later ones once it is staged
    ALL = "all"  # `run` and the cycle run: every unstaged batch, in order


@dataclass(frozen=True)
class Progress:
    """Where a table stands in the warehouse: what the ledger registered and each step committed."""
    registered: tuple[int, ...]  # the ledger's batch sequence numbers, ascending
    staged: int  # the last batch staging committed (-1: none)
    applied: int  # the last batch target holds (-1: none; 0: the base snapshot alone)
    base_snapshot: bool  # the table starts from a base snapshot
    base_imported: bool  # ... and it is imported (True when it has none)

    @property
    def unstaged(self) -> tuple[int, ...]:
        return tuple(seq for seq in self.registered if seq > self.staged)

    @property
    def reached(self) -> int:
        """The last batch the target is to hold: the staged ones, or the base snapshot (batch 0)."""
        return max(self.staged, 0 if self.base_snapshot else -1)

    @property
    def apply_pending(self) -> bool:
        return self.reached > self.applied


@dataclass(frozen=True)
class Steps:
    """The steps due, in the order they run."""
    base_import: bool
    ingest: tuple[int, ...]  # batch sequence numbers, in order
    apply: bool
    waiting: str | None = None  # why a pending apply is not due (the `apply:` policy)
    held: tuple[str, ...] = ()  # pending batches whose batch_accounted check failed: not applied

    @property
    def any(self) -> bool:
        return self.base_import or bool(self.ingest) or self.apply


def due_steps(progress: Progress, ingest: Ingest, decision: Callable[[], Decision],
              unaccounted: Callable[[], Sequence[str]]) -> Steps:
    """The steps due now. `decision` (the `apply:` policy on what is pending) and `unaccounted` (the
    pending batches whose latest batch_accounted evaluation failed) are asked only when an apply
    could be due: they read Delta logs and the instance's check history."""
    unstaged = progress.unstaged
    batches = unstaged[:1] if ingest is Ingest.NEXT else unstaged
    base_import = not progress.base_imported
    if unstaged or base_import or not progress.apply_pending:
        return Steps(base_import, batches, False)
    held = tuple(unaccounted())
    if held:
        return Steps(False, (), False, held=held)
    due = decision()
    return Steps(False, (), due.due, waiting=None if due.due else due.reason)
