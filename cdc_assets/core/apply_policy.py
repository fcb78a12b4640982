"""When pending changes are merged into a target (`apply:` in cdc.yaml).

Every batch is staged as it lands; merging it into the target can wait, as Gluent's
Incremental Update waits for a threshold and BigQuery's max_staleness trades freshness for
cost: a merge is due once `min_changes` changes are pending or the oldest pending batch has
waited `max_staleness`. Readers do not wait for it: the fresh read (engine/fresh.py) shows
the staged changes with the winners the merge will pick.
"""
from __future__ import annotations

import dataclasses
import re

_DURATION = re.compile(r"(\d+)\s*(s|m|h|d)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclasses.dataclass(frozen=True)
class ApplyPolicy:
    min_changes: int | None = None  # merge once this many changes are pending
    max_staleness: float | None = None  # seconds: merge once the oldest pending batch has waited this long

    @property
    def waits(self) -> bool:
        return self.min_changes is not None or self.max_staleness is not None


def parse_duration(text: object) -> float:
    """'90s', '15m', '2h', '1d' as seconds; a bare number is seconds."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"{text!r} is negative")
        return float(text)
    m = _DURATION.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 2h or 1d")
    return float(int(m.group(1)) * _SECONDS[m.group(2)])


def format_duration(seconds: float) -> str:
    for unit in ("d", "h", "m"):
        if seconds >= _SECONDS[unit] and seconds % _SECONDS[unit] == 0:
            return f"{int(seconds // _SECONDS[unit])}{unit}"
    return f"{seconds:g}s"


@dataclasses.dataclass(frozen=True)
class Decision:
    due: bool
    reason: str


def decide(policy: ApplyPolicy, target_exists: bool, pending_changes: int, oldest_wait: float | None) -> Decision:
    """Whether to merge now. `oldest_wait`: seconds since the oldest pending batch was registered."""
    if not target_exists:
        return Decision(True, "first build")  # readers have no target to read until there is one
    if not policy.waits:
        return Decision(True, "applies every batch")
    if policy.min_changes is not None and pending_changes >= policy.min_changes:
        return Decision(True, f"{pending_changes} changes pending (min_changes {policy.min_changes})")
    if policy.max_staleness is not None and oldest_wait is not None and oldest_wait >= policy.max_staleness:
        return Decision(True, f"oldest pending batch waited {format_duration(round(oldest_wait))} "
                              f"(max_staleness {format_duration(policy.max_staleness)})")
    parts = [f"{pending_changes} changes pending"]
    if policy.min_changes is not None:
        parts.append(f"min_changes {policy.min_changes}")
    if policy.max_staleness is not None:
        waited = "" if oldest_wait is None else f"oldest waited {format_duration(round(oldest_wait))}, "
        parts.append(f"{waited}max_staleness {format_duration(policy.max_staleness)}")
    return Decision(False, "merge waits: " + "; ".join(parts))
