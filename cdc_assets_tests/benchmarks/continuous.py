"""Many tables, continuously: the many-tables cycle of rules.md#changeset through a real `cdc-assets ui` daemon.

    .venv/bin/python -m cdc_assets_tests.benchmarks.continuous --tables 65 --rows 1M --minutes 20 --out DIR
    .venv/bin/python -m cdc_assets_tests.benchmarks.continuous --tables 4 --rows 100k --minutes 3 --out /tmp/c

T tables (C000, C001, ...) of R rows each start from one base snapshot (bench.py's base, imported once
by `cdc-assets run`, then cloned: Delta logs copied, Parquet files hard-linked, which the tables never
rewrite in place). Each table then receives one Datastream JSON file (Postgres positions, C changes of
bench.py's W2 mix) every minute for M minutes, in Datastream's folder layout, written under a '.' name and
renamed. The tables' landings are spread evenly over each minute, as independent streams would be.

How the tables run (--modes, all by default):
  sensors  every table's landing sensor on (`<TABLE>__landing_sensor`, a tick every 5 s): a table's
           landed-to-visible in seconds.
  one-sensor  the one sensor of all tables on (`all_tables__landing_sensor`, a tick every 5 s that looks at
           every table): the same runs, one tick for all.
  group    one `groups:` entry holding every table, `schedule: "* * * * *"`, `parallel: 2` (this machine's
           cores), its `<NAME>_cycle_schedule` on: the README's way for many tables at one cadence.

A file's lag is from its rename to the commit of the target version that holds its batch (the commit's
own timestamp in the Delta log, found by the `cdc.batch_seq` the apply records; the ledger says which batch
took the file). Per minute of landing: p50, p95 and max lag. A run keeps up when every file became
visible and the lags do not grow over the run: the least-squares slope of lag against landing time, over
the whole run, adds less than KEEP_UP_GROWTH_S seconds (or, when larger, a quarter of the median lag).
With a list of table counts (--tables 4,16,65) each runs in turn, and `stops_keeping_up_at` is the
smallest count that did not keep up. The daemon's CPU seconds per minute (the `ui` process tree's) are
recorded too. Seconds are printed and written, never asserted: the machine is shared, say what else ran.

Writes --out/continuous.json (summary per mode and table count, per-minute figures), continuous.csv (one row
per file) and continuous.png (lag over time).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

from cdc_assets.defs.sensors import ALL_TABLES_SENSOR
from cdc_assets_tests.figures import Figures, add_force_flag

from .bench import changes, child_env, parse_size, size_label, tree_pids, write_base
from .latency import Ui, percentile

MODES = ("sensors", "one-sensor", "group")
GROUP = "all_tables"
KEEP_UP_GROWTH_S = 10.0
POLL_SECONDS = 0.5
COLUMNS = {"amount": "decimal(12,2)"}
# Datastream's Postgres events; the position (lsn) grows with each event of a table's stream.
READ_METHOD = "postgres-cdc-wal"


def table_names(n: int) -> list[str]:
    return [f"C{i:03d}" for i in range(n)]


# --- data -------------------------------------------------------------------------------------

def datastream_lines(batch, first_position: int) -> bytes:
    """bench.py's change rows as Datastream JSON events, one per line; the k-th event's lsn is
    first_position + k, so later files of a table always order after earlier ones."""
    out = []
    kinds = {"I": "INSERT", "U": "UPDATE", "D": "DELETE"}
    for k, row in enumerate(batch.to_pylist()):
        op = row.pop("op")
        position = first_position + k
        payload = {**row, "amount": str(row["amount"])}  # exact: a decimal(12,2) column takes the text as written
        out.append(json.dumps({
            "stream_name": "projects/bench/locations/us-central1/streams/postgres-to-gcs",
            "read_method": READ_METHOD, "object": "public_bench",
            "uuid": str(uuid.UUID(int=position, version=4)),
            "read_timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "source_timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "source_metadata": {"table": "bench", "schema": "public", "is_deleted": op == "D",
                                "change_type": kinds[op], "lsn": f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"},
            "payload": payload,
        }))
    return ("\n".join(out) + "\n").encode("utf-8")


def land(landing: str, table: str, minute: int, data: bytes, when: float) -> str:
    """Datastream's layout (<TABLE>/yyyy/mm/dd/hh/mm/<name>.jsonl), written under a '.' name and renamed.
    Returns the file's path relative to the table's landing folder, as the ledger records it."""
    stamp = dt.datetime.fromtimestamp(when, dt.UTC)
    rel = os.path.join(stamp.strftime("%Y/%m/%d/%H/%M"), f"{table.lower()}_{minute:04d}.jsonl")
    full = os.path.join(landing, table, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    tmp = os.path.join(os.path.dirname(full), "." + os.path.basename(full) + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, full)
    return rel


def clone_table(src: str, dst: str) -> None:
    """A copy of a table's folder whose Parquet files are hard links (no table rewrites a Parquet file
    in place) and whose Delta logs and other files are copied."""
    def link_or_copy(s: str, d: str) -> None:
        if s.endswith(".parquet") and f"{os.sep}_delta_log{os.sep}" not in s:
            os.link(s, d)
        else:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link_or_copy, ignore=shutil.ignore_patterns("_cdc.lock"))


def write_config(work: str, base: str, names: list[str], mode: str, parallel: int) -> str:
    tables = [{"name": n, "keys": ["id"], "format": "datastream-json", "columns": COLUMNS, "base_snapshot": base}
              for n in names]
    cfg = {"warehouse": os.path.join(work, "warehouse"), "landing": os.path.join(work, "landing"), "tables": tables}
    if mode == "group":
        cfg["groups"] = {GROUP: {"tables": names, "schedule": "* * * * *", "parallel": parallel}}
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "cdc.yaml")
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=1)
    return path


def prepare(work: str, base: str, names: list[str], mode: str, parallel: int, cli: list[str]) -> str:
    """The warehouse of `names`, each holding the imported base: the first table imported by
    `cdc-assets run`, the others cloned from it."""
    first = names[0]
    one = write_config(os.path.join(work, "import"), base, [first], "sensors", parallel)
    with open(os.path.join(work, "import.log"), "w") as fh:
        subprocess.run([*cli, "run", "--config", one], env=child_env(), stdout=fh, stderr=subprocess.STDOUT,
                       check=True)
    for name in names:
        clone_table(os.path.join(work, "import", "warehouse", first), os.path.join(work, "warehouse", name))
    shutil.rmtree(os.path.join(work, "import"))
    return write_config(work, base, names, mode, parallel)


# --- watching the targets ---------------------------------------------------------------------

@dataclass
class Landed:
    table: str
    minute: int
    file: str
    landed_at: float
    visible_at: float | None = None

    @property
    def lag_s(self) -> float | None:
        return None if self.visible_at is None else round(self.visible_at - self.landed_at, 2)


class Watcher:
    """Finds when each landed file reaches its table's target: on a new commit in the target's
    Delta log (a change of the log folder), the ledger says which batch took the file and the
    log's commits say when the target first held that batch."""

    def __init__(self, warehouse: str):
        self.warehouse = warehouse
        self.waiting: dict[str, list[Landed]] = {}
        self.lock = threading.Lock()
        self._seen: dict[str, int] = {}

    def add(self, f: Landed) -> None:
        with self.lock:
            self.waiting.setdefault(f.table, []).append(f)

    def pending(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.waiting.values())

    def poll(self) -> None:
        with self.lock:
            tables = [t for t, v in self.waiting.items() if v]
        for table in tables:
            log = os.path.join(self.warehouse, table, "target", "_delta_log")
            try:
                stamp = os.stat(log).st_mtime_ns
            except FileNotFoundError:
                continue
            if self._seen.get(table) == stamp:
                continue
            self._seen[table] = stamp
            self._resolve(table)

    def _resolve(self, table: str) -> None:
        from deltalake import DeltaTable

        from cdc_assets.engine.landing import registered

        batch_of = {f: b.seq for b in registered(os.path.join(self.warehouse, table)) for f in b.files}
        commits = [(int(h["cdc.batch_seq"]), h["timestamp"] / 1000.0)
                   for h in DeltaTable(os.path.join(self.warehouse, table, "target")).history(64)
                   if h.get("cdc.step") == "target" and h.get("cdc.batch_seq", "").isdigit()]
        with self.lock:
            still = []
            for f in self.waiting[table]:
                seq = batch_of.get(f.file)
                held = [at for s, at in commits if seq is not None and s >= seq]
                if held:
                    f.visible_at = min(held)
                else:
                    still.append(f)
            self.waiting[table] = still


