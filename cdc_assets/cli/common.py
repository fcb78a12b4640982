"""What the commands share: reading cdc.yaml with a one-line error."""
from __future__ import annotations

import sys

from ..core.config import Config, ConfigError, load_config


def config_or_none(path: str) -> Config | None:
    """The configuration, or None after printing why it is not valid (the command then exits 2)."""
    try:
        return load_config(path)
    except ConfigError as e:
        print(f"cdc-assets: {e}", file=sys.stderr)
        return None
