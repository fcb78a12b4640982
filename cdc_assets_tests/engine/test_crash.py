"""Crash anywhere, lose nothing: SIGKILL `cdc-assets run` and the landing sensor's tick at named
points and at random moments.

Each kill is followed by further runs; the warehouse must end exactly as one clean run leaves it:
no batch lost, none applied or registered twice, quarantine complete, target equal. After every
kill, each table read by delta-rs must be a state that a clean run passes through (its state after
batch b-1 or after batch b), and every file its log references must exist; files of killed writes
may stay on disk, but no reader's file list holds them. A reader thread polls the targets all
through the killed runs and must only ever see a clean run's states.

Runs go against a Spark Connect server started once for this module. Killed runs are forked from a
server that has imported Dagster, PySpark and delta-rs once (`crash_worker.py`): each is a fresh
process that runs the `cdc-assets` command (or one sensor tick) and dies by SIGKILL, but costs
seconds of work instead of seconds of imports. The clean reference runs, the run that finishes
each batch after the named kills and the concurrent runs are the real `cdc-assets run` command.

Kill points are counted as distinct per (point, batch): the same point at another batch finds the
warehouse in another state (first write of a table, appends, a merge into an existing target).
"""
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdc_assets.cli.generate import write_feed
from cdc_assets.defs.pool_watch import ensure_settings
from cdc_assets_tests.support.ports import free_port

TABLE = "CRASHY"
# Where a run can die, in the order a run reaches them (faults.point in the code); each is tried at
# each batch. Most are inside a step, holding the table's pool; `run.staged` is between steps
# (the staging step's and the target step's).
POINTS = [
    "register.before_commit", "register.committed",
    "changes.parsed", "quarantine.before_commit", "quarantine.committed",
    "changes.before_commit", "changes.committed",
    "staging.before_commit", "staging.committed", "run.staged",
    "target.computed", "target.committed", "run.table_done",
]
# The tables a run writes, in that order. `<table>.file_created` is no point in the code: the run is
# killed the moment delta-rs creates a data file of the table (crash_worker's inotify watch), i.e.
# inside the write, after its data files began and before its commit. A kill that came after the
# commit (a heavily loaded machine can let the commit win the race) is undone by restoring the
# warehouse as it was before the try, and tried again: every such kill must leave an uncommitted file.
WRITES = ["batches", "quarantine", "changes", "staging", "target"]
WRITE_TRIES = 3
# Where a sensor tick (the code server evaluating it) or the daemon acting on it can die. Only the
# tick that registers the batch reaches the second and third; they are tried in turn per batch.
SENSOR_POINTS = ["register.before_commit", "register.committed", "sensor.batch_registered",
                 "sensor.before_result", "daemon.partitions_added"]
