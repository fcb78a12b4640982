"""What running a table for years costs (issue 9): a fresh read against a plain read of the same
target, a maintenance pass, a restore, the SCD2 history, at the benchmark's sizes.

    .venv/bin/python -m cdc_assets_tests.benchmarks.operations --sizes 1M --out docs/figures

Per size N: bench.py's base of N rows is imported with `cdc-assets run` (a table whose merges
wait: `apply: {min_changes: huge}`), then one W2 batch (1,000 changes in the top 1% of ids) is
landed and run, so it is staged and not merged. Then, in this process:
  plain read     delta-rs reads the whole target into Arrow (`DeltaTable.to_pyarrow_table`)
  fresh read     the same target with the staged batch laid over it (engine.fresh.fresh_table)
and the batch is merged by a second `cdc-assets run` without the policy. Then:
  restore        the target put back to the version before the merge (engine.target_versions)
  maintain       one maintenance pass (engine.maintenance.maintain: compaction, vacuum at the
                 default 7-day retention, so nothing is vacuumed)
The table keeps its history (`history: true`): the import's run builds it from the base on Spark
(history build), and the staging run takes the W2 batch into it, as every run does whether or not
the merge waits (history update: 1,000 changes placed among the N versions, one MERGE); both are
the history step's own seconds, from `run --json`, against the apply's in the same table.
Then K more W2 batches (--trim-batches, default 10; their ids overlap) are landed and run one at a
time, and a maintenance pass as of two hours on trims staging (`trim_staging_after: 1h`):
  trim staging   staging's rows before and after, and the pass's seconds (compaction and vacuum
                 included, which find nothing to do here)
The fresh read is checked equal to the merged target before the restore. Seconds are one run each
on a shared machine: read the ratio fresh / plain, measured in the same run, not the seconds.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time

from deltalake import DeltaTable

from cdc_assets.core.config import load_config
from cdc_assets.engine import delta, fresh, maintenance, target_versions
from cdc_assets.engine.table_layout import STAGING, TARGET, path
from cdc_assets_tests.figures import Figures, add_force_flag

from .bench import CHANGESET, changes, child_env, parse_size, publish, size_label, write_base

WAITING = 10**9


def _config(work: str, base: str, waiting: bool) -> str:
    table = {"name": "T", "keys": ["id"], "format": "changeset", "options": CHANGESET, "base_snapshot": base,
             "history": True, "maintenance": {"trim_staging_after": "1h"}}
    if waiting:
        table["apply"] = {"min_changes": WAITING}
    cfg = {"warehouse": os.path.join(work, "warehouse"), "landing": os.path.join(work, "landing"), "tables": [table]}
    file = os.path.join(work, "cdc.yaml")
    with open(file, "w") as fh:
        json.dump(cfg, fh)
    return file


def _run(cli: list[str], config: str, log: str) -> tuple[float, dict]:
    """One `cdc-assets run --json`: its seconds, and the figures of table T's steps."""
    t = time.time()
    with open(log, "w") as fh:
        p = subprocess.run(cli + ["run", "--json", "--config", config], stdout=fh, stderr=subprocess.STDOUT,
                           env=child_env(), timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"cdc-assets run failed ({p.returncode}): see {log}")
    with open(log) as fh:
        outcome = next(json.loads(line) for line in fh if line.startswith("{"))
    return time.time() - t, outcome["figures"]


def _timed(fn):
    t = time.time()
    out = fn()
    return out, round(time.time() - t, 3)


def _canonical(table) -> list:
    rows = table.to_pylist()
    return sorted(repr(sorted(r.items())) for r in rows)


