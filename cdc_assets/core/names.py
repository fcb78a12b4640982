"""Column names: which a target can hold, and how each SQL dialect
the engine writes names one.

A Delta table without column mapping holds any name but one with a space or one of
`,;{}()=`, a newline or a tab. The target's own bookkeeping columns start with `_cdc_`, and
Spark and delta-rs compare names without case, so a source column may not start with `_cdc_`
nor differ from another only by case. Every other name works through every path, because
every path quotes it with the functions below instead of splicing it into SQL.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

FORBIDDEN = " ,;{}()\n\t="
BOOKKEEPING = "_cdc_"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(name: str) -> str | None:
    """Why a source column of this name cannot be a target column, or None when it can."""
    if not name:
        return "an empty column name"
    if _LONE_SURROGATE.search(name):
        return "a column name that is not valid Unicode (a lone surrogate)"
    bad = sorted({c for c in name if c in FORBIDDEN})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return f"column {name!r}: Delta Lake forbids {shown} in a column name"
    if name.lower().startswith(BOOKKEEPING):
        return f"column {name!r}: names starting with '{BOOKKEEPING}' are the target's bookkeeping columns"
    return None


def way_out(name: str) -> str:
    """The fix a name error points at: the table's `rename:` map in cdc.yaml (a name that is no
    Unicode text has none: no YAML file can name it)."""
    if _LONE_SURROGATE.search(name):
        return "the writer must send valid Unicode"
    return f"give it a storable name in the table's `rename:` map in cdc.yaml, e.g. rename: {{{name!r}: new_name}}"


def same_but_case(name: str, names: Iterable[str]) -> str | None:
    """Another of `names` that equals `name` but for case (Spark and delta-rs take them as one)."""
    folded = name.lower()
    for other in names:
        if other != name and other.lower() == folded:
            return other
    return None


def spark(name: str) -> str:
    """A column name in Spark SQL and in `F.col`: backticks, a backtick doubled (dots stay in
    the name instead of reaching into a struct)."""
    return "`" + name.replace("`", "``") + "`"


def datafusion(name: str) -> str:
    """A column name in a delta-rs predicate or expression (DataFusion SQL): double quotes,
    a double quote doubled."""
    return '"' + name.replace('"', '""') + '"'


def bigquery(name: str) -> str:
    """A column name in GoogleSQL: backticks, a backslash and a backtick escaped."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


# BigQuery's flexible column names take any letter, mark, number, connector or dash, spaces and
# `&%=+:'<>#|`, but none of these, and no name over 300 characters or starting with a prefix it
# reserves. A target column whose name holds one is published with each of them as `_`.
BIGQUERY_EXCLUDED = "!\"$()*,./;?@[\\]^`{}~"
BIGQUERY_RESERVED = ("_table_", "_file_", "_partition", "_row_timestamp", "__root__", "_colidentifier")
BIGQUERY_MAX = 300


def bigquery_name(name: str) -> str:
    """The column name a target column has in BigQuery (the README's "On Google Cloud")."""
    out = "".join("_" if c in BIGQUERY_EXCLUDED or not c.isprintable() else c for c in name)
    if out.lower().startswith(BIGQUERY_RESERVED):
        out = "c" + out
    return out


def bigquery_names(columns: Iterable[str], table: str) -> dict[str, str]:
    """Each target column's BigQuery name; a ValueError names two columns that would share one
    (BigQuery compares names without case) or a name too long, with the way out."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for c in columns:
        bq = bigquery_name(c)
        if len(bq) > BIGQUERY_MAX:
            raise ValueError(f"table {table}: column {c[:60]!r}... is longer than BigQuery's {BIGQUERY_MAX} "
                             f"characters; {way_out(c)}")
        if bq.lower() in seen:
            raise ValueError(f"table {table}: columns {seen[bq.lower()]!r} and {c!r} would both be BigQuery column "
                             f"{bq!r}; {way_out(c)}")
        seen[bq.lower()] = c
        out[c] = bq
    return out