# What a process of the `ui` tree is, by its command line: where the daemon's CPU goes.
KINDS = (("runs", ("forkserver", "multiprocessing")), ("spark", ("java",)), ("daemon", ("dagster-daemon", "daemon run")),
         ("code server", ("grpc", "code-server")), ("webserver", ("webserver",)))


def process_kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    return next((kind for kind, marks in KINDS if any(m in cmdline for m in marks)), "other")


def tree_cpu_by_kind(root: int) -> dict[str, float]:
    """User and system CPU seconds of `root` and its descendants alive now, by process kind (a
    finished child's seconds count in its parent's once it was waited for: a run's in the fork
    server's, which is of kind `runs`)."""
    total: dict[str, float] = {}
    for pid in tree_pids([root]):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
            seconds = sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
        kind = process_kind(pid)
        total[kind] = total.get(kind, 0.0) + seconds
    return total


# --- one run ----------------------------------------------------------------------------------

@dataclass
class Outcome:
    mode: str
    tables: int
    rows: int
    changes: int
    minutes: int
    interval: float = 60.0
    files: list[Landed] = field(default_factory=list)
    ui_up_s: float | None = None
    daemon_cpu_s_per_minute: list[float] = field(default_factory=list)
    cpu_s_by_process: dict[str, float] = field(default_factory=dict)  # over the whole run, by process kind
    # each minute's CPU seconds by process kind (a minute is its seconds times 60 over its length)
    cpu_s_by_process_per_minute: list[dict[str, float]] = field(default_factory=list)
    runs_by_status: dict[str, int] = field(default_factory=dict)  # the Dagster runs at the end
    error: str = ""

    def lags(self) -> list[float]:
        return [f.lag_s for f in self.files if f.lag_s is not None]

    def per_minute(self) -> list[dict]:
        out = []
        for m in range(self.minutes):
            lags = [f.lag_s for f in self.files if f.minute == m and f.lag_s is not None]
            missing = sum(1 for f in self.files if f.minute == m and f.lag_s is None)
            out.append({"minute": m, "files": len(lags) + missing, "not_visible": missing,
                        "p50_s": percentile(lags, 0.5) if lags else None, "p95_s": percentile(lags, 0.95) if lags else None,
                        "max_s": max(lags) if lags else None})
        return out

    def growth_s(self) -> float | None:
        """How much the lag grows over the run: the least-squares slope of lag against landing time,
        times the run's length."""
        points = [(f.landed_at, f.lag_s) for f in self.files if f.lag_s is not None]
        if len(points) < 2:
            return None
        x0 = min(x for x, _ in points)
        xs, ys = [x - x0 for x, _ in points], [y for _, y in points]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        var = sum((x - mx) ** 2 for x in xs)
        if var == 0:
            return 0.0
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
        return round(slope * (max(xs) - min(xs)), 2)

    def keeps_up(self) -> bool:
        lags, growth = self.lags(), self.growth_s()
        if self.error or not lags or len(lags) < len(self.files) or growth is None:
            return False
        return growth < max(KEEP_UP_GROWTH_S, 0.25 * statistics.median(lags))

    def summary(self) -> dict:
        lags = self.lags()
        return {"mode": self.mode, "tables": self.tables, "rows": self.rows, "changes_per_file": self.changes,
                "minutes": self.minutes, "interval_s": self.interval, "files": len(self.files), "visible": len(lags),
                "lag_p50_s": percentile(lags, 0.5) if lags else None, "lag_p95_s": percentile(lags, 0.95) if lags else None,
                "lag_max_s": max(lags) if lags else None, "lag_growth_s": self.growth_s(),
                "keeps_up": self.keeps_up(), "ui_up_s": self.ui_up_s,
                "daemon_cpu_s_per_minute": self.daemon_cpu_s_per_minute,
                "cpu_s_by_process": self.cpu_s_by_process,
                "cpu_s_by_process_per_minute": self.cpu_s_by_process_per_minute, "runs_by_status": self.runs_by_status, "error": self.error,
                "per_minute": self.per_minute()}


