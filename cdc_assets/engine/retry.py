"""Re-run a step whose Delta commit lost to another writer's.

Two runs of one table can meet where the file lock cannot reach (an object-store
warehouse, another machine). delta-rs then refuses the later commit; re-running
the whole step re-reads the tables, and its idempotence check makes it a no-op
when the other run already committed the same batch, so nothing is doubled.
"""
from __future__ import annotations

import logging
import random
import re
import time

from deltalake.exceptions import CommitFailedError

from .delta import CommitConflict

ATTEMPTS = 5
BACKOFF = 0.5  # seconds before the first re-run; doubled each time, with jitter

# delta-rs's texts for "another writer committed first" (CommitConflictError, MaxCommitAttempts);
# other CommitFailedErrors (append-only table, unsupported features) would fail again.
_CONFLICT = re.compile(r"concurrent transaction|metadata changed since last commit|"
                       r"protocol changed since last commit|^failed to commit transaction: \d+$", re.I)

logger = logging.getLogger(__name__)


def is_conflict(e: BaseException) -> bool:
    if isinstance(e, CommitConflict):
        return True
    return isinstance(e, CommitFailedError) and bool(_CONFLICT.search(str(e).strip()))


def on_conflict(step, what: str, log=None, attempts: int | None = None, backoff: float | None = None):
    """`step()`, re-run from the start (at most `attempts` runs in all) while it loses a commit race."""
    attempts, backoff = attempts or ATTEMPTS, backoff or BACKOFF
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except Exception as e:  # noqa: BLE001 - only conflicts are retried, the rest re-raised
            if attempt == attempts or not is_conflict(e):
                raise
            delay = backoff * 2 ** (attempt - 1) * (1 + random.random())  # jitter: losers spread out
            reason = str(e).strip().splitlines()[0]
            (log or logger.warning)(f"{what}: another writer committed first ({reason}); "
                                    f"re-running the step in {delay:.1f}s (attempt {attempt + 1} of {attempts})")
            time.sleep(delay)
