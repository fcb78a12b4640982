"""Imported by the run launcher's fork server (defs/launcher.py) before it forks any run: builds
the definitions of the configuration the code location loads ($CDC_ASSETS_CONFIG), their
repository and asset graph, and opens and closes the instance once, so that each forked run finds
them made. A run still loads the code location itself and builds anew when the configuration
changed since (defs/definitions.build_definitions). Without that variable, or with a configuration
that does not load, nothing is made here and each run reports what it finds itself."""
from __future__ import annotations

import os


def _warm() -> None:
    from ..core.config import load_config
    from ..engine.settings import settings
    from .definitions import build_definitions

    path = settings().config
    if not path or not os.path.exists(path):
        return
    try:
        repository = build_definitions(load_config(path)).get_repository_def()
        repository.asset_graph  # noqa: B018 - built once here, not in every run
        for name in repository.job_names:
            repository.get_job(name)
    except Exception:  # noqa: BLE001 - the run loads the code location and reports the error itself
        return
    if os.environ.get("DAGSTER_HOME"):
        import dagster as dg

        try:
            with dg.DagsterInstance.get() as instance:
                instance.get_run_records(limit=1)  # the storages' first use: their SQL compiled once
        except Exception:  # noqa: BLE001 - as above: each run opens the instance and says what fails
            return


_warm()
