"""Test helpers: write a cdc.yaml, land files the way writers should, run a table in-process."""
from __future__ import annotations

import dataclasses
import json
import os

import dagster as dg
from deltalake import DeltaTable

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


def land(cfg: Config, table: str, batch: str, files: dict[str, bytes | str]) -> None:
    """Publish files as a writer should: write under a '.'-name, then rename."""
    folder = os.path.join(cfg.landing_dir(table), batch)
    os.makedirs(folder, exist_ok=True)
    for name, content in files.items():
        data = content.encode("utf-8") if isinstance(content, str) else content
        tmp = os.path.join(folder, "." + name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(folder, name))


def jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def run_table(cfg: Config, table: str, instance: dg.DagsterInstance | None = None):
    """One `cdc-assets run` of one table, in this process (shares the test's Spark session)."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.defs.run_loop import run_table as _run

    inst = instance or dg.DagsterInstance.ephemeral()
    return _run(build_definitions(cfg), inst, cfg, cfg.table(table))


def target_rows(cfg: Config, table: str, source_only: bool = True) -> list[dict]:
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"))
    rows = dt.to_pyarrow_table().to_pylist()
    if source_only:
        rows = [{k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows]
    return rows


def target_version(cfg: Config, table: str) -> int:
    return DeltaTable(os.path.join(cfg.table_dir(table), "target")).version()


def by_key(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r for r in rows}


def listeners(port: int) -> set[str]:
    """Local addresses listening on `port`, from /proc/net/tcp{,6} (no extra tools needed)."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        with open(name) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                    found.add(addr)
    return found
