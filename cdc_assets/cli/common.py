"""What the commands share: reading cdc.yaml with a one-line error."""
from __future__ import annotations

import sys

from ..core.config import Config, ConfigError, TableConfig, load_config

# sysexits' EX_TEMPFAIL: the same command may succeed when run again (a scheduler may retry it)
TRY_AGAIN = 75

# The attribute of a command's parsed arguments naming the list that takes the names left over
# past its options (add_tables, main.parse_arguments).
MORE_NAMES = "more_names"


def add_tables(parser, help: str) -> None:
    """The command's tables, named before, between or after its options (`capture enable --config
    cdc.yaml ORDERS`, `maintain ORDERS --json ITEMS`): argparse gives a list positional only the
    names before the first option, and the others come back to it (main.parse_arguments)."""
    parser.add_argument("tables", nargs="*", help=help)
    parser.set_defaults(**{MORE_NAMES: "tables"})


def config_or_none(path: str) -> Config | None:
    """The configuration, or None after printing why it is not valid (the command then exits 2)."""
    try:
        return load_config(path)
    except ConfigError as e:
        print(f"cdc-assets: {e}", file=sys.stderr)
        return None


def table_or_none(cfg: Config, name: str) -> TableConfig | None:
    """The table named `name`, or None after printing the tables there are (the command then exits 2)."""
    for table in cfg.tables:
        if table.name == name:
            return table
    print(f"cdc-assets: {cfg.path}: no table {name!r} (tables: {', '.join(t.name for t in cfg.tables)})",
          file=sys.stderr)
    return None


def tables_or_none(cfg: Config, names: list[str] | None) -> list[TableConfig] | None:
    """The tables named (every table when none is), or None after printing each name that is not
    one (the command then exits 2)."""
    if not names:
        return list(cfg.tables)
    found = [table_or_none(cfg, n) for n in names]
    tables = [t for t in found if t is not None]
    return tables if len(tables) == len(found) else None


def each_table(tables: list[TableConfig], act) -> int:
    """`act(table)` for each table, printing a failure's root cause: one failing table never stops the
    others. The command's exit status: 1 when a table failed, else 0."""
    from ..engine.errors import root_cause_of_exception

    failed = False
    for table in tables:
        try:
            act(table)
        except Exception as e:  # noqa: BLE001 - one failing table never stops the others
            failed = True
            print(f"{table.name}: FAILED; error: {root_cause_of_exception(e)}", file=sys.stderr)
    return 1 if failed else 0
