"""`cdc-assets demo`: generate feeds for three tables, apply them batch by batch, reconcile.

The feeds land one batch at a time (as a sensor would see them) and each landing
is followed by a run, all in this process, so Spark starts once.
"""
from __future__ import annotations

import os
import shutil
import sys
import time

from . import emulators

DEMO_TABLES: tuple[tuple[str, str, int, tuple[int, int, int], list[str]], ...] = (
    # name, source, changes, mix (insert/update/delete %), partition_by
    ("ORDERS", "oracle", 3000, (40, 40, 20), ["region"]),
    ("CUSTOMERS", "mysql", 2000, (50, 35, 15), []),
    ("PAYMENTS", "postgres", 1500, (45, 40, 15), []),
)
BATCHES = 3


GCS_BUCKET = "cdc-demo-landing"
BIGQUERY_DATASET = "demo"


def register(sub) -> None:
    p = sub.add_parser("demo", help="generate a demo feed for three tables, run it and reconcile",
                       description="Generate a feed for three tables, land it batch by batch, apply each landing "
                                   "and reconcile the targets with the generated source exports.")
    p.add_argument("--dir", default=None, help="demo folder (recreated; default ./demo, ./demo-gcp with --gcp)")
    p.add_argument("--seed", type=int, default=7, help="seed of the generated feed (default 7)")
    p.add_argument("--gcp", action="store_true",
                   help="the same on Google Cloud's local emulators: files land in a Cloud Storage bucket, each "
                        "target is published to BigQuery, and files, targets and BigQuery tables are reconciled")
    p.set_defaults(func=main)


def config_text(tables: list[dict], landing: str) -> str:
    """The demo's cdc.yaml, written as a user would write it (README, "Configure a table")."""
    lines = ["# cdc.yaml of `cdc-assets demo`: three tables fed by Datastream JSON events.",
             "warehouse: ./warehouse            # the Delta tables, one folder per table",
             f"landing: {landing + '  ':<26}# change files arrive under <landing>/<TABLE>/**",
             "tables:"]
    for t in tables:
        lines += [f"  - name: {t['name']}",
                  f"    keys: [{', '.join(t['keys'])}]",
                  f"    format: {t['format']}"]
        if t.get("partition_by"):
            lines.append(f"    partition_by: [{', '.join(t['partition_by'])}]   # one target partition per region")
        lines.append(f"    reconcile_with: {t['reconcile_with']}   # the source's export: the target must match it")
        if t.get("publish"):
            lines.append(f"    publish: {{bigquery: {t['publish']['bigquery']}}}   # kept equal to the target")
    return "\n".join(lines) + "\n"


def prepare(root: str, seed: int, gcp: bool = False) -> str:
    from .generate import write_feed

    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "landing"))
    tables = []
    for i, (name, source, n, (ins, upd, dele), partition_by) in enumerate(DEMO_TABLES):
        write_feed(os.path.join(root, "feed"), name, source, changes=n, inserts=ins, updates=upd, deletes=dele,
                   seed=seed + i, batches=BATCHES, files_per_batch=3, duplicates=3, delays=5)
        tables.append({"name": name, "keys": ["id"], "format": "datastream-json",
                       **({"partition_by": partition_by} if partition_by else {}),
                       "reconcile_with": f"./feed/exports/{name}.csv",
                       **({"publish": {"bigquery": f"{emulators.PROJECT}.{BIGQUERY_DATASET}.{name}"}} if gcp else {})})
    path = os.path.join(root, "cdc.yaml")
    with open(path, "w") as fh:
        fh.write(config_text(tables, f"gs://{GCS_BUCKET}/landing" if gcp else "./landing"))
    return path


def batch_files(root: str, b: int) -> dict[str, list[str]]:
    """Table -> the feed's files of batch b."""
    out = {}
    for name, *_ in DEMO_TABLES:
        src = os.path.join(root, "feed", "landing", name, f"batch-{b:04d}")
        out[name] = sorted(os.path.join(src, f) for f in os.listdir(src)) if os.path.isdir(src) else []
    return out