def run_one(args, mode: str, n_tables: int, cli: list[str], echo=print) -> Outcome:
    work = os.path.join(args.work, f"{mode}-x{n_tables}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    names = table_names(n_tables)
    base = write_base(os.path.join(args.work, f"base-{size_label(args.rows)}.parquet"), args.rows, args.seed)
    echo(f"{mode}, {n_tables} tables of {args.rows:,} rows: importing and cloning ...", flush=True)
    config = prepare(work, base, names, mode, args.parallel, cli)
    outcome = Outcome(mode, n_tables, args.rows, args.changes, args.minutes, args.interval)
    ui = Ui(cli, config, work, os.path.join(work, "ui.log"), spark=not args.no_spark)
    watcher = Watcher(os.path.join(work, "warehouse"))
    try:
        outcome.ui_up_s = ui.wait_ready()
        if mode == "sensors":
            ui.dagster("sensor", "start", "--start-all")
            ui.dagster("sensor", "stop", ALL_TABLES_SENSOR)
        elif mode == "one-sensor":
            ui.dagster("sensor", "start", ALL_TABLES_SENSOR)
        else:
            ui.dagster("schedule", "start", f"{GROUP}_cycle_schedule")
        echo(f"  ui up in {outcome.ui_up_s} s; {mode} on; landing {args.minutes} minute(s) ...", flush=True)
        # every file is generated before the clock starts, so landing one costs a write and a rename
        payloads = {(m, i): datastream_lines(changes(args.rows, args.changes, "W2", args.seed + 1000 * i + m),
                                             1 + m * args.changes)
                    for m in range(args.minutes) for i in range(n_tables)}
        every = args.interval
        schedule = sorted((m * every + i * every / n_tables, m, i) for m in range(args.minutes) for i in range(n_tables))
        start = time.time() + 2.0
        kinds_at = tree_cpu_by_kind(ui.proc.pid)
        cpu_at, cpu, minute_kinds = start, sum(kinds_at.values()), kinds_at
        for offset, m, i in schedule:
            while time.time() < start + offset:
                watcher.poll()
                time.sleep(min(POLL_SECONDS, max(0.0, start + offset - time.time())))
                if time.time() - cpu_at >= 60:
                    now_kinds = tree_cpu_by_kind(ui.proc.pid)
                    now_cpu, scale = sum(now_kinds.values()), 60 / (time.time() - cpu_at)
                    outcome.daemon_cpu_s_per_minute.append(round((now_cpu - cpu) * scale, 1))
                    outcome.cpu_s_by_process_per_minute.append(
                        {k: round((v - minute_kinds.get(k, 0.0)) * scale, 1) for k, v in sorted(now_kinds.items())})
                    cpu_at, cpu, minute_kinds = time.time(), now_cpu, now_kinds
            now = time.time()
            rel = land(os.path.join(work, "landing"), names[i], m, payloads.pop((m, i)), now)
            f = Landed(names[i], m, rel, time.time())
            outcome.files.append(f)
            watcher.add(f)
        drain_until = time.time() + args.drain
        while watcher.pending() and time.time() < drain_until:
            watcher.poll()
            time.sleep(POLL_SECONDS)
        watcher.poll()
        if watcher.pending():
            outcome.error = f"{watcher.pending()} file(s) not in their target {args.drain:g} s after the last landing"
        kinds = tree_cpu_by_kind(ui.proc.pid)
        outcome.cpu_s_by_process = {k: round(v - kinds_at.get(k, 0.0), 1) for k, v in sorted(kinds.items())}
        outcome.runs_by_status = runs_by_status(os.path.join(work, "dagster_home"))
    except (subprocess.CalledProcessError, SystemExit, OSError) as e:
        outcome.error = f"{type(e).__name__}: {e}"
    finally:
        ui.stop()
    s = outcome.summary()
    echo(f"  {mode} x{n_tables}: lag p50 {s['lag_p50_s']} s, p95 {s['lag_p95_s']} s, max {s['lag_max_s']} s, "
         f"growth over the run {s['lag_growth_s']} s: {'keeps up' if s['keeps_up'] else 'does NOT keep up'}"
         + (f" ({outcome.error})" if outcome.error else ""), flush=True)
    echo(f"  CPU seconds by process: {outcome.cpu_s_by_process}; runs by status: {outcome.runs_by_status}", flush=True)
    if not args.keep:
        shutil.rmtree(os.path.join(work, "warehouse"), ignore_errors=True)
    return outcome


def runs_by_status(home: str) -> dict[str, int]:
    """The Dagster runs of the benchmark's home by status, read from its run storage (no Dagster here)."""
    import sqlite3

    db = os.path.join(home, "history", "runs.db")
    if not os.path.exists(db):
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())


