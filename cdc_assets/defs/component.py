"""cdc_assets as a Dagster component: a user's own Dagster project adds the tables of a `cdc.yaml`
with a `defs.yaml` (`dg scaffold defs cdc_assets.defs.component.CdcTables cdc`), or merges
`cdc_definitions` into its `Definitions`."""
from __future__ import annotations

import os

import dagster as dg
from dagster.components import Scaffolder, ScaffoldRequest, scaffold_with

from ..core.config import load_config
from ..core.starter import STARTER_CONFIG
from .definitions import build_definitions


def cdc_definitions(config_path: str = "cdc.yaml") -> dg.Definitions:
    """Every table of the `cdc.yaml` at `config_path`: assets, checks, jobs, sensors, schedules and
    their resources, ready for `dg.Definitions.merge` with a project's own."""
    return build_definitions(load_config(config_path))


class CdcTablesScaffolder(Scaffolder):
    """Writes the component's `defs.yaml` and, when there is none yet, a commented `cdc.yaml` beside it."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        folder = request.target_path
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "defs.yaml").write_text(f"type: {request.type_name}\nattributes:\n  config: cdc.yaml\n",
                                          encoding="utf-8")
        config = folder / "cdc.yaml"
        if not config.exists():
            config.write_text(STARTER_CONFIG, encoding="utf-8")


@scaffold_with(CdcTablesScaffolder)
class CdcTables(dg.Component, dg.Model, dg.Resolvable):
    """The CDC tables of one `cdc.yaml`: per table, its changes, staging, base and target assets with
    their checks, jobs, landing sensor and maintenance schedule."""

    config: str = "cdc.yaml"  # the configuration's path, relative to this component's folder

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = self.config if os.path.isabs(self.config) else os.path.join(str(context.path), self.config)
        return cdc_definitions(path)
