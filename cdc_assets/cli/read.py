"""`cdc-assets read TABLE`: the table as the next apply will leave it (the target with its staged,
not yet merged changes laid over it), printed as CSV or written to a Parquet or CSV file."""
from __future__ import annotations

import sys

from .common import config_or_none, table_or_none

QUARANTINE_SUFFIX = "_quarantine"


def register(sub) -> None:
    p = sub.add_parser("read", help="a table's current state, staged changes included",
                       description="The table as the next apply will leave it: the target with the changes "
                                   "staged but not merged yet (apply: min_changes / max_staleness) laid over it, "
                                   "with the winners the apply picks. Printed as CSV, or written to --out (.parquet "
                                   "or .csv). Exit 1: no target yet; 2: cdc.yaml is not valid or names no such "
                                   "table.")
    p.add_argument("table", help="the table's name in cdc.yaml")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--out", help="write to this file instead: .parquet or .csv")
    p.add_argument("--with-metadata", action="store_true",
                   help="also the _cdc_* columns (key, operation, ordering key, event id)")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine.fresh import FreshReadError, fresh_read

    cfg = config_or_none(args.config)
    table = table_or_none(cfg, args.table) if cfg else None
    if cfg is not None and table is None and args.table.endswith(QUARANTINE_SUFFIX):
        quarantined = args.table.removesuffix(QUARANTINE_SUFFIX)
        if any(t.name == quarantined for t in cfg.tables):
            print(f"cdc-assets: the quarantine of {quarantined} is read with `cdc-assets quarantine {quarantined}` "
                  "(--show-values for the records' text)", file=sys.stderr)
    if cfg is None or table is None:
        return 2
    if args.out and not args.out.endswith((".parquet", ".csv")):
        print(f"cdc-assets: --out {args.out}: name a .parquet or .csv file", file=sys.stderr)
        return 2
    try:
        read = fresh_read(cfg, table, with_metadata=args.with_metadata)
    except FreshReadError as e:
        print(f"cdc-assets: {e}", file=sys.stderr)
        return 1
    rows = _write(read, args.out)
    if args.out:
        print(f"{table.name}: {rows} rows to {args.out} (target at batch {read.applied}, "
              f"{read.pending_changes} staged changes after it laid over it)", file=sys.stderr)
    return 0


def _write(read, out: str | None) -> int:
    """Stream the batches to the file (or stdout); the row count."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rows = 0
    if out and out.endswith(".parquet"):
        writer = pq.ParquetWriter(out, read.schema)
    else:
        writer = pcsv.CSVWriter(out or sys.stdout.buffer, read.schema)
    try:
        for batch in read.batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        writer.close()
    return rows
