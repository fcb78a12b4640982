"""A cdc.yaml written for a test, and the engine's settings for one module."""
from __future__ import annotations

import dataclasses
import json

from cdc_assets.core.config import Config, load_config


def write_config(root, tables: list[dict], **top) -> Config:
    """tables: cdc.yaml table entries; paths default to <root>/landing and <root>/warehouse."""
    cfg = {"warehouse": str(root / "warehouse"), "landing": str(root / "landing"), "tables": tables, **top}
    path = root / "cdc.yaml"
    # as UTF-8 text: JSON's \ud83d\ude00 escapes of an astral character are two lone surrogates to YAML
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
    return load_config(str(path))


def settings_of(monkeypatch, module, **values) -> None:
    """`module`'s reads of the engine's settings (engine/settings.py) give `values`: a limit for one
    module's step, where the environment variable would set it for every module."""
    from cdc_assets.engine.settings import settings

    monkeypatch.setattr(module, "settings", lambda: dataclasses.replace(settings(), **values))
