"""Landed to visible: how long a landed change file takes to reach the target through `cdc-assets ui`.

    .venv/bin/python -m cdc_assets_tests.benchmarks.latency --files 10 --rows 1M --out docs/figures

One table of bench.py's base (N rows) is imported by `cdc-assets run`. Then `cdc-assets ui` starts
in the same folder (its Dagster home, its Spark Connect server), the table's landing sensor is
turned on, and --files W2 batches (1,000 changes each) land one at a time: each is published
(written under a '.' name, then renamed) a random 0-5 s after the previous one is in the target
and its runs are done, so that landings meet the sensor's ticks at every phase. The lag of a file
is from its rename to the first poll (every 0.1 s) that sees the target's Delta version hold it.

The phases come from the Dagster instance the UI shows: per run of the batch, from the previous
event (the landing, or the previous run's end) to the run's creation (the sensor tick that asked
for it), creation to start (queue and launch), start to end (the run). Each batch's
materializations and check evaluations are counted, as the UI lists them. Seconds are printed and
written (latency.json), never asserted: the machine is shared, say what else ran.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from cdc_assets_tests.figures import Figures, add_force_flag
from cdc_assets_tests.support.ports import free_port

from .bench import CHANGESET, changes, child_env, delta_version, parse_size, publish, size_label, write_base

TABLE = "LAT"
POLL_SECONDS = 0.1


def _config(work: str, base: str) -> str:
    cfg = {"warehouse": os.path.join(work, "warehouse"), "landing": os.path.join(work, "landing"),
           "tables": [{"name": TABLE, "keys": ["id"], "format": "changeset", "options": CHANGESET,
                       "base_snapshot": base}]}
    path = os.path.join(work, "cdc.yaml")
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return path


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of the values, in seconds to 0.01: linear interpolation
    between the two nearest of the sorted values (numpy's default "linear", Excel's PERCENTILE.INC),
    so q=0.5 is the median (the middle value, or the mean of the two middle ones) and, with 6
    values, q=0.95 lies between the 5th and the 6th."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (at - low), 2)


def lag_summary(lags: list[float]) -> dict[str, float]:
    """The lags' p50 (their median), p95 (`percentile`), max and mean, in seconds."""
    return {"lag_p50_s": percentile(lags, 0.5), "lag_p95_s": percentile(lags, 0.95),
            "lag_max_s": round(max(lags), 2), "lag_mean_s": round(statistics.mean(lags), 2)}


SUMMARY_METHOD = ("over per_file's lag_s: p50 is the median (the mean of the two middle lags of an even count), "
                  "p95 interpolates linearly between the two nearest sorted lags (numpy's default 'linear')")


def resummarize(path: str) -> dict:
    """Recomputes a latency.json's summary from the per-file lags it records (no new measurement),
    saying so in the file: the commit and time of the measurement stay the recorded ones."""
    with open(path, encoding="utf-8") as fh:
        figures = json.load(fh)
    figures.update(lag_summary([r["lag_s"] for r in figures["per_file"]]))
    figures["summary_method"] = SUMMARY_METHOD
    figures["summary_note"] = ("the summary figures were recomputed from per_file's recorded lag_s by "
                               "`python -m cdc_assets_tests.benchmarks.latency --resummarize` (the measurement "
                               "is the recorded one: its command, commit and time are unchanged)")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2)
        fh.write("\n")
    return figures