# --- output -----------------------------------------------------------------------------------

def write_outputs(outcomes: list[Outcome], figures: Figures, command: str) -> list[str]:
    results = [o.summary() for o in outcomes]
    stops = {}
    for mode in sorted({o.mode for o in outcomes}):
        failing = sorted(o.tables for o in outcomes if o.mode == mode and not o.keeps_up())
        stops[mode] = failing[0] if failing else None
    paths = [figures.write_json("continuous.json", {"cpus": os.cpu_count(), "stops_keeping_up_at": stops,
                                                    "keep_up_rule": f"every file visible, and lag growth over the "
                                                                    f"run < max({KEEP_UP_GROWTH_S:g} s, median/4)",
                                                    "runs": results}, command=command)]
    rows = [[o.mode, o.tables, f.table, f.minute, f.file, round(f.landed_at, 3),
             None if f.visible_at is None else round(f.visible_at, 3), f.lag_s] for o in outcomes for f in o.files]
    paths.append(figures.write_csv("continuous.csv", ["mode", "tables", "table", "minute", "file", "landed_at",
                                                      "visible_at", "lag_s"], rows))
    paths.append(write_plot(outcomes, figures.path("continuous.png")))
    return paths


def write_plot(outcomes: list[Outcome], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for o in outcomes:
        if not o.files:
            continue
        t0 = min(f.landed_at for f in o.files)
        pts = sorted(((f.landed_at - t0) / 60, f.lag_s) for f in o.files if f.lag_s is not None)
        label = f"{o.mode}, {o.tables} tables" + ("" if o.keeps_up() else " (not keeping up)")
        dots = ax.scatter([x for x, _ in pts], [y for _, y in pts], s=6, alpha=0.35)
        per = [p for p in o.per_minute() if p["p95_s"] is not None]
        ax.plot([(p["minute"] + 0.5) * o.interval / 60 for p in per], [p["p95_s"] for p in per],
                color=dots.get_facecolor()[0][:3], label=label + ": per-minute p95")
    ax.set_xlabel("minutes since the first landing")
    ax.set_ylabel("landed to visible, s")
    ax.set_ylim(bottom=0)
    ax.set_title("Landed-to-visible lag per file (dots) over a continuous run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def resummarize(folder: str) -> list[dict]:
    """Recomputes the lag percentiles of a continuous.json (each run's and each minute's) from the
    per-file lags recorded beside it in continuous.csv, with `percentile` (no new measurement; the
    file's command, commit and time stay the recorded ones), saying so in the file."""
    with open(os.path.join(folder, "continuous.csv"), newline="", encoding="utf-8") as fh:
        files = list(csv.DictReader(fh))
    path = os.path.join(folder, "continuous.json")
    with open(path, encoding="utf-8") as fh:
        figures = json.load(fh)
    for run in figures["runs"]:
        mine = [f for f in files if f["mode"] == run["mode"] and int(f["tables"]) == run["tables"] and f["lag_s"]]
        lags = [float(f["lag_s"]) for f in mine]
        if lags:
            run["lag_p50_s"], run["lag_p95_s"] = percentile(lags, 0.5), percentile(lags, 0.95)
        for minute in run.get("per_minute", []):
            in_minute = [float(f["lag_s"]) for f in mine if int(f["minute"]) == minute["minute"]]
            if in_minute:
                minute["p50_s"], minute["p95_s"] = percentile(in_minute, 0.5), percentile(in_minute, 0.95)
    figures["summary_note"] = ("the lag percentiles (each run's lag_p50_s and lag_p95_s, each minute's p50_s and "
                               "p95_s) were recomputed from continuous.csv's recorded lag_s by `python -m "
                               "cdc_assets_tests.benchmarks.continuous --resummarize FOLDER`: p50 the median, p95 "
                               "interpolated between the two nearest lags (the measurement is the recorded one)")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2)
        fh.write("\n")
    return figures["runs"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.continuous", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", default="65", help="table count, or a comma list run in turn (default 65)")
    ap.add_argument("--rows", type=parse_size, default=1_000_000, help="rows per table (default 1M)")
    ap.add_argument("--changes", type=int, default=200, help="changes per file (default 200)")
    ap.add_argument("--minutes", type=int, default=20, help="minutes of landing, a file per table each (default 20)")
    ap.add_argument("--modes", default=",".join(MODES), help="sensors, one-sensor, group, or a list (default all)")
    ap.add_argument("--interval", type=float, default=60.0,
                    help="seconds between two files of a table (default 60: a 'minute' below is one such round)")
    ap.add_argument("--parallel", type=int, default=2, help="the group's `parallel:` (default 2)")
    ap.add_argument("--drain", type=float, default=300.0,
                    help="seconds the last files may take after the last landing (default 300)")
    ap.add_argument("--no-spark", action="store_true", help="`cdc-assets ui --no-spark` (no Spark Connect server)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--keep", action="store_true", help="keep each run's warehouse")
    ap.add_argument("--work", help="generated data, warehouses and Dagster homes (default: a new /tmp/continuous-*)")
    ap.add_argument("--out", default="docs/figures", help="where continuous.json, .csv and .png go")
    ap.add_argument("--resummarize", metavar="FOLDER", help="measure nothing: recompute the lag percentiles of "
                    "FOLDER/continuous.json from the lags in FOLDER/continuous.csv")
    add_force_flag(ap)
    args = ap.parse_args(argv)
    if args.resummarize:
        return args
    args.table_counts = [int(x) for x in args.tables.split(",") if x.strip()]
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.mode_list if m not in MODES]
    if unknown or not args.mode_list or not args.table_counts or min(args.table_counts) < 1:
        ap.error(f"--modes takes {' and/or '.join(MODES)}; --tables positive counts")
    args.work = args.work or tempfile.mkdtemp(prefix="continuous-")
    return args


def run(args, echo=print) -> list[Outcome]:
    cli = [os.path.join(os.path.dirname(sys.executable), "cdc-assets")]
    os.makedirs(args.work, exist_ok=True)
    return [run_one(args, mode, n, cli, echo) for mode in args.mode_list for n in args.table_counts]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.resummarize:
        for run in resummarize(args.resummarize):
            print(f"{run['mode']} x{run['tables']}: lag p50 {run['lag_p50_s']} s, p95 {run['lag_p95_s']} s")
        return 0
    figures = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    outcomes = run(args, echo=lambda *a, **k: print(*a, **k))
    command = ".venv/bin/python -m cdc_assets_tests.benchmarks.continuous " + " ".join(argv or sys.argv[1:])
    for p in write_outputs(outcomes, figures, command):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
