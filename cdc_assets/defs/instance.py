"""The one Dagster instance of a configuration.

`cdc-assets run` (and `demo`), `cdc-assets ui` (its webserver and daemon, so the sensors and the
schedules) and the runs they launch all record into the same instance, so the UI shows every run,
materialization and check result whichever of them made it: the instance of $DAGSTER_HOME when the
user set it, else the folder `dagster_home` beside cdc.yaml, whatever the working directory. A new
home gets the product's settings (pool_watch.ensure_settings); an existing dagster.yaml stays.

The home is a SQLite instance shared by processes: several `cdc-assets run`s at once, and a run
beside the UI's daemon, each write their own runs into it (SQLite's write-ahead log lets readers go on
while one process writes), and a table's writer steps take turns through its pool.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..core.errors import TerminalError
from .pool_watch import ensure_settings

if TYPE_CHECKING:  # the `ui` command imports this module and needs no Dagster in its own process
    import dagster as dg

HOME_FOLDER = "dagster_home"  # beside cdc.yaml


def dagster_home(config_path: str) -> str:
    """The instance's folder: $DAGSTER_HOME when set, else `dagster_home` beside the configuration
    file `config_path`; an absolute path either way."""
    chosen = os.environ.get("DAGSTER_HOME")
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), HOME_FOLDER)


def prepared_home(config_path: str) -> str:
    """The instance's folder (`dagster_home`), made with the product's settings if new. Processes
    preparing one home at once take turns, so that only the first writes its settings."""
    from filelock import FileLock

    home = dagster_home(config_path)
    try:
        os.makedirs(home, exist_ok=True)
        with FileLock(os.path.join(home, ".cdc_assets.lock")):
            ensure_settings(home)
    except OSError as e:  # a read-only folder beside cdc.yaml, or a file of that name: the remedy, not a stack
        raise _unusable(home, e) from e
    return home


def open_instance(config_path: str) -> dg.DagsterInstance:
    """The configuration's instance (see the module's docstring). Opening it makes the databases of
    a new home: processes opening one home at once take turns, so that only the first makes them."""
    import dagster as dg
    from filelock import FileLock

    home = prepared_home(config_path)
    try:
        with FileLock(os.path.join(home, ".cdc_assets.lock")):
            return dg.DagsterInstance.from_config(home)
    except OSError as e:
        raise _unusable(home, e) from e


def _unusable(home: str, e: OSError) -> TerminalError:
    return TerminalError(f"the Dagster instance {home} cannot be opened or made ({e.strerror or e}): "
                         "set DAGSTER_HOME to a folder this process may write")
