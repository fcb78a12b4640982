"""The code location `dagster dev` loads (workspace.yaml): the tables of $CDC_ASSETS_CONFIG."""
from __future__ import annotations

from .core.config import load_config
from .defs.definitions import CONFIG_ENV, build_definitions, config_path

__all__ = ["CONFIG_ENV", "config_path", "defs"]

defs = build_definitions(load_config(config_path()))
