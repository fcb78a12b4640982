"""The many-tables cycle of rules.md#changeset (many tables, a small batch each) one table after
another and side by side.

    .venv/bin/python -m cdc_assets_tests.benchmarks.parallel --tables 8 --rows 200k --parallel 2 --out docs/figures

K tables of bench.py's base (N rows each) are imported by one `cdc-assets run`. Then, per round,
every table gets one W2 batch (1,000 changes in the top 1% of ids) and one `cdc-assets run` takes
them all, alternately sequential and `--parallel P` (so that both meet the same machine load, and
tables of the same size), --rounds times each. Wall seconds per run, whole process (Python's
start-up, imports and Dagster's instance included). One machine, shared: read the ratio
sequential / parallel of the same run, not the seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cdc_assets_tests.figures import Figures, add_force_flag

from .bench import CHANGESET, changes, child_env, parse_size, publish, size_label, write_base


def _config(work: str, base: str, k: int) -> str:
    tables = [{"name": f"T{i:02d}", "keys": ["id"], "format": "changeset", "options": CHANGESET, "base_snapshot": base}
              for i in range(1, k + 1)]
    cfg = {"warehouse": os.path.join(work, "warehouse"), "landing": os.path.join(work, "landing"), "tables": tables}
    path = os.path.join(work, "cdc.yaml")
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path


def _run(cli: list[str], config: str, log: str, extra=()) -> float:
    t = time.time()
    with open(log, "w") as fh:
        p = subprocess.run(cli + ["run", "--config", config, *extra], stdout=fh, stderr=subprocess.STDOUT,
                           env=child_env(), timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"cdc-assets run failed ({p.returncode}): see {log}")
    return round(time.time() - t, 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.parallel", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=parse_size, default=200_000, help="rows per table (default 200k)")
    ap.add_argument("--parallel", type=int, default=2, help="processes of the parallel runs (default 2)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each kind (default 2)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--work", help="generated data and warehouse (default: a new /tmp/parallel-* folder)")
    ap.add_argument("--out", default="docs/figures", help="where parallel.json and parallel.md go")
    add_force_flag(ap)
    args = ap.parse_args(argv)
    writer = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    cli = [os.path.join(os.path.dirname(sys.executable), "cdc-assets")]
    work = args.work or tempfile.mkdtemp(prefix="parallel-")
    os.makedirs(work, exist_ok=True)
    base = write_base(os.path.join(work, f"base-{size_label(args.rows)}.parquet"), args.rows, args.seed)
    config = _config(work, base, args.tables)
    import_s = _run(cli, config, os.path.join(work, "import.log"))
    seq, par = [], []
    batch = 0
    for r in range(args.rounds):
        for kind in ("sequential", "parallel"):
            batch += 1
            for i in range(1, args.tables + 1):
                publish(changes(args.rows, 1000, "W2", args.seed + 100 * batch + i),
                        os.path.join(work, "landing", f"T{i:02d}", f"batch-{batch:04d}"), "part-0.parquet")
            extra = ["--parallel", str(args.parallel)] if kind == "parallel" else []
            seconds = _run(cli, config, os.path.join(work, f"run-{batch}-{kind}.log"), extra)
            (par if kind == "parallel" else seq).append(seconds)
            print(f"round {r + 1}: {kind} run of {args.tables} tables: {seconds} s", flush=True)
    figures = {"tables": args.tables, "rows_per_table": args.rows, "changes_per_batch": 1000,
               "processes": args.parallel, "cpus": os.cpu_count(), "import_run_s": import_s,
               "sequential_s": seq, "parallel_s": par,
               "sequential_over_parallel": round(statistics.median(seq) / statistics.median(par), 2)}
    command = ".venv/bin/python -m cdc_assets_tests.benchmarks.parallel " + " ".join(argv or sys.argv[1:])
    writer.write_json("parallel.json", figures, command=command)
    lines = [f"Command: `{command}` (shared machine, {os.cpu_count()} CPUs)", "",
             "| tables x rows | changes per table | sequential run s | --parallel run s | sequential / parallel |",
             "|---|---|---|---|---|",
             f"| {args.tables} x {args.rows:,} | 1000 | {', '.join(map(str, seq))} | {', '.join(map(str, par))} | "
             f"{figures['sequential_over_parallel']} |"]
    with open(writer.path("parallel.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
