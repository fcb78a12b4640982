"""Cycles on a schedule: `schedule:` on a table, `groups:` of tables that share one
schedule, and the `timezone:` their cron strings are read in (defs/schedules.py wires them).

Kept apart from config.py, which calls these and turns a ValueError into a ConfigError."""
from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass

from .config_keys import keys_under

MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
# (what the field is, lowest, highest, names it takes): the five fields of a cron string
CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
               ("month", 1, 12, MONTHS), ("day of week", 0, 7, DAYS))
_ITEM = re.compile(r"(?P<range>\*|(?P<lo>[0-9]+|[a-z]{3})(?:-(?P<hi>[0-9]+|[a-z]{3}))?)(?:/(?P<step>[0-9]+))?")
GROUP_KEYS = keys_under("groups.NAME")
GROUP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class CycleGroup:
    """Tables whose cycles (register, ingest each new batch, apply, publish) run together, on one schedule."""
    name: str
    tables: tuple[str, ...]
    schedule: str
    parallel: int = 1  # processes the group's tables run in side by side


def cron_problem(value: object) -> str | None:
    """What is wrong with a cron string of 5 fields (minute hour day-of-month month day-of-week), or None.

    Each field is items separated by ',': `*`, a number or a range `a-b` (months and week days
    also by their English three-letter names), each optionally `/step`. It refuses whatever Dagster's
    own check refuses (that one would fail the definitions without naming the table), and also
    ranges that run backwards and Quartz's `L`, `W`, `#` and `?`."""
    if not isinstance(value, str) or len(value.split()) != 5:
        return "5 fields are needed: minute hour day-of-month month day-of-week"
    for text, (what, low, high, names) in zip(value.split(), CRON_FIELDS):
        for item in text.split(","):
            m = _ITEM.fullmatch(item.lower())
            if m is None:
                return f"{what} field {text!r}: {item!r} is not *, a number or a range, each optionally /step"
            values = []
            for part in (m.group("lo"), m.group("hi")):
                if part is None:
                    continue
                number = names.get(part) if part.isalpha() else int(part)
                if number is None or not low <= number <= high:
                    return f"{what} field {text!r}: {part!r} is not between {low} and {high}"
                values.append(number)
            if len(values) == 2 and values[0] > values[1]:
                return f"{what} field {text!r}: the range {item!r} runs backwards"
            if m.group("step") is not None and int(m.group("step")) < 1:
                return f"{what} field {text!r}: the step in {item!r} must be at least 1"
    return None


def cron(value: object, where: str) -> str:
    problem = cron_problem(value)
    if problem is None and isinstance(value, str):  # cron_problem refuses anything but a string
        return value
    raise ValueError(f"{where} {value!r}: {problem} (a cron string, e.g. \"*/15 * * * *\")")


def timezone(value: object, where: str) -> str | None:
    """`timezone: Europe/Paris`: an IANA time zone name; every cron string of the file is read in it."""
    if value is None:
        return None
    try:
        if not isinstance(value, str) or not value:
            raise ValueError
        zoneinfo.ZoneInfo(value)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ValueError(f"{where} {value!r} is not a time zone name (IANA, e.g. Europe/Paris or UTC)") from None
    return value


def groups(raw: object, tables: Mapping[str, str | None], where: str) -> tuple[CycleGroup, ...]:
    """`groups: {NAME: {tables: [T, ...], schedule: "<cron>"}}`. `tables` maps each configured table's
    name to its own `schedule` (or None). A table is in at most one group and then has no schedule of
    its own; a group is not named like a table (their schedules would be named alike)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{where}: field 'groups' must map group names to {{tables: [...], schedule: \"<cron>\"}}")
    out: list[CycleGroup] = []
    member_of: dict[str, str] = {}
    by_upper = {t.upper(): t for t in tables}
    for name, group in raw.items():
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise ValueError(f"{where}: field 'groups': group name {name!r} must be a letter then letters, digits "
                             "or '_' (at most 128): it names the group's schedule and job")
        here = f"{where}: group '{name}'"
        if name.upper() in by_upper:
            raise ValueError(f"{here}: a group is not named like a table ('{by_upper[name.upper()]}'): their "
                             "schedules would share the name")
        if not isinstance(group, dict):
            raise ValueError(f"{here} must be a mapping {{tables: [...], schedule: \"<cron>\"}}")
        for k in group:
            if k not in GROUP_KEYS:
                raise ValueError(f"{here}: unknown field '{k}' (allowed: {', '.join(sorted(GROUP_KEYS))})")
        members = group.get("tables")
        if isinstance(members, str):
            members = [members]
        if not isinstance(members, list) or not members or not all(isinstance(t, str) for t in members):
            raise ValueError(f"{here}: field 'tables' must list the group's tables")
        for t in members:
            if t not in tables:
                raise ValueError(f"{here}: field 'tables' names '{t}', which is not a configured table")
            if t in member_of:
                where_else = "this group twice" if member_of[t] == name else f"group '{member_of[t]}' too"
                raise ValueError(f"{here}: field 'tables': table '{t}' is in {where_else}; a table is in one group")
            if tables[t] is not None:
                raise ValueError(f"{here}: field 'tables': table '{t}' has a 'schedule' of its own; remove it or "
                                 "take the table out of the group")
            member_of[t] = name
        if "schedule" not in group:
            raise ValueError(f"{here}: field 'schedule' is required, e.g. schedule: \"*/15 * * * *\"")
        parallel = group.get("parallel", 1)
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"{here}: field 'parallel' must be a number of processes (1 or more), not {parallel!r}")
        out.append(CycleGroup(name, tuple(members), cron(group["schedule"], f"{here}: field 'schedule'"), parallel))
    return tuple(out)
