"""A batch's cost over a table's life: the same small batch, hundreds of times, into one table.

    .venv/bin/python -m cdc_assets_tests.benchmarks.growth --batches 400 --out docs/figures
    .venv/bin/python -m cdc_assets_tests.benchmarks.growth --batches 60 --out /tmp/growth

One table (changeset CSV, --keys random integer ids) receives --batches batches of --changes changes
each (inserts, updates and deletes of random ids: new keys land all over the key range, as UUID or
hashed keys do). Each batch is landed, then taken by `cdc-assets run` called in this process (the
command's own function, so Python's start and imports are paid once and what is measured is the
batch's run: ledger, Dagster run, steps, checks, commits). Beside it, in the same process, delta-rs
merges the same batch (its latest change per id) into a table of its own: the peer. Maintenance never
runs: both tables keep every version and file, as between two nightly maintenance runs.

The rule this measures: a batch's cost follows the batch, not the table's history. Per batch: wall and
CPU seconds of the run and of the merge. Per bucket of --bucket batches after the first (which builds
the target): the mean of each, and the ratio of the last bucket to the first (1.0: no growth). Seconds are printed and written, never asserted: the
machine is shared, say what else ran (--note).

Writes --out/growth.json (summary and buckets), growth.csv (one row per batch) and growth.png.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc

from cdc_assets_tests.figures import Figures, add_force_flag


def _batch(rnd: random.Random, n: int, changes: int, keys: int) -> list[tuple[int, str, int, float]]:
    return [(rnd.randrange(keys), rnd.choice("IUD"), n * 100_000 + i, rnd.random()) for i in range(changes)]


def _land(landing: str, n: int, rows) -> None:
    folder = os.path.join(landing, "T", f"batch-{n:05d}")
    os.makedirs(folder + ".tmp")
    with open(os.path.join(folder + ".tmp", "changes.csv"), "w") as f:
        f.write("id,op,seq,v\n")
        f.writelines(f"{k},{op},{seq},{v!r}\n" for k, op, seq, v in rows)
    os.rename(folder + ".tmp", folder)  # complete when it appears


def _peer_merge(table_path: str, rows) -> None:
    """delta-rs' merge of the batch's latest change per id (deletes as deletes)."""
    from deltalake import DeltaTable, write_deltalake

    data = pa.table({"id": [r[0] for r in rows], "op": [r[1] for r in rows], "seq": [r[2] for r in rows],
                     "v": [r[3] for r in rows]})
    latest = data.group_by("id").aggregate([("seq", "max")])
    data = data.join(latest, keys=["id", "seq"], right_keys=["id", "seq_max"], join_type="inner")
    if not os.path.exists(os.path.join(table_path, "_delta_log")):
        write_deltalake(table_path, data.filter(pc.not_equal(data["op"], "D")).select(["id", "seq", "v"]))
        return
    (DeltaTable(table_path).merge(data, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_delete("s.op = 'D'")
     .when_matched_update({"seq": "s.seq", "v": "s.v"}, "s.op != 'D'")
     .when_not_matched_insert({"id": "s.id", "seq": "s.seq", "v": "s.v"}, "s.op != 'D'")
     .execute())


def _buckets(rows: list[dict], size: int) -> list[dict]:
    out = []
    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        out.append({"batches": f"{part[0]['batch']}-{part[-1]['batch']}",
                    **{f"{k}_mean": round(statistics.fmean(r[k] for r in part), 4)
                       for k in ("run_cpu_s", "run_wall_s", "peer_cpu_s", "peer_wall_s")}})
    return out


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    xs = [r["batch"] for r in rows]
    for key, label in (("run_cpu_s", "cdc_assets run (CPU s)"), ("peer_cpu_s", "delta-rs merge (CPU s)")):
        ax.plot(xs, [r[key] for r in rows], ".", markersize=3, label=label)
    ax.set_xlabel("batch")
    ax.set_ylabel("CPU seconds per batch")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("One table, the same small batch each time: does a batch cost more as the table ages?")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--changes", type=int, default=50, help="changes per batch")
    ap.add_argument("--keys", type=int, default=5000, help="the ids' range")
    ap.add_argument("--bucket", type=int, default=50, help="batches per bucket of the summary")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--note", default="", help="what else ran on the machine")
    ap.add_argument("--out", default="docs/figures")
    add_force_flag(ap)
    args = ap.parse_args(argv)
    figures = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree

    from cdc_assets.cli.main import _command

    work = tempfile.mkdtemp(prefix="growth-")
    try:
        with open(os.path.join(work, "cdc.yaml"), "w") as f:
            f.write("warehouse: ./warehouse\nlanding: ./landing\ntables:\n"
                    "  - name: T\n    keys: [id]\n    format: changeset\n"
                    "    options: {op_column: op, inserts: [I], updates: [U], deletes: [D], sequence_by: [seq]}\n"
                    "    columns: {id: long, seq: long, v: double}\n")
        os.environ.pop("DAGSTER_HOME", None)
        rnd = random.Random(args.seed)
        rows: list[dict] = []
        here = os.getcwd()
        os.chdir(work)
        for n in range(1, args.batches + 1):
            batch = _batch(rnd, n, args.changes, args.keys)
            _land(os.path.join(work, "landing"), n, batch)
            wall, cpu = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                status = _command(["run", "--config", "cdc.yaml"])
            run_wall, run_cpu = time.perf_counter() - wall, time.process_time() - cpu
            if status != 0:
                print(f"batch {n}: run exited {status}", file=sys.stderr)
                return 1
            wall, cpu = time.perf_counter(), time.process_time()
            _peer_merge(os.path.join(work, "peer"), batch)
            rows.append({"batch": n, "run_wall_s": round(run_wall, 4), "run_cpu_s": round(run_cpu, 4),
                         "peer_wall_s": round(time.perf_counter() - wall, 4),
                         "peer_cpu_s": round(time.process_time() - cpu, 4)})
            if n % args.bucket == 0:
                print(f"batch {n}: run CPU {run_cpu:.2f} s, delta-rs merge CPU {rows[-1]['peer_cpu_s']:.2f} s",
                      flush=True)
        buckets = _buckets(rows[1:], args.bucket)  # the first batch builds the target: not a batch like the others
        first, last = buckets[0], buckets[-1]
        command = "python -m cdc_assets_tests.benchmarks.growth " + " ".join(argv or sys.argv[1:])
        summary = {
            "cpus": os.cpu_count(), "note": args.note,
            "batches": args.batches, "changes_per_batch": args.changes, "keys": args.keys,
            "run_cpu_growth": round(last["run_cpu_s_mean"] / first["run_cpu_s_mean"], 2),
            "peer_cpu_growth": round(last["peer_cpu_s_mean"] / first["peer_cpu_s_mean"], 2),
            "run_over_peer_first": round(first["run_cpu_s_mean"] / first["peer_cpu_s_mean"], 1),
            "run_over_peer_last": round(last["run_cpu_s_mean"] / last["peer_cpu_s_mean"], 1),
            "buckets": buckets,
        }
    finally:
        os.chdir(here)
        shutil.rmtree(work, ignore_errors=True)
    figures.write_json("growth.json", summary, command=command)
    with open(figures.path("growth.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, figures.path("growth.png"))
    print(json.dumps({k: v for k, v in summary.items() if k != "buckets"}, indent=2))
    for b in buckets:
        print(b)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
