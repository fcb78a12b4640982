"""Generated feeds (cdc-assets generate), published into the landing area batch by batch."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from cdc_assets.cli.generate import write_feed

from .expected import TABLE


def generate(root: Path, table: str = TABLE, **kw) -> dict:
    """A small deterministic feed under <root>/feed (NOT the landing area: batches are
    published one at a time with `publish`)."""
    opts = dict(source="mysql", changes=300, batches=3, files_per_batch=2, duplicates=3, delays=5, seed=7)
    opts.update(kw)
    source = opts.pop("source")
    return write_feed(root / "feed", table, source, **opts)


def publish(feed: dict, cfg, table: str, batch_no: int) -> list[str]:
    """Publish one generated batch folder into the landing area as a writer should:
    copy under a '_' name, then rename. Returns the published files (relative)."""
    src = Path(feed["landing"]) / f"batch-{batch_no:04d}"
    dst_dir = Path(cfg.landing_dir(table))
    dst_dir.mkdir(parents=True, exist_ok=True)
    tmp = dst_dir / f"_incoming-{batch_no:04d}"
    shutil.copytree(src, tmp)
    os.replace(tmp, dst_dir / src.name)
    return sorted(f"{src.name}/{p.name}" for p in src.iterdir())


def lines_in(cfg, table: str, files) -> int:
    n = 0
    for f in files:
        with open(os.path.join(cfg.landing_dir(table), f), "rb") as fh:
            n += sum(1 for line in fh if line.strip())
    return n


def uuids_in(cfg, table: str, files) -> list[str]:
    out = []
    for f in files:
        with open(os.path.join(cfg.landing_dir(table), f), encoding="utf-8") as fh:
            out += [json.loads(line)["uuid"] for line in fh if line.strip()]
    return out
