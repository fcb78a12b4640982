"""`cdc-assets generate`: a demo change feed and the source export to reconcile with.

Writes `<out>/landing/<TABLE>/batch-NNNN/part-NNNN.jsonl` (Datastream JSON events)
and `<out>/exports/<TABLE>.csv` (the source's final state). Every file is written
under a name starting with '.' and renamed when complete, as readers expect.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import sys
from pathlib import Path

from ..core import generator


def write_feed(out_dir, table: str = "ORDERS", source: str = "mysql", *, changes: int = 1000,
               inserts: float = 40, updates: float = 40, deletes: float = 20, seed: int = 0,
               batches: int = 3, files_per_batch: int = 3, duplicates: float = 3, delays: float = 5,
               key: str = "id", columns: dict | None = None, start: dt.datetime = generator.DEFAULT_START,
               changes_per_second: int = 50, first_binlog: int = 1) -> dict:
    """Generate and write one table's feed and export; returns a summary.

    Refuses (FileExistsError) a landing folder that already holds batches, since
    a second feed there would not match the export.
    """
    out = Path(out_dir)
    history = generator.generate_history(
        table=table, changes=changes, inserts=inserts, updates=updates, deletes=deletes, seed=seed,
        key=key, columns=columns, start=start, changes_per_second=changes_per_second)
    events = generator.datastream_events(history, source, seed=seed, first_binlog=first_binlog)
    delivered = generator.deliver(events, batches, files_per_batch, duplicates, delays, seed)

    landing = out / "landing" / table
    if landing.is_dir() and any(p.name.startswith("batch-") for p in landing.iterdir()):
        raise FileExistsError(f"{landing} already holds batches; generate into an empty --out directory")
    files = []
    for b, batch in enumerate(delivered, start=1):
        for f, part in enumerate(batch, start=1):
            path = landing / f"batch-{b:04d}" / f"part-{f:04d}.jsonl"
            _publish(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in part))
            files.append(str(path))
    export = out / "exports" / f"{table}.csv"
    _publish(export, export_csv(history))

    return {
        "table": table,
        "source": source,
        "key": key,
        "changes": len(history.operations),
        **history.counts(),
        "live_rows": len(history.final),
        "events": len(events),
        "delivered": sum(len(part) for batch in delivered for part in batch),
        "batches": len(delivered),
        "files": files,
        "landing": str(landing),
        "export": str(export),
    }


def export_csv(history: generator.History) -> str:
    """The final source state as CSV: a header, one row per live key, '' for NULL."""
    names = [history.key, *history.columns]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    for k in sorted(history.final):
        w.writerow([_csv_field(history.final[k][c]) for c in names])
    return buf.getvalue()


def _csv_field(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _publish(path: Path, text: str) -> None:
    """Write under a hidden name, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def summary_line(s: dict) -> str:
    return (f"{s['table']} ({s['source']}): {s['changes']} changes ({s['inserts']} inserts, "
            f"{s['updates']} updates, {s['deletes']} deletes) -> {s['live_rows']} live rows; "
            f"{s['delivered']} events delivered in {s['batches']} batches, {len(s['files'])} files "
            f"under {s['landing']}; export {s['export']}")


def _run(args) -> int:
    try:
        start = dt.datetime.fromisoformat(args.start)
        summary = write_feed(
            args.out, args.table, args.source, changes=args.changes, inserts=args.inserts,
            updates=args.updates, deletes=args.deletes, seed=args.seed, batches=args.batches,
            files_per_batch=args.files_per_batch, duplicates=args.duplicates, delays=args.delays,
            key=args.key, start=start, changes_per_second=args.changes_per_second,
            first_binlog=args.first_binlog)
    except (ValueError, FileExistsError) as e:
        print(f"cdc-assets generate: error: {e}", file=sys.stderr)
        return 2
    print(summary_line(summary))
    return 0


def register(sub) -> None:
    p = sub.add_parser("generate", help="write a demo Datastream feed and the source export",
                       description=__doc__)
    p.add_argument("--out", required=True, help="output directory (landing/ and exports/ go here)")
    p.add_argument("--table", default="ORDERS", help="table name, also the landing sub-folder (default ORDERS)")
    p.add_argument("--source", choices=generator.SOURCES, default="mysql", help="source database kind")
    p.add_argument("--changes", type=int, default=1000, help="number of source changes (default 1000)")
    p.add_argument("--inserts", type=float, default=40, metavar="PCT", help="percent inserts (default 40)")
    p.add_argument("--updates", type=float, default=40, metavar="PCT", help="percent updates (default 40)")
    p.add_argument("--deletes", type=float, default=20, metavar="PCT", help="percent deletes (default 20)")
    p.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same feed")
    p.add_argument("--batches", type=int, default=3, help="landing batches (default 3)")
    p.add_argument("--files-per-batch", type=int, default=3, help="files per batch (default 3)")
    p.add_argument("--duplicates", type=float, default=3, metavar="PCT",
                   help="percent of events delivered twice (default 3)")
    p.add_argument("--delays", type=float, default=5, metavar="PCT",
                   help="percent of events delayed to a later batch (default 5)")
    p.add_argument("--key", default="id", help="name of the integer key column (default id)")
    p.add_argument("--start", default=generator.DEFAULT_START.isoformat(),
                   help="source time of the first change, ISO (default %(default)s)")
    p.add_argument("--changes-per-second", type=int, default=50, help="source changes per second (default 50)")
    p.add_argument("--first-binlog", type=int, default=1,
                   help="MySQL: first binlog file number (999999 to rotate past mysql-bin.999999)")
    p.set_defaults(func=_run)
