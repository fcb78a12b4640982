"""Corrections to the Dagster this product pins, applied when the wiring is imported.

A step waiting for a pool slot asks the instance again after a back-off (1 s growing to 15 s), and
between two asks its executor sleeps for `interval_to_next_pending_claim_check()`. Dagster 1.13
computes that as `min(0, time left)`, never above zero, so a waiting run looped without sleeping
and kept a core busy for as long as it waited (dagster-io/dagster pull request 20367 found the same
and was closed unmerged). The correction returns the time left until the earliest ask.
"""
from __future__ import annotations

import time

from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext


def _interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


InstanceConcurrencyContext.interval_to_next_pending_claim_check = _interval_to_next_pending_claim_check  # type: ignore[method-assign]