BATCHES = 3
KILLED = -signal.SIGKILL
# A run not done after this many seconds is taken as hung (waiting for a pool forever) and fails
# the test instead of blocking it; far above what a run takes on a loaded machine.
HANG = 900
COLUMNS = {
    "batches": ["batch_seq", "file"],
    "changes": ["_cdc_batch_seq", "_cdc_event_id"],
    "staging": ["_cdc_batch_seq", "_cdc_key", "_cdc_order"],
    "quarantine": ["_cdc_batch_seq", "_cdc_file", "_cdc_line"],
    "target": ["_cdc_key", "_cdc_order", "region", "amount", "status", "customer"],
}


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory):
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOG_DIR=str(work), SPARK_PID_DIR=str(work),
               SPARK_IDENT_STRING=f"cdc{port}", PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    subprocess.run(["bash", os.path.join(home, "sbin", "start-connect-server.sh"), "--master", "local[2]",
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false"],
                   env=env, check=True, capture_output=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(1)
    else:
        pytest.fail("Spark Connect server did not start")
    yield f"sc://127.0.0.1:{port}"
    subprocess.run(["bash", os.path.join(home, "sbin", "stop-connect-server.sh")], env=env, capture_output=True)


class Worker:
    """Client of `crash_worker.py`: each call forks one child process, which may be killed."""

    def __init__(self, work: str, remote: str):
        self.work, self.remote, self.n = work, remote, 0
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "cdc_assets_tests.engine.crash_worker"], cwd=repo,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _call(self, request: dict, home: str | None, crash_at: str | None) -> tuple[int, dict | None]:
        self.n += 1
        out, result = os.path.join(self.work, f"out-{self.n}.log"), os.path.join(self.work, f"result-{self.n}.json")
        env = dict(os.environ, SPARK_REMOTE=self.remote)
        env.pop("DAGSTER_HOME", None)
        env.pop("CDC_ASSETS_CRASH_AT", None)
        if home:
            env["DAGSTER_HOME"] = home
        if crash_at:
            env["CDC_ASSETS_CRASH_AT"] = crash_at
        self.proc.stdin.write(json.dumps({**request, "env": env, "out": out, "result": result, "hang_after": HANG})
                              + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the crash worker died"
        answer = json.loads(line)
        rc = answer["rc"]
        if answer["hung"]:
            with open(out, errors="replace") as fh:
                pytest.fail(f"a run hung for {HANG} s; its output ends:\n{fh.read()[-3000:]}")
        if rc not in (0, KILLED):
            with open(out, errors="replace") as fh:
                print(fh.read()[-3000:])
        data = None
        if rc == 0 and os.path.exists(result):
            with open(result) as fh:
                data = json.load(fh)
        return rc, data

    def run(self, cfg: str, home: str | None = None, crash_at: str | None = None, kill_after: float | None = None,
            kill_on_create: str | None = None) -> int:
        """`cdc-assets run --config cfg` in a fresh process, killed at `crash_at`, after `kill_after`
        seconds, or when a data file is created in the Delta table folder `kill_on_create`."""
        return self._call({"cmd": "cli", "argv": ["run", "--config", cfg], "kill_after": kill_after,
                           "kill_on_create": kill_on_create}, home, crash_at)[0]

    def tick(self, cfg: str, home: str, crash_at: str | None = None) -> tuple[int, dict | None]:
        return self._call({"cmd": "tick", "config": cfg, "table": TABLE}, home, crash_at)

    def settle(self, cfg: str, home: str) -> tuple[int, dict | None]:
        return self._call({"cmd": "settle", "config": cfg, "table": TABLE}, home, None)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def worker(tmp_path_factory, spark_connect):
    w = Worker(str(tmp_path_factory.mktemp("worker")), spark_connect)
    yield w
    w.close()


def _feed(root) -> str:
    feed = os.path.join(root, "feed")
    write_feed(feed, TABLE, "oracle", changes=900, inserts=45, updates=40, deletes=15, seed=21,
               batches=BATCHES, files_per_batch=2, duplicates=5, delays=10)
    for b in range(1, BATCHES + 1):  # one bad line per batch, so quarantine is on the path too
        with open(os.path.join(feed, "landing", TABLE, f"batch-{b:04d}", "part-0001.jsonl"), "a") as fh:
            fh.write('{"truncated": \n')
    return feed


def _warehouse(root, feed) -> str:
    os.makedirs(os.path.join(root, "landing", TABLE), exist_ok=True)
    cfg = os.path.join(root, "cdc.yaml")
    with open(cfg, "w") as fh:
        json.dump({"warehouse": "./warehouse", "landing": "./landing",
                   "tables": [{"name": TABLE, "keys": ["id"], "format": "datastream-json",
                               "partition_by": ["region"]}]}, fh)
    return cfg


def _dagster_home(root) -> str:
    """A persistent instance with the settings real use has (the table's pool limited to one step):
    killed runs and ticks leave their run and partition records half-done too, and their place in
    the pool taken."""
    home = os.path.join(root, "dagster_home")
    ensure_settings(home)
    return home


def _land(feed, root, b):
    shutil.copytree(os.path.join(feed, "landing", TABLE, f"batch-{b:04d}"),
                    os.path.join(root, "landing", TABLE, f"batch-{b:04d}"))


def _run(cli, cfg, remote, home=None) -> int:
    """The real `cdc-assets run` command, to its end."""
    env = dict(os.environ, SPARK_REMOTE=remote)
    env.pop("DAGSTER_HOME", None)
    env.pop("CDC_ASSETS_CRASH_AT", None)
    if home:
        env["DAGSTER_HOME"] = home
    proc = subprocess.run(cli + ["run", "--config", cfg], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=HANG)
    if proc.returncode != 0:
        print(proc.stdout.decode(errors="replace")[-3000:])
    return proc.returncode


def _ever_added(table_path: str) -> set:
    """Every data file some commit of the log added (later commits may have removed it)."""
    out, log = set(), os.path.join(table_path, "_delta_log")
    for name in os.listdir(log) if os.path.isdir(log) else []:
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(log, name)) as fh:
                for line in fh:
                    action = json.loads(line) if line.strip() else {}
                    if "add" in action:
                        out.add(os.path.join(table_path, unquote(unquote(action["add"]["path"]))))
    assert not [n for n in os.listdir(log) if n.endswith(".checkpoint.parquet")] if os.path.isdir(log) else True
    return out


def _snapshot(table_path: str, columns) -> tuple[list | None, set, set]:
    """What a delta-rs reader sees now: (sorted rows or None when there is no table yet, the files
    it reads, every file on disk outside the log). Asserts that every file it reads exists."""
    on_disk = set()
    for folder, dirs, files in os.walk(table_path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        on_disk |= {os.path.join(folder, f) for f in files}
    try:
        dt = DeltaTable(table_path)
    except TableNotFoundError:
        return None, set(), on_disk
    read = {u.replace("file://", "") for u in dt.file_uris()}
    rows = sorted(tuple(str(r[c]) for c in columns) for r in dt.to_pyarrow_table(columns=columns).to_pylist())
    missing = [f for f in read if not os.path.exists(f)]
    assert not missing, f"{table_path}: the log references files that do not exist: {missing[:3]}"
    return rows, read, on_disk


def _state(root) -> dict:
    wh = os.path.join(root, "warehouse", TABLE)
    return {name: _snapshot(os.path.join(wh, name), cols)[0] for name, cols in COLUMNS.items()}


class Orphans:
    """Files on disk that no commit ever added (left by killed writes): counted, never read."""

    def __init__(self):
        self.files = set()

    def check(self, root, clean: list[dict], b: int, what: str) -> set:
        """Each table is now in the state a clean run leaves after batch b-1 or after batch b, reading
        only files its log holds; returns the names of the tables in which this kill left orphans."""
        wh, before, left = os.path.join(root, "warehouse", TABLE), set(self.files), set()
        for name, cols in COLUMNS.items():
            path = os.path.join(wh, name)
            rows, read, on_disk = _snapshot(path, cols)
            added = _ever_added(path)
            assert read <= added and read <= on_disk
            self.files |= on_disk - added
            if (on_disk - added) - before:
                left.add(name)
            assert rows in (clean[b - 1][name], clean[b][name]), \
                f"after {what}: {name} is in no state a clean run passes through at batch {b}"
        return left


class TargetReader(threading.Thread):
    """Polls the `target` of some warehouses with delta-rs while runs are killed: each snapshot must
    be one of the states `allowed[root]` (a clean run's target after batch b-1 or after batch b)."""

    def __init__(self, roots, interval: float = 0.2):
        super().__init__(daemon=True)
        self.paths = {root: os.path.join(root, "warehouse", TABLE, "target") for root in roots}
        self.interval, self.allowed = interval, {}
        self.stop, self.reads, self.versions, self.errors = threading.Event(), 0, set(), []
        self.lock, self.skipped = threading.Lock(), set()

    @contextlib.contextmanager
    def paused(self, root):
        """No read of `root` while the test itself replaces its warehouse (a state no run made)."""
        with self.lock:
            self.skipped.add(root)
        try:
            yield
        finally:
            with self.lock:
                self.skipped.discard(root)

    def _read(self, root, path):
        allowed = self.allowed.get(root, [])
        try:
            try:
                dt = DeltaTable(path)
            except TableNotFoundError:
                rows, version = None, None
            else:
                version = dt.version()
                rows = sorted(tuple(str(r[c]) for c in COLUMNS["target"])
                              for r in dt.to_pyarrow_table(columns=COLUMNS["target"]).to_pylist())
                missing = [u for u in dt.file_uris() if not os.path.exists(u.replace("file://", ""))]
                if missing:
                    self.errors.append(f"{path} v{version}: files missing {missing[:2]}")
        except Exception as e:  # noqa: BLE001 - a reader failing mid-commit is a finding too
            self.errors.append(f"{path}: read failed: {type(e).__name__}: {e}")
            return
        self.reads += 1
        if version is not None:
            self.versions.add((root, version))
        if rows not in allowed:
            self.errors.append(f"{path} v{version}: {len(rows or [])} rows, not a state of a clean run")

    def run(self):
        while not self.stop.wait(self.interval):
            for root, path in self.paths.items():
                with self.lock:
                    if root not in self.skipped:
                        self._read(root, path)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spark_connect, cli):
    """The feed and what one clean run leaves after each batch (state 0: nothing yet)."""
    root = str(tmp_path_factory.mktemp("reference"))
    feed = _feed(root)
    clean_root = os.path.join(root, "clean")
    cfg = _warehouse(clean_root, feed)
    states = [_state(clean_root)]
    for b in range(1, BATCHES + 1):
        _land(feed, clean_root, b)
        assert _run(cli, cfg, spark_connect) == 0
        states.append(_state(clean_root))
    assert len(states[-1]["quarantine"]) == BATCHES
    assert len({json.dumps(s["target"]) for s in states}) == BATCHES + 1  # every batch changes target
    return feed, states


FIGURES_COMMAND = "./bootstrap.sh test cdc_assets_tests/engine/test_crash.py --figures docs/figures"


def test_killed_runs_end_as_one_clean_run(tmp_path, reference, worker, spark_connect, cli, long_run, figures):
    """Three warehouses fed the same batches. In the first, a run is killed at each named point in
    turn, then the real command finishes the batch; in the second, runs are killed inside delta-rs
    writes; in the third, at random moments. After every kill every table is a clean run's state,
    and a reader polling the three targets only ever sees a clean run's states."""
    feed, clean = reference
    roots = {w: str(tmp_path / w) for w in ("named", "writes", "random")}
    cfgs = {w: _warehouse(r, feed) for w, r in roots.items()}
    homes = {w: _dagster_home(r) for w, r in roots.items()}
    rng = random.Random(5)
    named, in_write, late, randoms, tried, orphaned = [], [], [], 0, 0, []
    orphans, reader = Orphans(), TargetReader(list(roots.values()), interval=0.25)
    reader.allowed = {r: [clean[0]["target"]] for r in roots.values()}
    reader.start()
    t0 = time.time()
    try:
        for b in range(1, BATCHES + 1):
            reader.allowed = {r: [clean[b - 1]["target"], clean[b]["target"]] for r in roots.values()}
            for r in roots.values():
                _land(feed, r, b)

            # Every named point at every batch, in the order a run reaches them: each kill leaves
            # the batch a step further, so the next point is reached by the next run.
            root, cfg, home = roots["named"], cfgs["named"], homes["named"]
            for p in POINTS:
                tried += 1
                rc = worker.run(cfg, home, crash_at=p)
                assert rc in (0, KILLED)
                if rc == KILLED:
                    named.append(f"{p}@batch{b}")
                orphaned += [f"{t} by {p}@batch{b}" for t in orphans.check(root, clean, b, f"{p}@batch{b}")]
            assert _run(cli, cfg, spark_connect, home) == 0  # the real command finishes the batch
            assert _state(root) == clean[b]

            # Inside the writes: killed once the table's first new data file exists. The normal run
            # takes each table once over the batches, --long each at every batch.
            root, cfg, home = roots["writes"], cfgs["writes"], homes["writes"]
            for t in (WRITES if long_run else WRITES[b - 1::BATCHES]):
                point = f"{t}.file_created@batch{b}"
                saved = os.path.join(str(tmp_path), "before-write")
                for _attempt in range(WRITE_TRIES):
                    shutil.rmtree(saved, ignore_errors=True)
                    shutil.copytree(root, saved, symlinks=True)
                    known_orphans = set(orphans.files)
                    tried += 1
                    rc = worker.run(cfg, home, kill_on_create=os.path.join(root, "warehouse", TABLE, t))
                    assert rc in (0, KILLED)
                    left = orphans.check(root, clean, b, point)
                    if rc == KILLED and t in left:
                        break
                    # the commit won the race (or the run ended): undo the try and kill it again
                    late.append(point)
                    orphans.files = known_orphans
                    with reader.paused(root):
                        shutil.rmtree(root)
                        shutil.copytree(saved, root, symlinks=True)
                if rc == KILLED and t in left:
                    in_write.append(point)
                    orphaned += [f"{x} by {point}" for x in left]
            assert worker.run(cfg, home) == 0
            assert _state(root) == clean[b]

            # and at random moments of fresh runs of the batch, wherever they happen to be
            root, cfg, home = roots["random"], cfgs["random"], homes["random"]
            for _ in range(4 if long_run else 2):
                tried += 1
                rc = worker.run(cfg, home, kill_after=rng.uniform(0.3, 6.0))
                assert rc in (0, KILLED)
                randoms += rc == KILLED
                orphaned += [f"{t} by random@batch{b}" for t in orphans.check(root, clean, b, f"random@batch{b}")]
            assert worker.run(cfg, home) == 0
            assert _state(root) == clean[b]
    finally:
        reader.stop.set()
        reader.join(timeout=30)
    figures_of_run = {
        "named_points_killed": len(named), "named_points": len(POINTS), "batches": BATCHES,
        "in_write_kills": len(in_write), "in_write_tries_undone": len(late),
        "distinct_kill_points": len(named) + len(in_write),
        "random_kills": randoms, "tries": tried,
        "orphan_files": len(orphans.files), "orphans_left_in": orphaned,
        "reader_snapshots": reader.reads, "reader_table_versions": len(reader.versions),
        "reader_errors": len(reader.errors), "seconds": round(time.time() - t0),
        "kill_points": named + in_write,
    }
    print(f"\ncrash test: {json.dumps(figures_of_run)}")
    if figures:
        figures.write_json("crash_runs.json", figures_of_run, command=FIGURES_COMMAND)
    assert reader.errors == []
    assert reader.reads > 0
    # every named point was reached, and killed, at every batch: each kill leaves the batch one step
    # further, so the next run reaches the next point
    assert named == [f"{p}@batch{b}" for b in range(1, BATCHES + 1) for p in POINTS]
    # every write tried was killed inside it, leaving its uncommitted file on disk
    written = [(t, b) for b in range(1, BATCHES + 1) for t in (WRITES if long_run else WRITES[b - 1::BATCHES])]
    assert in_write == [f"{t}.file_created@batch{b}" for t, b in written]
    assert all(_state(r) == clean[-1] for r in roots.values())


def test_killed_sensor_ticks_neither_lose_nor_register_twice(tmp_path, reference, worker, figures):
    """The sensor registers each batch in its tick: a tick killed before, during or after the
    ledger commit, or the daemon killed before it launches the requested runs, and then one clean
    tick with the runs it asks for, must leave each batch registered once, its runs launched once,
    and the warehouse as one clean run leaves it."""
    feed, clean = reference
    root = str(tmp_path / "ticks")
    cfg = _warehouse(root, feed)
    home = _dagster_home(root)
    orphans, killed, completed, unreached = Orphans(), [], [], []
    t0 = time.time()
    for b in range(1, BATCHES + 1):
        _land(feed, root, b)
        batch = f"b{b:06d}"
        # the registering tick dies inside the ledger commit or just after it, in turn
        order = list(SENSOR_POINTS)
        if b % 2 == 0:
            order[1], order[2] = order[2], order[1]
        # register.committed and sensor.batch_registered are reached only by the tick that
        # registers the batch; it dies at the one tried second, so the tick trying the third finds
        # the batch registered, never reaches it and completes
        unreached.append(f"{order[2]}@batch{b}")
        for p in order:
            rc, data = worker.tick(cfg, home, crash_at=p)
            assert rc in (0, KILLED)
            if rc == KILLED:
                killed.append(f"{p}@batch{b}")
            else:  # not reached: the batch was registered by an earlier tick, this one completed
                completed.append(f"{p}@batch{b}")
                assert [(r["job"], r["partition"]) for r in data["requests"]] == [(f"{TABLE}_ingest_job", batch)]
            orphans.check(root, clean, b, f"a tick killed at {p}@batch{b}")
        rc, data = worker.settle(cfg, home)
        assert rc == 0, data
        assert [(r["job"], r["partition"]) for r in data["launched"]] == \
            [(f"{TABLE}_ingest_job", batch), (f"{TABLE}_apply_job", None)]
        assert data["partitions"] == [f"b{i:06d}" for i in range(1, b + 1)]
        assert _state(root) == clean[b]
    figures_of_run = {"kill_points": len(killed), "points": len(SENSOR_POINTS), "batches": BATCHES,
                      "not_reached": completed, "seconds": round(time.time() - t0), "killed": killed}
    print(f"\nsensor crash test: {json.dumps(figures_of_run)}")
    if figures:
        figures.write_json("crash_sensor_ticks.json", figures_of_run, command=FIGURES_COMMAND)
    assert completed == unreached
    assert killed == [f"{p}@batch{b}" for b in range(1, BATCHES + 1) for p in SENSOR_POINTS
                      if f"{p}@batch{b}" not in unreached]


def test_concurrent_runs_neither_lose_nor_double_a_batch(tmp_path, reference, spark_connect, cli):
    """Two `run`s of the same table at once (as the sensor and a user would): one applies, one waits
    on the table lock and then finds the work done; the end state equals one clean run's."""
    feed, clean = reference
    root = str(tmp_path / "twice")
    cfg = _warehouse(root, feed)
    env = dict(os.environ, SPARK_REMOTE=spark_connect)
    env.pop("DAGSTER_HOME", None)
    env.pop("CDC_ASSETS_CRASH_AT", None)
    for b in range(1, BATCHES + 1):
        _land(feed, root, b)
        procs = [subprocess.Popen(cli + ["run", "--config", cfg], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for _ in range(2)]
        codes = [p.wait(timeout=HANG) for p in procs]
        assert codes == [0, 0], [p.stdout.read().decode(errors="replace")[-2000:] for p in procs]
        assert _state(root) == clean[b]
    assert sorted({b for b, _ in _state(root)["batches"]}) == [str(b) for b in range(1, BATCHES + 1)]
