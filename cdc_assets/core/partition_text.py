"""The derived partition value: a string partition column's value as a Delta partition value that
keeps "" apart from null.

Delta's protocol writes null, "" and empty binary alike as a null partition value, and a reader
fills a partition column from the log, not the file. A table whose string partition column
receives "" therefore keeps that column as data in its files and is partitioned by a derived
column, `_cdc_part_<column>`, holding this escape of it: never "", one value per value (so a
partition of the derived column is a partition of the column), and invertible (so the partition
values the log holds name the column's exact values).
"""
from __future__ import annotations

DERIVED_PREFIX = "_cdc_part_"
ESCAPE = "."


def derived_column(column: str) -> str:
    """The name of the Delta partition column that stands for `column` in a derived layout."""
    return DERIVED_PREFIX + column


def is_derived_column(name: str) -> bool:
    return name.startswith(DERIVED_PREFIX)


def derived_value(value: str | None) -> str | None:
    """None stays None; "" and a text starting with the escape get the escape in front; any other
    text is itself (so a plain value names its partition as it does in a native layout). The
    escape is "." since delta-rs writes a partition's folder name with a character such as "~"
    percent-encoded, and its change data feed reader then misses the change files there."""
    if value is None:
        return None
    return ESCAPE + value if value == "" or value.startswith(ESCAPE) else value


def original_value(derived: str | None) -> str | None:
    """The value `derived_value` turned into `derived`."""
    if derived is None:
        return None
    return derived[len(ESCAPE):] if derived.startswith(ESCAPE) else derived
