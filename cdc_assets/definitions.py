"""The code location `dagster dev` loads (workspace.yaml): the tables of $CDC_ASSETS_CONFIG."""
from __future__ import annotations

import os

from .core.config import load_config
from .defs.definitions import build_definitions

CONFIG_ENV = "CDC_ASSETS_CONFIG"


def config_path() -> str:
    return os.environ.get(CONFIG_ENV, "./cdc.yaml")


defs = build_definitions(load_config(config_path()))