def measure(n: int, work: str, seed: int, cli: list[str], trim_batches: int = 10, echo=print) -> dict:
    os.makedirs(work, exist_ok=True)
    base = write_base(os.path.join(work, f"base-{size_label(n)}.parquet"), n, seed)
    config = _config(work, base, waiting=True)
    import_s, imported = _run(cli, config, os.path.join(work, "import.log"))
    publish(changes(n, 1000, "W2", seed), os.path.join(work, "landing", "T", "batch-0001"), "part-0.parquet")
    stage_s, staged = _run(cli, config, os.path.join(work, "stage.log"))
    cfg = load_config(config)
    table = cfg.table("T")
    target_path = path(cfg.table_dir("T"), TARGET)
    decision, pending = fresh.decision(cfg, table)
    assert not decision.due and pending.changes > 0, decision
    plain, plain_s = _timed(lambda: DeltaTable(target_path).to_pyarrow_table())
    shown, fresh_s = _timed(lambda: fresh.fresh_table(cfg, table, with_metadata=True))
    before = delta.load(target_path).version()

    config = _config(work, base, waiting=False)
    apply_s, applied = _run(cli, config, os.path.join(work, "apply.log"))
    merged = DeltaTable(target_path).to_pyarrow_table()
    equal = _canonical(merged.select(shown.column_names)) == _canonical(shown)

    restored, restore_s = _timed(lambda: target_versions.restore("T", cfg.table_dir("T"), before))
    report, maintain_s = _timed(lambda: maintenance.maintain(cfg, table))

    for b in range(trim_batches):  # the restored batch is applied again by the first of these runs
        publish(changes(n, 1000, "W2", seed + 1 + b), os.path.join(work, "landing", "T", f"batch-{b + 2:04d}"),
                "part-0.parquet")
        _run(cli, config, os.path.join(work, f"batch-{b + 2}.log"))
    staging_path = path(cfg.table_dir("T"), STAGING)
    staged_before = delta.file_stats(delta.open_table(staging_path))[2]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    trimmed, trim_s = _timed(lambda: maintenance.maintain(cfg, table, now=later))
    figures = {
        "rows": n, "staged_changes": pending.changes, "plain_read_s": plain_s, "fresh_read_s": fresh_s,
        "fresh_over_plain": round(fresh_s / plain_s, 2) if plain_s else None,
        "fresh_equals_merged": equal, "target_rows_plain": plain.num_rows, "target_rows_fresh": shown.num_rows,
        "restore_s": restore_s, "restore_files_removed": restored.files_removed,
        "restore_files_restored": restored.files_restored, "maintain_s": maintain_s,
        "maintain_files_before": report.target_before.count, "maintain_files_after": report.target_after.count,
        "history_build_s": imported["history"]["seconds"], "target_build_s": imported["target"]["seconds"],
        "history_update_s": staged["history"]["seconds"], "history_update_changes": staged["history"]["changes_read"],
        "history_rows": staged["history"]["rows"], "apply_s": applied["target"]["seconds"],
        "trim_batches": trimmed.staging_trimmed_through, "staging_rows_before_trim": staged_before,
        "staging_rows_after_trim": delta.file_stats(delta.open_table(staging_path))[2], "trim_s": trim_s,
        "import_run_s": round(import_s, 1), "stage_run_s": round(stage_s, 1), "apply_run_s": round(apply_s, 1),
    }
    echo(json.dumps(figures))
    return figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.operations", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=lambda t: [parse_size(x) for x in t.split(",")], default=[200_000],
                    help="target sizes (default 200k)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trim-batches", type=int, default=10, help="W2 batches staged before the staging trim")
    ap.add_argument("--work", help="generated data and warehouses (default: a new /tmp/operations-* folder)")
    ap.add_argument("--out", default="docs/figures", help="where operations.json and operations.md go")
    add_force_flag(ap)
    args = ap.parse_args(argv)
    figures = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    cli = [os.path.join(os.path.dirname(sys.executable), "cdc-assets")]
    work = args.work or tempfile.mkdtemp(prefix="operations-")
    results = [measure(n, os.path.join(work, size_label(n)), args.seed, cli, args.trim_batches) for n in args.sizes]
    command = ".venv/bin/python -m cdc_assets_tests.benchmarks.operations " + " ".join(argv or sys.argv[1:])
    figures.write_json("operations.json", {"results": results}, command=command)
    lines = [f"Command: `{command}` (one run each, shared machine)", "",
             "| rows | staged changes | plain read s | fresh read s | fresh/plain | fresh = merged | restore s | "
             "maintain s | files before/after | history build s (target build s) | history update s (apply s) | "
             "staging trim: batches, rows before/after, s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['rows']:,} | {r['staged_changes']} | {r['plain_read_s']} | {r['fresh_read_s']} | "
                     f"{r['fresh_over_plain']} | {r['fresh_equals_merged']} | {r['restore_s']} | {r['maintain_s']} | "
                     f"{r['maintain_files_before']}/{r['maintain_files_after']} | "
                     f"{r['history_build_s']} ({r['target_build_s']}) | {r['history_update_s']} ({r['apply_s']}) | "
                     f"{r['trim_batches']}, {r['staging_rows_before_trim']:,}/{r['staging_rows_after_trim']:,}, "
                     f"{r['trim_s']} |")
    with open(figures.path("operations.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
