"""Shared pieces of the Dagster integration tests: generated feeds landed batch by batch,
in-process job runs, and readings of the real Delta tables they leave."""
from __future__ import annotations

import csv
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets.cli.generate import write_feed
from cdc_assets.core.values import canonical_text, infer_text
from cdc_assets.engine.landing import register_new_batch
from cdc_assets.engine.lock import table_lock

TABLE = "ORDERS"
KEY = "id"
COLUMNS = ("id", "customer", "amount", "status", "region")


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


def register_batch(cfg, table: str, instance: dg.DagsterInstance) -> str:
    """What the sensor and the run command do first: ledger entry + Dagster partition."""
    with table_lock(cfg.table_dir(table)):
        batch = register_new_batch(cfg.landing_dir(table), cfg.table_dir(table))
    assert batch is not None, "nothing new to register"
    instance.add_dynamic_partitions(f"{table}__batches", [batch.id])
    return batch.id


def execute(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, *, partition_key: str | None = None,
            tags: dict | None = None) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=partition_key, tags=tags or {}, raise_on_error=True)
    assert result.success
    return result


def materialized(result) -> dict[str, dict]:
    """asset name -> metadata (plain values) of its materialization in this run."""
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.path[-1]] = {k: v.value for k, v in mat.metadata.items()}
    return out


def check_results(result) -> dict[str, bool]:
    return {f"{e.asset_key.path[-1]}.{e.check_name}": e.passed for e in result.get_asset_check_evaluations()}


def read_export(path: str) -> dict:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [{k: infer_text(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    return {r[KEY]: r for r in rows}


def target_table(cfg, table: str = TABLE) -> list[dict]:
    return DeltaTable(os.path.join(cfg.table_dir(table), "target")).to_pyarrow_table().to_pylist()


def meaning(row: dict, columns=COLUMNS) -> dict:
    return {c: canonical_text(row.get(c)) for c in columns}


def differences(target_rows: list[dict], export: dict) -> list:
    """Target vs export by key, values by meaning (5 == 5.0, '' == NULL); [] when equal."""
    got = {r[KEY]: meaning(r) for r in target_rows}
    want = {k: meaning(r) for k, r in export.items()}
    diffs = [("missing", k) for k in sorted(set(want) - set(got))]
    diffs += [("extra", k) for k in sorted(set(got) - set(want))]
    diffs += [("differs", k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    return diffs


def files_by_partition(cfg, table: str = TABLE, version: int | None = None) -> dict[str, set]:
    """partition value -> data file paths of the (current) target snapshot."""
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"), version=version)
    out = defaultdict(set)
    for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        path = unquote(unquote(a["path"]))
        region = a.get("partition.region")
        out[region].add(path)
    return dict(out)


def delta_versions(cfg, table: str = TABLE) -> dict[str, int]:
    out = {}
    for name in ("batches", "changes", "staging", "base", "target", "quarantine"):
        p = os.path.join(cfg.table_dir(table), name)
        if os.path.isdir(os.path.join(p, "_delta_log")):
            out[name] = DeltaTable(p).version()
    return out


def expected_state(cfg, table: str, files) -> dict:
    """The rows the SPEC rules give for these landed files: per key the greatest
    ordering key wins, a delete removes the row."""
    from cdc_assets.core.changes import Change
    from cdc_assets.core.formats import parse_file

    latest = {}
    for f in files:
        with open(os.path.join(cfg.landing_dir(table), f), "rb") as fh:
            data = fh.read()
        for c in parse_file("datastream-json", {}, [KEY], os.path.basename(f), data):
            assert isinstance(c, Change), (f, c)
            if c.key not in latest or c.order > latest[c.key].order:
                latest[c.key] = c
    return {k[0]: c.row for k, c in latest.items() if c.op != "D"}