def land_batch(root: str, b: int) -> None:
    """Move batch b of every table from the feed into the landing area (renames are atomic)."""
    for name, *_ in DEMO_TABLES:
        src = os.path.join(root, "feed", "landing", name, f"batch-{b:04d}")
        if os.path.isdir(src):
            dst = os.path.join(root, "landing", name)
            os.makedirs(dst, exist_ok=True)
            os.replace(src, os.path.join(dst, f"batch-{b:04d}"))


def upload_batch(root: str, b: int) -> int:
    """Upload batch b of every table to the landing bucket (an object is complete once written)."""
    from ..engine import gcs

    bucket, n = gcs.client().bucket(GCS_BUCKET), 0
    for name, files in batch_files(root, b).items():
        for f in files:
            bucket.blob(f"landing/{name}/batch-{b:04d}/{os.path.basename(f)}").upload_from_filename(f)
            n += 1
    return n


def main(args) -> int:
    root = os.path.abspath(args.dir or ("demo-gcp" if args.gcp else "demo"))
    if not args.gcp:
        return _demo(root, args.seed)
    try:
        with emulators.storage(GCS_BUCKET) as gcs_address, emulators.bigquery() as bigquery_address:
            print(f"demo: Cloud Storage emulator at {gcs_address}, BigQuery emulator at {bigquery_address}")
            client = emulators.bigquery_client(bigquery_address)
            client.create_dataset(BIGQUERY_DATASET)
            return _demo(root, args.seed, bigquery_client=client)
    except emulators.EmulatorMissing as e:
        print(f"cdc-assets demo --gcp: {e}")
        return 2


def _demo(root: str, seed: int, bigquery_client=None) -> int:
    from ..core.config import load_config
    from ..defs.definitions import build_definitions
    from ..defs.run_loop import run_config
    from ..engine.checks import reconciliation
    from ..engine.landing import registered

    t0 = time.time()
    gcp = bigquery_client is not None
    cfg = load_config(prepare(root, seed, gcp))
    where = f"gs://{GCS_BUCKET}/landing" if gcp else root
    print(f"demo: {len(DEMO_TABLES)} tables, {sum(t[2] for t in DEMO_TABLES)} changes in {BATCHES} batches, "
          f"landing in {where}")
    ok, landed = True, {name: 0 for name, *_ in DEMO_TABLES}
    for b in range(1, BATCHES + 1):
        for name, files in batch_files(root, b).items():
            landed[name] += len(files)
        if gcp:
            upload_batch(root, b)
        else:
            land_batch(root, b)
        print(f"-- batch {b} landed")
        ok &= all(o.ok for o in run_config(cfg, build_definitions))
    print("-- reconciliation: landed files, targets against the generated source exports"
          + (", BigQuery tables against the targets" if gcp else ""))
    for table in cfg.tables:
        taken = sum(len(b.files) for b in registered(cfg.table_dir(table.name)))
        r = reconciliation(cfg, table)
        bad = r.missing_rows + r.extra_rows + r.differing_rows + abs(taken - landed[table.name])
        line = (f"{table.name}: {landed[table.name]} files landed, {taken} taken; source {r.source_rows} rows, "
                f"target {r.target_rows} rows, {r.missing_rows} missing, {r.extra_rows} extra, "
                f"{r.differing_rows} differing")
        if gcp:
            from ..engine import bigquery_publish

            bq = bigquery_publish.reconcile(bigquery_client, cfg, table)
            bad += bq.discrepancies
            line += f"; BigQuery {bq.rows_bigquery} rows ({bq.compared}), {bq.discrepancies} discrepancies"
        ok &= bad == 0
        print(line + f" -> {'OK' if bad == 0 else 'DISCREPANCIES'}")
    print(f"demo {'passed' if ok else 'FAILED'} in {time.time() - t0:.0f}s")
    if not gcp:
        program = os.path.relpath(os.path.join(os.path.dirname(sys.executable), "cdc-assets"))  # this install's
        print("Open the UI on the result:\n"
              f"  {program} ui --config {os.path.relpath(os.path.join(root, 'cdc.yaml'))}\n"
              "  then browse http://127.0.0.1:3000")
    return 0 if ok else 1
