"""Soak and width benchmarks: many consecutive batches into one table, many tables in one run.

    .venv/bin/python -m cdc_assets_tests.benchmarks.soak --batches 200 --tables 20 --out docs/figures

prints one line per batch and writes per-batch seconds (soak_batches.csv), their plot
(soak_batches.png) and the summary the README quotes (soak_summary.json: the averages over the
first and last batches, the median, the slowest, the steps, the reconciliation and the width run).
Figures are written, never asserted on: the machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import time

import dagster as dg

from cdc_assets.cli.generate import write_feed
from cdc_assets.core.config import load_config
from cdc_assets.engine.checks import reconciliation
from cdc_assets_tests.figures import Figures, add_force_flag


def _config(root: str, tables: list[str]) -> str:
    path = os.path.join(root, "cdc.yaml")
    with open(path, "w") as fh:
        json.dump({"warehouse": "./warehouse", "landing": "./landing",
                   "tables": [{"name": t, "keys": ["id"], "format": "datastream-json",
                               "reconcile_with": f"./feed/exports/{t}.csv"} for t in tables]}, fh)
    return path


def _land(root: str, table: str, b: int) -> None:
    src = os.path.join(root, "feed", "landing", table, f"batch-{b:04d}")
    if os.path.isdir(src):
        dst = os.path.join(root, "landing", table)
        os.makedirs(dst, exist_ok=True)
        os.replace(src, os.path.join(dst, f"batch-{b:04d}"))


STEPS = ("changes", "staging", "target")


def soak(root: str, batches: int, changes_per_batch: int, seed: int = 11, echo=print) -> dict:
    """Land and run `batches` batches into one table; returns per-batch seconds and the reconciliation."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.defs.run_loop import run_table

    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "landing"))
    write_feed(os.path.join(root, "feed"), "SOAK", "mysql", changes=batches * changes_per_batch, inserts=40, updates=45,
               deletes=15, seed=seed, batches=batches, files_per_batch=1, duplicates=2, delays=3)
    cfg = load_config(_config(root, ["SOAK"]))
    defs, inst = build_definitions(cfg), dg.DagsterInstance.ephemeral()
    times, failures = [], 0
    for b in range(1, batches + 1):
        _land(root, "SOAK", b)
        t0 = time.time()
        outcome = run_table(defs, inst, cfg, cfg.table("SOAK"))
        seconds = time.time() - t0
        failures += 0 if outcome.ok else 1
        rows = outcome.figures.get("target", {}).get("rows")
        steps = [outcome.figures.get(step, {}).get("seconds") for step in STEPS]  # where the time goes
        times.append((b, round(seconds, 3), rows, *steps))
        echo(f"batch {b}: {seconds:.2f}s, target {rows} rows{'' if outcome.ok else ' FAILED: ' + str(outcome.error)}")
    report = reconciliation(cfg, cfg.table("SOAK"))
    return {"times": times, "failures": failures, "reconciliation": report}


def wide(root: str, tables: int, changes: int, seed: int = 5) -> dict:
    """One `run` over many tables at once (each one batch)."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.defs.run_loop import run_config

    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "landing"))
    names = [f"T{i:02d}" for i in range(tables)]
    sources = ("oracle", "mysql", "postgres", "sqlserver")
    for i, t in enumerate(names):
        write_feed(os.path.join(root, "feed"), t, sources[i % 4], changes=changes, inserts=50, updates=35, deletes=15,
                   seed=seed + i, batches=1, files_per_batch=2)
        _land(root, t, 1)
    cfg = load_config(_config(root, names))
    t0 = time.time()
    outcomes = run_config(cfg, build_definitions, echo=lambda line: None)
    seconds = time.time() - t0
    reports = {t.name: reconciliation(cfg, t) for t in cfg.tables}
    return {"seconds": round(seconds, 1), "failed": [o.table for o in outcomes if not o.ok], "reports": reports}


WINDOW = 20  # batches averaged at the start and at the end of the soak


def _mean(rows, i):
    values = [r[i] for r in rows if r[i] is not None]
    return round(sum(values) / len(values), 2) if values else None


def summary(times) -> dict:
    """Whether time per batch grows with the batches applied: the mean seconds of the first and of
    the last WINDOW batches, per run and per step. The first batch pays Spark's start-up, so it is
    left out of the windows, the median and the slowest."""
    rest = times[1:]
    n = min(WINDOW, len(rest) // 2) or len(rest)
    first, last = rest[:n], rest[-n:]
    seconds = [t[1] for t in rest]
    return {
        "batches": len(times),
        "first_batch_seconds": times[0][1] if times else None,
        "first_window": [first[0][0], first[-1][0]] if first else None,
        "last_window": [last[0][0], last[-1][0]] if last else None,
        "first_window_mean_seconds": _mean(first, 1), "last_window_mean_seconds": _mean(last, 1),
        "median_seconds_after_first": round(statistics.median(seconds), 2) if seconds else None,
        "slowest_seconds_after_first": max(seconds) if seconds else None,
        "steps_mean_seconds": {step: {"first_window": _mean(first, 3 + i), "last_window": _mean(last, 3 + i)}
                               for i, step in enumerate(STEPS)},
    }


def write_figures(times, figures: Figures) -> tuple[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path, png_path = figures.path("soak_batches.csv"), figures.path("soak_batches.png")
    with open(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["batch", "seconds", "target_rows", *[f"{step}_seconds" for step in STEPS]])
        w.writerows(times)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([t[0] for t in times], [t[1] for t in times], marker=".", linewidth=0.8, label="whole run")
    for i, step in enumerate(STEPS):
        ax.plot([t[0] for t in times], [t[3 + i] or 0 for t in times], linewidth=0.8, label=f"{step} step")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("batch (1,000 changes each)")
    ax.set_ylabel("seconds per batch")
    ax.set_ylim(bottom=0)
    ax.set_title("cdc_assets soak: time per batch vs batches already applied")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return csv_path, png_path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--changes-per-batch", type=int, default=1000)
    ap.add_argument("--tables", type=int, default=20, help="tables for the width run (0: skip)")
    ap.add_argument("--out", default="soak")
    ap.add_argument("--work", default="/tmp/cdc_assets_soak")
    add_force_flag(ap)
    args = ap.parse_args()
    writer = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    result = soak(os.path.join(args.work, "soak"), args.batches, args.changes_per_batch)
    csv_path, png_path = write_figures(result["times"], writer)
    r = result["reconciliation"]
    figures = {"changes_per_batch": args.changes_per_batch, "failed_batches": result["failures"],
               **summary(result["times"]),
               "reconciliation": {k: getattr(r, k) for k in ("target_rows", "missing_rows", "extra_rows", "differing_rows")}}
    if args.tables:
        w = wide(os.path.join(args.work, "wide"), args.tables, args.changes_per_batch)
        figures["wide"] = {"tables": args.tables, "changes_per_table": args.changes_per_batch, "seconds": w["seconds"],
                           "failed_tables": w["failed"],
                           "discrepancies": sum(v.missing_rows + v.extra_rows + v.differing_rows
                                                for v in w["reports"].values())}
    command = " ".join([".venv/bin/python -m cdc_assets_tests.benchmarks.soak", *sys.argv[1:]])
    summary_path = writer.write_json("soak_summary.json", figures, command=command)
    print(json.dumps(figures, indent=2))
    print(f"written: {csv_path}, {png_path}, {summary_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
