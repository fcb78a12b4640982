"""Files landed as a writer lands them."""
from __future__ import annotations

import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_assets.core.config import Config


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


def parquet(table: pa.Table) -> bytes:
    """A Parquet file's bytes."""
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()
