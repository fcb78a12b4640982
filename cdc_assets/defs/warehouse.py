"""The warehouse's tables for a user's own Dagster assets, as dagster-deltalake resources.

    from cdc_assets.defs.warehouse import target_resource
    resources={"orders": target_resource("cdc.yaml", "ORDERS")}   # a DeltaTableResource

An asset then reads the current state of ORDERS with `orders.load()` (a deltalake DeltaTable);
the resource carries the warehouse's storage options, so the asset does not depend on where the
warehouse is.
"""
from __future__ import annotations

import os

from ..core.config import Config, ConfigError, load_config
from ..engine import storage
from ..engine.table_layout import TARGET, path


def storage_config(location: str):
    """dagster-deltalake's storage configuration for a warehouse location. It names the store and,
    for an S3-compatible server, its endpoint and region, never a credential: resource
    configuration shows in the UI, and delta-rs takes credentials from the environment (the
    same variables the engine uses, engine/storage.py)."""
    from dagster_deltalake import GcsConfig, LocalConfig, S3Config

    kind = storage.scheme(location)
    if kind == "gs":
        return GcsConfig()
    if kind == "s3":
        s = storage.settings()
        region = s.get("AWS_REGION") or s.get("AWS_DEFAULT_REGION")
        return S3Config(endpoint=s.get("AWS_ENDPOINT_URL"), region=region)
    return LocalConfig()


def target_resource(config: str | Config, table: str, version: int | None = None):
    """A DeltaTableResource on `table`'s target (at `version`, else the latest)."""
    from dagster_deltalake import DeltaTableResource

    cfg = load_config(config) if isinstance(config, str) else config
    if table not in {t.name for t in cfg.tables}:
        raise ConfigError(f"{os.path.basename(cfg.path)}: no table '{table}' "
                          f"(tables: {', '.join(t.name for t in cfg.tables)})")
    return DeltaTableResource(url=path(cfg.table_dir(table), TARGET), storage_options=storage_config(cfg.warehouse),
                              version=version)

