"""A base snapshot's import beside delta-rs writing the same rows, per export format and size.

    python -m cdc_assets_tests.benchmarks.imports --sizes 1M,10M --formats parquet,csv --out docs/figures/imports

For each size it writes the bench's base export (bench.write_base: id order, 1M-row groups) as
Parquet, and as CSV with a header when asked; then, each in a fresh process whose tree's memory is
polled:
- cdc_assets: `cdc-assets run` of a table whose `base_snapshot` is the export (the import, the
  first build of the target and its checks, as a user's first run does); a CSV table declares its
  column types (`columns:`), as a user who wants typed columns from text does;
- delta-rs: the same rows read by pyarrow (Parquet row group by row group; CSV in blocks, with
  the same column types) and written by `write_deltalake`, one append per 1M rows.
Both tables are then compared by value (bench.compare). Results go to imports.csv and imports.md.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cdc_assets_tests.figures import Figures, add_force_flag, measured_at

from . import bench

FORMATS = ("parquet", "csv")
COLUMN_TYPES = {"id": "long", "customer": "string", "amount": "decimal(12,2)", "status": "string",
                "region": "string", "seq": "long"}


@dataclass
class ImportResult:
    rows: int
    format: str
    export_mb: float
    product_s: float | None = None
    product_peak_mb: int | None = None
    product_status: str = ""
    peer_s: float | None = None
    peer_peak_mb: int | None = None
    peer_status: str = ""
    equal: str = ""
    error: str = ""

    @property
    def ratio(self) -> float | None:
        return round(self.product_s / self.peer_s, 1) if self.product_s and self.peer_s else None


def write_export(folder: str, rows: int, fmt: str, seed: int) -> str:
    parquet = bench.write_base(os.path.join(folder, f"base-{rows}-s{seed}.parquet"), rows, seed)
    if fmt == "parquet":
        return parquet
    out = os.path.join(folder, f"base-{rows}-s{seed}.csv")
    if not os.path.exists(out):
        pf = pq.ParquetFile(parquet)
        with pacsv.CSVWriter(out + ".part", pf.schema_arrow) as w:
            for g in range(pf.num_row_groups):
                w.write_table(pf.read_row_group(g))
        os.replace(out + ".part", out)
    return out


def _csv_options() -> tuple[pacsv.ReadOptions, pacsv.ConvertOptions]:
    types = {n: t for n, t in zip(bench.SCHEMA.names, bench.SCHEMA.types)}
    return pacsv.ReadOptions(block_size=64 << 20), pacsv.ConvertOptions(column_types=types)


def peer_write(table_path: str, export: str) -> None:
    """delta-rs writing the export's rows: one append per 1M rows."""
    from deltalake import write_deltalake

    if export.endswith(".parquet"):
        bench.deltars_import(table_path, export, [])
        return
    read, convert = _csv_options()
    pending: list[pa.RecordBatch] = []
    with pacsv.open_csv(export, read_options=read, convert_options=convert) as reader:
        for b in reader:
            pending.append(b)
            if sum(p.num_rows for p in pending) >= bench.FILE_ROWS:
                write_deltalake(table_path, pa.Table.from_batches(pending).cast(bench.SCHEMA), mode="append")
                pending = []
    if pending:
        write_deltalake(table_path, pa.Table.from_batches(pending).cast(bench.SCHEMA), mode="append")


def _worker(argv: list[str]) -> int:
    job = json.loads(argv[0])
    t0 = time.perf_counter()
    peer_write(job["table"], job["export"])
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 3)}))
    return 0


def product_config(ws: str, export: str, fmt: str, spark: dict[str, str]) -> str:
    table = {"name": bench.TABLE, "keys": ["id"], "format": "changeset", "options": bench.CHANGESET,
             "base_snapshot": export}
    if fmt == "csv":
        table["columns"] = COLUMN_TYPES
    os.makedirs(os.path.join(ws, "landing"), exist_ok=True)
    config = {"warehouse": "./warehouse", "landing": "./landing", "tables": [table]}
    if spark:
        config["spark"] = spark
    path = os.path.join(ws, "cdc.yaml")
    with open(path, "w") as fh:
        json.dump(config, fh, indent=2)
    return path


