"""Capture from a live PostgreSQL: what each method costs the source's writers, and how fast its
changes are extracted and applied.

    .venv/bin/python -m cdc_assets_tests.benchmarks.capture --changes 100000 --rows 100000 --out docs/figures

A throw-away cluster (cdc_assets_tests/postgres.py: `wal_level=logical`, `fsync=off`) holds, per
method and per phase, a database of its own with the same table of --rows rows. The same DML workload
(--changes changes: 40 % inserts, 40 % updates, 20 % deletes, in transactions of --per-transaction
changes, one session) runs (a) on a table without capture: the source's own DML rate; (b) on a table
whose capture `cdc-assets capture enable` started (`changelog`: the trigger's cost on every change;
`logical`: the slot, whose cost is the WAL the server writes anyway at `wal_level=logical`). Then one
extraction takes what was captured into the warehouse, and `cdc-assets run` (a process of its own, as
a user runs it) registers it as a batch and applies it; the base was applied by a run before the
workload. The target is then compared with the source (the matches_live_source check's comparison).

Printed and written (capture.json, capture.md): per method, DML seconds without and with capture and
their ratio, the source's own DML rate, the changes extracted per second and applied per second.
Seconds are never asserted: the machine is shared, say what else ran.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from cdc_assets_tests.figures import Figures, add_force_flag

from .bench import child_env

METHODS = ("changelog", "logical")
DDL = ("CREATE TABLE public.bench (id bigint PRIMARY KEY, name text, qty integer, amount numeric(12,2), "
       "at timestamptz)")


def workload(changes: int, rows: int, seed: int) -> list[tuple[str, tuple]]:
    """The DML statements of `changes` changes to a table of ids 0..rows-1, the same for every phase."""
    rng = random.Random(seed)
    present, next_id, out = list(range(rows)), rows, []
    for _ in range(changes):
        pick = rng.random()
        if pick < 0.4 or not present:
            out.append(("INSERT INTO public.bench VALUES (%s, %s, %s, %s, now())",
                        (next_id, f"n{next_id}", rng.randint(0, 1000), rng.randint(0, 10**8) / 100)))
            present.append(next_id)
            next_id += 1
        elif pick < 0.8:
            out.append(("UPDATE public.bench SET qty = %s, amount = %s, at = now() WHERE id = %s",
                        (rng.randint(0, 1000), rng.randint(0, 10**8) / 100, rng.choice(present))))
        else:
            i = rng.randrange(len(present))
            present[i], present[-1] = present[-1], present[i]
            out.append(("DELETE FROM public.bench WHERE id = %s", (present.pop(),)))
    return out


def _database(cluster, name: str, rows: int) -> None:
    with cluster.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    with cluster.connect(name) as conn:
        conn.execute(DDL)
        conn.execute("INSERT INTO public.bench SELECT i, 'n' || i, i %% 1000, (i %% 100000) / 100.0, now() "
                     "FROM generate_series(0, %s) i", (rows - 1,))
        conn.execute("VACUUM ANALYZE public.bench")


def _run_dml(cluster, name: str, statements, per_transaction: int) -> float:
    with cluster.connect(name, autocommit=False) as conn:
        t = time.perf_counter()
        for i, (sql, params) in enumerate(statements, start=1):
            conn.execute(sql, params)
            if i % per_transaction == 0:
                conn.commit()
        conn.commit()
        return time.perf_counter() - t


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdc_assets.cli.main", *args], env=child_env(),
                          capture_output=True, text=True, timeout=3600)


def measure(cluster, work: str, method: str, changes: int, rows: int, per_transaction: int, seed: int) -> dict:
    from cdc_assets.core.config import load_config
    from cdc_assets.engine import postgres_reconcile, sources

    statements = workload(changes, rows, seed)
    plain, captured = f"plain_{method}", f"captured_{method}"
    _database(cluster, plain, rows)
    without = _run_dml(cluster, plain, statements, per_transaction)

    _database(cluster, captured, rows)
    folder = os.path.join(work, method)
    os.makedirs(folder)
    config = os.path.join(folder, "cdc.yaml")
    with open(config, "w") as fh:
        json.dump({"warehouse": os.path.join(folder, "warehouse"), "landing": os.path.join(folder, "landing"),
                   "tables": [{"name": "BENCH", "source": cluster.url(captured, "public.bench"),
                               "capture": method}]}, fh)
    for step in (("capture", "enable"), ("run",)):
        done = _cli(*step, "--config", config)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(step)} failed: {done.stderr.strip()[-2000:]}")
    with_capture = _run_dml(cluster, captured, statements, per_transaction)

    cfg = load_config(config)
    table = cfg.table("BENCH")
    t = time.perf_counter()
    extracted = sources.extract_new_rows(table, cfg.table_dir("BENCH")) or 0
    extract_seconds = time.perf_counter() - t
    t = time.perf_counter()
    done = _cli("run", "--config", config)
    run_seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"run failed: {done.stderr.strip()[-2000:]}")
    check = postgres_reconcile.reconcile_live(table, cfg.table_dir("BENCH"))
    return {
        "method": method, "changes": changes, "rows": rows, "per_transaction": per_transaction,
        "dml_seconds_without_capture": round(without, 3), "dml_seconds_with_capture": round(with_capture, 3),
        "dml_ratio": round(with_capture / without, 3),
        "source_dml_changes_per_second": round(changes / without),
        "captured_changes": extracted,  # an update that changes the key is two
        "extract_seconds": round(extract_seconds, 3),
        "extracted_changes_per_second": round(extracted / extract_seconds) if extract_seconds else None,
        "run_seconds": round(run_seconds, 3),
        "applied_changes_per_second": round(extracted / run_seconds) if run_seconds else None,
        "run_line": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "",
        "target_matches_source": check.matches and check.pending_keys == 0,
        "rows_compared": check.rows_compared,
    }


def markdown(results: list[dict], note: str) -> str:
    lines = ["| method | changes | DML s without capture | DML s with capture | ratio | source DML changes/s "
             "| extracted changes/s | applied changes/s (`cdc-assets run`) | target equals source |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['method']} | {r['changes']} | {r['dml_seconds_without_capture']} | "
                     f"{r['dml_seconds_with_capture']} | {r['dml_ratio']} | {r['source_dml_changes_per_second']} | "
                     f"{r['extracted_changes_per_second']} | {r['applied_changes_per_second']} | "
                     f"{r['target_matches_source']} |")
    return "\n".join(lines) + (f"\n\n{note}\n" if note else "\n")


def main(argv: list[str] | None = None) -> int:
    from cdc_assets_tests import postgres as pg

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--changes", type=int, default=100_000, help="changes in the DML workload")
    p.add_argument("--rows", type=int, default=100_000, help="rows in the table before the workload")
    p.add_argument("--per-transaction", type=int, default=100, help="changes per transaction")
    p.add_argument("--methods", default=",".join(METHODS), help="capture methods, comma-separated")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--out", help="folder for capture.json and capture.md")
    p.add_argument("--note", default="", help="what else ran on the machine")
    add_force_flag(p)
    args = p.parse_args(argv)
    figures = Figures(args.out, force=args.force_dirty) if args.out else None  # refused before measuring if dirty
    results = []
    with tempfile.TemporaryDirectory(prefix="cdc-capture-bench-") as work, pg.cluster() as cluster:
        for method in args.methods.split(","):
            r = measure(cluster, work, method, args.changes, args.rows, args.per_transaction, args.seed)
            print(f"{method}: DML {r['dml_seconds_without_capture']}s without capture, "
                  f"{r['dml_seconds_with_capture']}s with (x{r['dml_ratio']}); source {r['source_dml_changes_per_second']} "
                  f"changes/s; extracted {r['extracted_changes_per_second']} changes/s; applied "
                  f"{r['applied_changes_per_second']} changes/s; target equals source: {r['target_matches_source']}",
                  flush=True)
            results.append(r)
    if figures:
        command = "python -m cdc_assets_tests.benchmarks.capture " + " ".join(argv if argv is not None else sys.argv[1:])
        figures.write_json("capture.json", {"note": args.note, "results": results}, command=command)
        with open(figures.path("capture.md"), "w", encoding="utf-8") as fh:
            fh.write(markdown(results, args.note))
    return 0 if all(r["target_matches_source"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