class Ui:
    """`cdc-assets ui` on the configuration, its own Dagster home, until stopped."""

    def __init__(self, cli: list[str], config: str, work: str, log: str, spark: bool = True):
        self.env = child_env()
        self.env["DAGSTER_HOME"] = os.path.join(work, "dagster_home")
        self.port = free_port()
        self.log = open(log, "w")
        self.proc = subprocess.Popen([*cli, "ui", "--config", config, "--port", str(self.port)]
                                     + ([] if spark else ["--no-spark"]), cwd=work,
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.config, self.spark = config, spark

    def wait_ready(self, timeout: float = 600.0) -> float:
        from cdc_assets.core.config import load_config
        from cdc_assets.engine import connect

        cfg = load_config(self.config)
        t = time.time()
        while not (_answers(self.port) and (not self.spark or connect.live(cfg) is not None)):
            if self.proc.poll() is not None:
                raise SystemExit(f"cdc-assets ui exited ({self.proc.returncode}): see {self.log.name}")
            if time.time() - t > timeout:
                raise SystemExit(f"cdc-assets ui not up after {timeout:g} s: see {self.log.name}")
            time.sleep(0.5)
        return round(time.time() - t, 1)

    def start_sensor(self, name: str) -> None:
        self.dagster("sensor", "start", name)

    def dagster(self, *args: str) -> None:
        """A `dagster` command on this UI's code location and instance (e.g. `schedule start NAME`)."""
        env = dict(self.env, CDC_ASSETS_CONFIG=self.config)
        dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
        subprocess.run([dagster, *args, "-m", "cdc_assets.definitions"], env=env, check=True,
                       stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def _batch_runs(instance, since: float) -> list:
    import dagster as dg

    records = instance.get_run_records(dg.RunsFilter(created_after=_utc(since)))
    return sorted(records, key=lambda r: r.create_timestamp.timestamp())


def _utc(ts: float):
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC)


def _idle(instance, since: float) -> bool:
    return all(r.dagster_run.is_finished for r in _batch_runs(instance, since))


def phases(instance, landed: float, visible: float) -> dict:
    """The batch's runs, each with its wait (from the landing or the previous run's end to its
    creation by a tick), its queue and launch, and its run; and what the UI shows of them."""
    import dagster as dg

    runs, at = [], landed
    events = {"materializations": 0, "check_evaluations": 0}
    for r in _batch_runs(instance, landed - 1):
        created = r.create_timestamp.timestamp()
        runs.append({"job": r.dagster_run.job_name, "status": r.dagster_run.status.value,
                     "wait_s": round(created - at, 2),
                     "queue_and_launch_s": round(r.start_time - created, 2) if r.start_time else None,
                     "run_s": round(r.end_time - r.start_time, 2) if r.start_time and r.end_time else None})
        at = r.end_time or at
        for kind, key in ((dg.DagsterEventType.ASSET_MATERIALIZATION, "materializations"),
                          (dg.DagsterEventType.ASSET_CHECK_EVALUATION, "check_evaluations")):
            events[key] += len(instance.all_logs(r.dagster_run.run_id, of_type=kind))
    return {"runs": runs, "after_last_run_s": round(visible - at, 2), **events}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.latency", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=10, help="files landed one at a time (default 10)")
    ap.add_argument("--rows", type=parse_size, default=1_000_000, help="rows of the table (default 1M)")
    ap.add_argument("--changes", type=int, default=1000, help="changes per file (default 1000)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a file may take (default 300)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--work", help="generated data, warehouse and Dagster home (default: a new /tmp/latency-*)")
    ap.add_argument("--out", default="docs/figures", help="where latency.json goes")
    add_force_flag(ap)
    ap.add_argument("--resummarize", metavar="JSON",
                    help="measure nothing: recompute the summary of a latency.json from its per-file lags")
    args = ap.parse_args(argv)
    if args.resummarize:
        f = resummarize(args.resummarize)
        print(f"{args.resummarize}: p50 {f['lag_p50_s']} s, p95 {f['lag_p95_s']} s, max {f['lag_max_s']} s, "
              f"mean {f['lag_mean_s']} s over {len(f['per_file'])} files")
        return 0
    writer = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    cli = [os.path.join(os.path.dirname(sys.executable), "cdc-assets")]
    work = args.work or tempfile.mkdtemp(prefix="latency-")
    os.makedirs(work, exist_ok=True)
    base = write_base(os.path.join(work, f"base-{size_label(args.rows)}.parquet"), args.rows, args.seed)
    config = _config(work, base)
    target = os.path.join(work, "warehouse", TABLE, "target")
    with open(os.path.join(work, "import.log"), "w") as fh:
        subprocess.run([*cli, "run", "--config", config], env=child_env(), stdout=fh, stderr=subprocess.STDOUT,
                       check=True)
    ui = Ui(cli, config, work, os.path.join(work, "ui.log"))
    rng = random.Random(args.seed)
    results = []
    try:
        up_s = ui.wait_ready()
        print(f"cdc-assets ui up in {up_s} s (log {ui.log.name})", flush=True)
        ui.start_sensor(f"{TABLE}__landing_sensor")
        import dagster as dg

        os.environ["DAGSTER_HOME"] = ui.env["DAGSTER_HOME"]
        instance = dg.DagsterInstance.get()
        for k in range(1, args.files + 1):
            time.sleep(rng.uniform(0, 5))
            before = delta_version(target)
            batch = changes(args.rows, args.changes, "W2", args.seed + 100 * k)
            publish(batch, os.path.join(work, "landing", TABLE, f"batch-{k:04d}"), "part-0.parquet")
            landed = time.time()
            while delta_version(target) == before:
                if time.time() - landed > args.timeout:
                    raise SystemExit(f"file {k} not in the target after {args.timeout:g} s: see {ui.log.name}")
                time.sleep(POLL_SECONDS)
            visible = time.time()
            while not _idle(instance, landed - 1):
                time.sleep(0.2)
            row = {"file": k, "lag_s": round(visible - landed, 2), **phases(instance, landed, visible)}
            results.append(row)
            steps = ", ".join(f"{r['job']}: wait {r['wait_s']} + queue/launch {r['queue_and_launch_s']} + "
                              f"run {r['run_s']}" for r in row["runs"])
            print(f"file {k}: {row['lag_s']} s landed to visible ({steps}; then {row['after_last_run_s']}); "
                  f"{row['materializations']} materializations, {row['check_evaluations']} checks", flush=True)
    finally:
        ui.stop()
    lags = [r["lag_s"] for r in results]
    figures = {"rows": args.rows, "changes_per_file": args.changes, "files": len(results), "cpus": os.cpu_count(),
               **lag_summary(lags), "summary_method": SUMMARY_METHOD, "ui_up_s": up_s, "per_file": results}
    command = ".venv/bin/python -m cdc_assets_tests.benchmarks.latency " + " ".join(argv or sys.argv[1:])
    where = writer.write_json("latency.json", figures, command=command)
    print(f"landed to visible over {len(lags)} files of {args.changes} changes into {args.rows:,} rows: "
          f"p50 {figures['lag_p50_s']} s, p95 {figures['lag_p95_s']} s, max {figures['lag_max_s']} s ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