def measure(work: str, rows: int, fmt: str, seed: int, timeout: float, spark: dict[str, str],
            echo=print) -> ImportResult:
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    export = write_export(data, rows, fmt, seed)
    result = ImportResult(rows=rows, format=fmt, export_mb=round(os.path.getsize(export) / 2**20, 1))
    label = f"{bench.size_label(rows)} {fmt}"

    echo(f"  {label}: cdc_assets imports the export ...", flush=True)
    ws = os.path.join(work, "product", f"{rows}-{fmt}")
    shutil.rmtree(ws, ignore_errors=True)
    cfg = product_config(ws, export, fmt, spark)
    cli = [os.path.join(os.path.dirname(sys.executable), "cdc-assets")]
    step = bench.run_measured([*cli, "run", "--config", cfg], bench.child_env(), timeout, os.path.join(ws, "run.log"))
    result.product_s, result.product_peak_mb, result.product_status = step.seconds, bench._mb(step), step.status
    if not step.ok:
        result.error = f"cdc_assets: {step.error}"

    echo(f"  {label}: delta-rs writes the same rows ...", flush=True)
    peer = os.path.join(work, "delta", f"{rows}-{fmt}")
    shutil.rmtree(peer, ignore_errors=True)
    job = {"table": peer, "export": export}
    pstep = bench.run_measured([sys.executable, "-m", "cdc_assets_tests.benchmarks.imports", "_worker", json.dumps(job)],
                               bench.child_env(), timeout, os.path.join(work, "delta", f"{rows}-{fmt}.log"))
    result.peer_s, result.peer_peak_mb, result.peer_status = pstep.seconds, bench._mb(pstep), pstep.status
    if not pstep.ok:
        result.error += f" delta-rs: {pstep.error}"

    if step.ok and pstep.ok:
        found = bench.compare_paths(os.path.join(ws, "warehouse", bench.TABLE, "target"), peer)
        result.equal = "values equal" if found["values_equal"] and found["types_equal"] else \
            ("values equal, types differ: " + found["types_note"]) if found["values_equal"] else \
            f"DIFFERENT: {found['differences']}"
    return result


def table_md(results: list[ImportResult], command: str, note: str, where: str) -> str:
    """The results as a Markdown table; `where`: `figures.measured_at()`'s phrase."""
    when = dt.date.today().isoformat()
    lines = [f"Measured by `{command}` {where} on {when} ({os.cpu_count()} cores"
             + (f"; {note}" if note else "") + "; one run each, so compare ratios within a run).", "",
             "| rows | export | export MB | cdc_assets import s | delta-rs write s | ratio | peak GB (cdc_assets/delta-rs) "
             "| equal | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        peak = "/".join("-" if m is None else f"{m / 1024:.1f}" for m in (r.product_peak_mb, r.peer_peak_mb))
        status = "ok" if not r.error else r.error.strip()
        lines.append(f"| {bench.size_label(r.rows)} | {r.format} | {r.export_mb} | {bench._s(r.product_s)} | "
                     f"{bench._s(r.peer_s)} | {'-' if r.ratio is None else f'{r.ratio}x'} | {peak} | {r.equal} | {status} |")
    lines += ["", "cdc_assets: a fresh `cdc-assets run` importing the export as the table's base snapshot, then "
              "building the target and checking it. delta-rs: a fresh Python process reading the same export with "
              "pyarrow and writing it with `write_deltalake`. Peak: the process tree's resident memory."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_worker":
        return _worker(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.imports", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=lambda t: [bench.parse_size(x) for x in t.split(",")], default=[1_000_000])
    ap.add_argument("--formats", type=lambda t: t.split(","), default=list(FORMATS))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--step-timeout", type=float, default=1800)
    ap.add_argument("--run-driver-memory", help="cdc.yaml spark.driver.memory of the runs' own Spark")
    ap.add_argument("--out", default="docs/figures/imports")
    add_force_flag(ap)
    ap.add_argument("--note", default="", help="what else ran on the machine")
    ap.add_argument("--work", help="generated data and warehouses (default: a new /tmp folder, removed after)")
    args = ap.parse_args(argv)
    unknown = [f for f in args.formats if f not in FORMATS]
    if unknown:
        ap.error(f"--formats: {', '.join(unknown)} (known: {', '.join(FORMATS)})")
    figures = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    work = args.work or tempfile.mkdtemp(prefix="imports-")
    spark = {"spark.driver.memory": args.run_driver_memory} if args.run_driver_memory else {}
    results = []
    try:
        for rows in args.sizes:
            for fmt in args.formats:
                results.append(measure(work, rows, fmt, args.seed, args.step_timeout, spark))
                r = results[-1]
                print(f"{bench.size_label(rows)} {fmt}: cdc_assets {r.product_s} s, delta-rs {r.peer_s} s, "
                      f"{r.ratio}x; {r.equal or r.error}", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    command = "python -m cdc_assets_tests.benchmarks.imports " + shlex.join(argv)
    with open(figures.path("imports.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*asdict(results[0]), "ratio"] if results else ["rows"])
        w.writeheader()
        for r in results:
            w.writerow({**asdict(r), "ratio": r.ratio})
    with open(figures.path("imports.md"), "w") as fh:
        fh.write(table_md(results, command, args.note, measured_at()))
    print(f"wrote {args.out}/imports.csv and imports.md")
    return 0 if all(not r.error and r.equal.startswith("values equal") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
