"""cdc_assets side by side with a plain delta-rs MERGE on the same data (issue 7, section 4).

    .venv/bin/python -m cdc_assets_tests.benchmarks.bench            # W1, W2 at 200k, flat: minutes
    .venv/bin/python -m cdc_assets_tests.benchmarks.bench --long     # the issue's sizes, every case and layout
    .venv/bin/python -m cdc_assets_tests.benchmarks.bench --sizes 200k,1M --cases W2,many --tables 65 \
        --layouts flat,partitioned --step-timeout 600 --out docs/figures
    .venv/bin/python -m cdc_assets_tests.benchmarks.bench --cases F1 --sizes 1M,10M --out docs/figures

Workloads (generated deterministically from --seed):
  base  id int64 0..N-1, customer (10,000 values), amount decimal(12,2), status (5 values),
        region (8 values, a hash of id, so an update keeps its region), seq 0; one Parquet file
        with 1M-row row groups in id order (cdc.yaml's base_snapshot names one file)
  W1    100,000 changes into 5M rows (--long; else N/50 changes into --w1-size rows):
        40% inserts of new ids, 40% updates and 20% deletes of random existing ids
  W2    1,000 changes into each of --sizes: 20% inserts of new ids at the end, 70% updates and
        10% deletes, all within the top 1% of ids
  many  --tables tables of --table-size rows sharing one export (imported once, its folder copied
        to the other names), one W2-like batch each (its own seed), in one `cdc-assets run`
  catchup  a catch-up on the executors: --catchup-changes pending changes with W1's mix into
        --catchup-size rows (default 200k into 2M; --long 5M into 50M), the product's import, whole
        builds and incremental apply all sent to Spark (CDC_ASSETS_LOCAL_BUILD_ROWS and
        CDC_ASSETS_LOCAL_APPLY_ROWS at 0); with --master the standalone cluster's executors do the
        work and --run-driver-memory / --driver-memory cap the drivers (the issue: 1g)
Each workload runs flat and partitioned by region (--layouts).
  F1    what each source feature costs at each of --sizes, against a plain apply of the same
        changes, all in one run, flat (features.csv, features.md): a 1,000-change W2 batch applied
        plainly; the same batch on a `partial_updates: true` table with its updates' customer,
        amount and status null (each keeps its stored value); a truncate (one `options.truncates`
        row ranked below the batch) with the same 1,000 changes above it; and a `format: snapshot`
        export of the table with 1 % of it changed (W1's mix) against a plain apply of that 1 %.
        Each `cdc-assets run` is a fresh process; its target is compared by value with the
        expected table, built here from the data.

cdc_assets is driven only as a user drives it: a cdc.yaml (format changeset, Parquet change files),
`cdc-assets run` in a fresh process (cold) and again with SPARK_REMOTE pointing at a Spark Connect
server started once (warm); the result is read only from <warehouse>/<TABLE>/target as a Delta table.
delta-rs runs `DeltaTable.merge` on t.id = s.id (plain) and with a pruning predicate (pruned: the
batch's smallest id and, partitioned, the touched regions), each in a fresh process.
Every product result is compared by value with the merge's. Seconds are printed, never asserted:
the machine is shared and noisy, so compare the ratio against the peer measured in the same run.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_assets_tests.figures import Figures, add_force_flag
from cdc_assets_tests.support.ports import free_port

TABLE = "BENCH"
FILE_ROWS = 1_000_000
AMOUNT = pa.decimal128(12, 2)
SCHEMA = pa.schema([("id", pa.int64()), ("customer", pa.string()), ("amount", AMOUNT),
                    ("status", pa.string()), ("region", pa.string()), ("seq", pa.int64())])
CHANGE_SCHEMA = SCHEMA.append(pa.field("op", pa.string()))
COLUMNS = SCHEMA.names
CUSTOMERS = pa.array([f"cust{i:05d}" for i in range(10_000)])
STATUSES = pa.array(["new", "paid", "shipped", "returned", "cancelled"])
REGIONS = pa.array(["africa", "asia", "europe", "middle_east", "north_america", "oceania", "south_america", "antarctica"])
CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
PRODUCT, DELTA, PRUNED = "cdc_assets", "delta-rs", "delta-rs pruned"


# --- data -------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 200k, 1M, 50M)")
    return int(float(m.group(1)) * {"": 1, "k": 1_000, "m": 1_000_000}[m.group(2).lower()])


def size_label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def region_index(ids: np.ndarray) -> np.ndarray:
    # Fibonacci hashing, top 3 bits: fixed per id, so an update lands in the row's own region.
    return ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(61)).astype(np.int64)


def decimal_cents(cents: np.ndarray) -> pa.Array:
    """Exact decimal(12,2) values from integer cents: the 128-bit unscaled values, built directly."""
    words = np.empty((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    words[:, 1] = np.where(cents < 0, -1, 0)
    return pa.Array.from_buffers(AMOUNT, len(cents), [None, pa.py_buffer(words.tobytes())])


def rows(ids: np.ndarray, rng: np.random.Generator, seq) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "customer": CUSTOMERS.take(pa.array(rng.integers(0, len(CUSTOMERS), n))),
        "amount": decimal_cents(rng.integers(0, 100_000_000, n)),  # 0.00 .. 999,999.99
        "status": STATUSES.take(pa.array(rng.integers(0, len(STATUSES), n))),
        "region": REGIONS.take(pa.array(region_index(ids))),
        "seq": pa.array(np.broadcast_to(np.asarray(seq, dtype=np.int64), (n,)), pa.int64()),
    }, schema=SCHEMA)


def write_base(file_path: str, n: int, seed: int) -> str:
    """N rows in id order, one row group per 1M rows; each group has its own seed, so a size's
    rows do not depend on how it is chunked and a larger base extends a smaller one's ids."""
    if os.path.exists(file_path):
        return file_path
    tmp = file_path + ".part"
    with pq.ParquetWriter(tmp, SCHEMA) as w:
        for k in range(max(1, math.ceil(n / FILE_ROWS))):
            ids = np.arange(k * FILE_ROWS, min(n, (k + 1) * FILE_ROWS), dtype=np.int64)
            w.write_table(rows(ids, np.random.default_rng([seed, 0, k]), 0), row_group_size=FILE_ROWS)
    os.replace(tmp, file_path)
    return file_path


def changes(n: int, k: int, workload: str, seed: int) -> pa.Table:
    """One batch: each id once (delta-rs refuses duplicate source keys), in random order."""
    rng = np.random.default_rng([seed, 1 if workload == "W1" else 2, n, k])
    share = (0.4, 0.4) if workload == "W1" else (0.2, 0.7)
    n_ins, n_upd = round(k * share[0]), round(k * share[1])
    n_old = min(k - n_ins, n)
    n_ins = k - n_old
    if workload == "W1":
        old = rng.choice(n, n_old, replace=False)
    else:
        # the top 1% of ids; tiny tables widen the window so that it holds the batch
        window = min(n, max(n // 100, 2 * n_old))
        old = n - window + rng.choice(window, n_old, replace=False)
    ids = np.concatenate([np.arange(n, n + n_ins, dtype=np.int64), old.astype(np.int64)])
    ops = np.array(["I"] * n_ins + ["U"] * min(n_upd, n_old) + ["D"] * (n_old - min(n_upd, n_old)))
    order = rng.permutation(k)
    ids, ops = ids[order], ops[order]
    t = rows(ids, rng, np.arange(1, k + 1, dtype=np.int64))
    return t.append_column("op", pa.array(ops, pa.string()))


def publish(table: pa.Table, folder: str, name: str) -> None:
    """As writers must (rules.md#formats): write under a '.' name, then rename."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, "." + name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(folder, name))


# --- measuring processes ----------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_pids(roots: list[int]) -> list[int]:
    """The processes `roots` and all their descendants alive now."""
    kids, seen, stack = _children(), [], list(roots)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.append(pid)
            stack.extend(kids.get(pid, ()))
    return seen


def tree_rss(roots: list[int]) -> int:
    """Resident bytes of the processes `roots` and all their descendants (JVMs included)."""
    total = 0
    for pid in tree_pids(roots):
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


@dataclass
class Step:
    seconds: float | None = None
    peak_bytes: int = 0
    ok: bool = False
    status: str = "not run"  # ok / failed / timeout / skipped
    error: str = ""
    output: str = ""


ROOT_CAUSES = (
    r"java\.lang\.OutOfMemoryError[^\n]*",
    r"(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception))(?<!DagsterExecutionStepExecutionError)(?<!ExecutionError):[^\n]+",
)


def root_cause(output: str) -> str:
    """The line that says why: a Java OOM first, else the last named exception that is not
    Dagster's wrapper, else the product's FAILED summary line, else the last line."""
    m = re.search(ROOT_CAUSES[0], output)
    if m:
        return m.group(0).strip()[:300]
    found = [x.strip() for x in re.findall(ROOT_CAUSES[1], output)]
    if found:
        return found[-1][:300]
    failed = [ln for ln in output.splitlines() if "FAILED" in ln]
    lines = [ln for ln in output.splitlines() if ln.strip()]
    return (failed or lines or ["(no output)"])[-1].strip()[:300]


def run_measured(cmd: list[str], env: dict, timeout: float | None, log_path: str, also: tuple[int, ...] = (),
                 cwd: str | None = None) -> Step:
    """Run `cmd` in its own session, polling the memory of its tree (and of the trees `also`)."""
    step = Step()
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                step.peak_bytes = max(step.peak_bytes, tree_rss([proc.pid, *also]))
                stop.wait(0.2)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            if proc.poll() is None:  # timed out, or we are being stopped: take the child's session with us
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: JVM and Python workers included
                proc.wait()
            stop.set()
        step.seconds = round(time.perf_counter() - t0, 2)
        poller.join()
    with open(log_path, errors="replace") as fh:
        step.output = fh.read()
    if rc is None:
        step.status, step.error = "timeout", f"timed out after {timeout:.0f} s; last line: {root_cause(step.output)}"
    elif rc != 0:
        step.status, step.error = "failed", root_cause(step.output)
    else:
        step.ok, step.status = True, "ok"
    return step


def child_env(remote: str | None = None) -> dict:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.pop("SPARK_REMOTE", None)
    env.pop("DAGSTER_HOME", None)  # the work folder's own instance, beside its cdc.yaml; the warehouse says what is done
    if remote:
        env["SPARK_REMOTE"] = remote
    return env


CATCHUP = "catchup"


def product_env(case, remote: str | None = None) -> dict:
    """A product run's environment: a catch-up sends every build and apply to Spark."""
    env = child_env(remote)
    if case.workload == CATCHUP:
        env.update(CDC_ASSETS_LOCAL_BUILD_ROWS="0", CDC_ASSETS_LOCAL_APPLY_ROWS="0")
    return env


# --- the Spark Connect server for warm runs ---------------------------------------------------

class ConnectServer:
    """`start-connect-server.sh` as FIELD_NOTES describe it, with its pid file in our work folder
    so that it is stopped by its own pid."""

    def __init__(self, work: str, port: int | None = None, driver_memory: str = "2g"):
        import pyspark

        self.home = os.path.dirname(pyspark.__file__)
        self.dir = os.path.join(work, "connect")
        self.port = port or free_port()
        self.driver_memory = driver_memory
        self.pid: int | None = None
        os.makedirs(self.dir, exist_ok=True)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _env(self) -> dict:
        env = child_env()
        env.update(SPARK_HOME=self.home, SPARK_PID_DIR=self.dir, SPARK_LOG_DIR=self.dir,
                   SPARK_IDENT_STRING=f"bench{self.port}")
        return env

    def warm_up(self, timeout: float = 180) -> None:
        """One query with a Python UDF: a long-lived server has run jobs and started its Python
        workers before a batch lands, so the first warm run should not pay for that either."""
        code = ("from pyspark.sql import SparkSession; import sys; "
                f"s = SparkSession.builder.remote('{self.url}').getOrCreate(); "
                "df = s.range(1000).repartition(2).mapInArrow(lambda it: it, 'id long'); "
                "sys.exit(0 if df.count() == 1000 else 1)")
        subprocess.run([sys.executable, "-c", code], env=child_env(), timeout=timeout, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, timeout: float = 180) -> float:
        t0 = time.perf_counter()
        master = os.environ.get("CDC_ASSETS_SPARK_MASTER") or "local[2]"  # --master: a cluster's executors
        subprocess.run([os.path.join(self.home, "sbin", "start-connect-server.sh"), "--master", master,
                        "--driver-memory", self.driver_memory,
                        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                        "--conf", f"spark.connect.grpc.binding.port={self.port}",
                        "--conf", "spark.ui.enabled=false",
                        "--conf", "spark.sql.session.timeZone=UTC"],
                       env=self._env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # spark-daemon.sh names the pid file after SPARK_IDENT_STRING, which holds this server's port
        pid_files = [f for f in os.listdir(self.dir) if f.startswith(f"spark-bench{self.port}-") and f.endswith(".pid")]
        with open(os.path.join(self.dir, pid_files[0])) as fh:
            self.pid = int(fh.read().strip())
        while time.perf_counter() - t0 < timeout:
            if not os.path.exists(f"/proc/{self.pid}"):
                raise RuntimeError(f"the Spark Connect server exited; see {self.dir}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.5)
                continue
            self.warm_up(timeout)
            return round(time.perf_counter() - t0, 1)
        raise RuntimeError(f"the Spark Connect server did not answer on port {self.port} within {timeout:.0f} s")

    def stop(self) -> None:
        if self.pid is None:
            return
        subprocess.run([os.path.join(self.home, "sbin", "stop-connect-server.sh")], env=self._env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(60):
            if not os.path.exists(f"/proc/{self.pid}"):
                break
            time.sleep(0.5)
        else:
            os.kill(self.pid, signal.SIGKILL)
        self.pid = None


# --- delta-rs, the peer -----------------------------------------------------------------------

def deltars_import(table_path: str, base_file: str, partition_by: list[str]) -> None:
    """The base as a Delta table: one append per 1M-row group, so files are 1M rows in id order
    (partitioned: that group's rows of each region)."""
    from deltalake import write_deltalake

    pf = pq.ParquetFile(base_file)
    for g in range(pf.num_row_groups):
        write_deltalake(table_path, pf.read_row_group(g), mode="append", partition_by=partition_by or None)


def merge_predicate(batch: pa.Table, pruned: bool, partition_by: list[str]) -> str:
    pred = "t.id = s.id"
    if pruned:
        pred += f" AND t.id >= {pc.min(batch['id']).as_py()}"
        if "region" in partition_by:
            regions = sorted(pc.unique(batch["region"]).to_pylist())
            pred += " AND t.region IN (" + ", ".join(f"'{r}'" for r in regions) + ")"
    return pred


def deltars_merge(table_path: str, batch: pa.Table, predicate: str) -> dict:
    from deltalake import DeltaTable

    dt = DeltaTable(table_path)
    return (dt.merge(batch, predicate, source_alias="s", target_alias="t")
            .when_matched_delete("s.op = 'D'")
            .when_matched_update_all(except_cols=["op"])
            .when_not_matched_insert_all("s.op <> 'D'", except_cols=["op"])
            .execute())


def _worker(argv: list[str]) -> int:
    """`bench _import|_merge ...`: one delta-rs operation in a fresh process, whose tree is measured."""
    job = json.loads(argv[0])
    t0 = time.perf_counter()
    if job["op"] == "import":
        deltars_import(job["table"], job["base"], job["partition_by"])
        out = {}
    else:
        out = {}
        for table_path, batch_file in job["pairs"]:
            batch = pq.read_table(batch_file)
            out = deltars_merge(table_path, batch, merge_predicate(batch, job["pruned"], job["partition_by"]))
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 3), "metrics": out}, default=str))
    return 0


def worker_cmd(job: dict) -> list[str]:
    return [sys.executable, "-m", "cdc_assets_tests.benchmarks.bench", "_worker", json.dumps(job)]


def run_parts(output: str) -> tuple[float | None, float | None]:
    """From `cdc-assets run`'s summary lines: the seconds its tables took (ingest, apply and
    checks, without the process's start and Dagster's instance), and its target steps alone."""
    lines = [ln for ln in output.splitlines() if re.match(r"^\w+: (ok|FAILED);", ln)]
    tables = [float(m.group(1)) for ln in lines if (m := re.search(r"; ([\d.]+)s$", ln))]
    targets = [float(m.group(1)) for ln in lines if (m := re.search(r" v\d+ in ([\d.]+)s", ln))]
    return (round(sum(tables), 2) if tables else None,
            round(sum(targets), 2) if len(targets) == len(lines) and lines else None)


def worker_seconds(step: Step) -> float | None:
    for line in reversed(step.output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)["seconds"]
    return None


# --- reading and comparing targets ------------------------------------------------------------

def files_of(table_path: str, version: int | None = None) -> set[str]:
    from deltalake import DeltaTable

    return set(DeltaTable(table_path, version=version).file_uris())


def delta_version(table_path: str) -> int:
    from deltalake import DeltaTable

    try:
        return DeltaTable(table_path).version()
    except Exception:  # noqa: BLE001 - no table yet
        return -1


def rewritten(table_path: str, before: int) -> tuple[int | None, int | None]:
    """Files of version `before` that later commits removed, out of the files of `before`.
    Counted over every commit since (the apply may commit more than once, e.g. a compaction)."""
    if before < 0 or delta_version(table_path) < 0:
        return None, None
    old = files_of(table_path, before)
    return len(old - files_of(table_path)), len(old)


def holding(table_path: str, version: int, ids: pa.Array) -> int | None:
    """Files of `version` that hold at least one of `ids`: the fewest an apply must rewrite."""
    if version < 0:
        return None
    n = 0
    for uri in files_of(table_path, version):
        local = uri[len("file://"):] if uri.startswith("file://") else uri
        if pc.any(pc.is_in(pq.read_table(local, columns=["id"])["id"], value_set=ids)).as_py():
            n += 1
    return n


def read_target(table_path: str) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(table_path).to_pyarrow_table()


def _plain(t: pa.DataType) -> pa.DataType:
    if t in (pa.large_string(), pa.string_view()):
        return pa.string()
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    return t


def _type_text(t: pa.DataType) -> str:
    t = _plain(t)
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return {pa.float64(): "double", pa.int64(): "long", pa.int32(): "int", pa.string(): "string"}.get(t, str(t))


def _as_decimal(col: pa.ChunkedArray, scale: int) -> pa.ChunkedArray | None:
    """A column as decimal(38, scale+…) without passing through a float's binary value: a double
    goes through its shortest decimal text (Arrow's double -> string), which is the decimal the
    writer meant whenever the double round-trips. None when a value has more digits than that."""
    t = _plain(col.type)
    wide = pa.decimal128(38, 16)
    try:
        if pa.types.is_floating(t):
            return col.cast(pa.string()).cast(wide)
        return col.cast(wide)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def compare(product: pa.Table, reference: pa.Table) -> dict:
    """The product's target against the merge's result, by value: the same ids, and every column
    equal per id (amount compared as exact decimals whatever type the product stores it in)."""
    out = {"rows_product": product.num_rows, "rows_reference": reference.num_rows, "ids_equal": False,
           "values_equal": False, "types_equal": False, "types_note": "", "differences": ""}
    missing = [c for c in COLUMNS if c not in product.column_names]
    if missing:
        out["differences"] = f"product target lacks {', '.join(missing)}"
        return out
    p = product.select(COLUMNS).sort_by("id")
    r = reference.select(COLUMNS).sort_by("id")
    mism = [f"{c} {_type_text(p[c].type)} vs {_type_text(r[c].type)}" for c in COLUMNS
            if _plain(p[c].type) != _plain(r[c].type)]
    out["types_equal"] = not mism
    out["types_note"] = "; ".join(mism)
    pid, rid = p["id"].combine_chunks(), r["id"].combine_chunks()
    out["ids_equal"] = len(pid) == len(rid) and pc.all(pc.equal(pid, rid)).as_py() is not False
    if not out["ids_equal"]:
        ps, rs = set(pid.to_pylist()), set(rid.to_pylist())
        out["differences"] = f"{len(rs - ps)} ids missing from the product, {len(ps - rs)} extra"
        return out
    diffs = []
    for c in COLUMNS[1:]:
        a, b = p[c], r[c]
        if pa.types.is_decimal(_plain(b.type)):
            a, b = _as_decimal(a, b.type.scale), _as_decimal(b, b.type.scale)
            if a is None:
                diffs.append(f"{c}: values with more digits than any decimal(12,2)")
                continue
        elif _plain(a.type) != _plain(b.type):
            try:
                a = a.cast(_plain(b.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                diffs.append(f"{c}: not comparable ({_type_text(a.type)})")
                continue
        else:
            a, b = a.cast(_plain(a.type)), b.cast(_plain(b.type))
        same = pc.fill_null(pc.equal(a, b), False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        bad = len(same) - pc.sum(pc.or_(same, both_null).cast(pa.int64())).as_py()
        if bad:
            i = pc.index(pc.or_(same, both_null), False).as_py()
            diffs.append(f"{c}: {bad} rows differ (id {pid[i].as_py()}: {a[i].as_py()!r} vs {b[i].as_py()!r})")
    out["values_equal"] = not diffs
    out["differences"] = "; ".join(diffs)
    return out


COMPARED_IDS = 4_000_000  # ids compared at a time: two 50M-row tables at once do not fit in memory


def compare_paths(got: str, want: str, step: int = COMPARED_IDS) -> dict:
    """`compare` of two Delta tables read a range of ids at a time (each table's files skipped by
    their statistics), so that memory follows the range, not the tables."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    sets = [DeltaTable(p).to_pyarrow_dataset() for p in (got, want)]
    if "id" not in sets[0].schema.names:
        return compare(read_target(got), read_target(want))  # reports the missing column
    tops = [pc.max(s.to_table(columns=["id"])["id"]).as_py() for s in sets]
    out: dict = {}
    for lo in range(0, max((t for t in tops if t is not None), default=0) + 1, step):
        where = (ds.field("id") >= lo) & (ds.field("id") < lo + step)
        part = compare(*(s.to_table(filter=where) for s in sets))
        if not out:
            out = part
            continue
        for k in ("rows_product", "rows_reference"):
            out[k] += part[k]
        for k in ("ids_equal", "values_equal", "types_equal"):
            out[k] = out[k] and part[k]
        for k in ("types_note", "differences"):
            out[k] = "; ".join(x for x in dict.fromkeys([out[k], part[k]]) if x)
    return out


# --- the cases --------------------------------------------------------------------------------

@dataclass
class Case:
    workload: str  # W1, W2, many, catchup
    layout: str  # flat, partitioned
    rows: int  # per table
    changes: int  # per table
    tables: int = 1

    @property
    def name(self) -> str:
        return self.workload

    @property
    def partition_by(self) -> list[str]:
        return ["region"] if self.layout == "partitioned" else []

    @property
    def table_names(self) -> list[str]:
        return [TABLE] if self.tables == 1 else [f"T{i:03d}" for i in range(self.tables)]

    @property
    def label(self) -> str:
        tables = f" x{self.tables}" if self.tables > 1 else ""
        return f"{self.workload} {self.layout} {size_label(self.rows)}{tables}"


@dataclass
class Result:
    case: str
    layout: str
    rows: int
    changes: int
    tables: int
    engine: str
    import_s: float | None = None
    import_peak_mb: int | None = None
    apply_cold_s: float | None = None
    cold_peak_mb: int | None = None
    apply_warm_s: float | None = None
    warm_peak_mb: int | None = None
    warm_tables_s: float | None = None  # the product: its tables' own time in the warm run (summary lines)
    warm_target_s: float | None = None  # the product: the target steps alone (the apply, as the merge is)
    files_rewritten: int | None = None
    files_touched: int | None = None  # files of the previous version holding a changed id
    files_total: int | None = None
    ids_equal: bool | None = None
    values_equal: bool | None = None
    types_equal: bool | None = None
    types_note: str = ""
    status: str = ""
    error: str = ""


def _mb(step: Step) -> int | None:
    return round(step.peak_bytes / 2**20) if step.peak_bytes else None


class Bench:
    def __init__(self, work: str, seed: int = 7, step_timeout: float = 300, modes=("cold", "warm"),
                 echo=print, driver_memory: str = "2g", run_spark: dict | None = None):
        self.work, self.seed, self.timeout, self.modes, self.echo = work, seed, step_timeout, tuple(modes), echo
        self.driver_memory = driver_memory
        self.run_spark = run_spark or {}  # cdc.yaml `spark:` of the runs (import and cold apply)
        self.server: ConnectServer | None = None
        self.server_error = ""
        self._product_bases: dict[tuple, tuple[str, Step]] = {}
        self._delta_bases: dict[tuple, tuple[str, Step]] = {}
        self.cli = self._cli()
        os.makedirs(work, exist_ok=True)

    @staticmethod
    def _cli() -> list[str]:
        exe = os.path.join(os.path.dirname(sys.executable), "cdc-assets")
        return [exe] if os.path.exists(exe) else [sys.executable, "-m", "cdc_assets.cli.main"]

    def _path(self, *parts: str) -> str:
        return os.path.join(self.work, *parts)

    # data
    def base_files(self, case: Case) -> list[str]:
        """One export per table; the tables of the many-table case share one (imported once, copied)."""
        os.makedirs(self._path("data"), exist_ok=True)
        one = write_base(self._path("data", f"base-{case.rows}-s{self.seed}.parquet"), case.rows, self.seed)
        return [one] * case.tables

    def change_files(self, case: Case) -> list[str]:
        out = []
        for i in range(case.tables):
            f = self._path("data", f"{case.workload}-{case.rows}-{case.changes}-s{self.seed + i}.parquet")
            if not os.path.exists(f):
                mix = "W1" if case.workload in ("W1", CATCHUP) else "W2"
                pq.write_table(changes(case.rows, case.changes, mix, self.seed + i), f)
            out.append(f)
        return out

    # the product
    def _config(self, ws: str, case: Case, bases: list[str], names: list[str] | None = None,
                file_name: str = "cdc.yaml") -> str:
        tables = []
        for name, base in zip(names or case.table_names, bases):
            t = {"name": name, "keys": ["id"], "format": "changeset", "options": CHANGESET, "base_snapshot": base}
            if case.partition_by:
                t["partition_by"] = case.partition_by
            tables.append(t)
        os.makedirs(os.path.join(ws, "landing"), exist_ok=True)
        path = os.path.join(ws, file_name)
        with open(path, "w") as fh:
            config = {"warehouse": "./warehouse", "landing": "./landing", "tables": tables}
            if self.run_spark:
                config["spark"] = self.run_spark
            json.dump(config, fh, indent=2)
        return path

    def product_base(self, case: Case) -> tuple[str, Step]:
        """Import the base once per size, layout and table count; applies start from copies."""
        key = (case.rows, case.layout, case.tables)
        if key not in self._product_bases:
            ws = self._path("product", f"base-{size_label(case.rows)}-{case.layout}-x{case.tables}")
            shutil.rmtree(ws, ignore_errors=True)
            first, *others = case.table_names
            self._config(ws, case, self.base_files(case))
            # The many-table case imports its shared export once (as one table), then copies that
            # table's folder to every other name: the case measures the apply cycle, not 65 imports.
            cfg = self._config(ws, Case(case.workload, case.layout, case.rows, case.changes, 1), self.base_files(case)[:1],
                               names=[first], file_name="import.yaml")
            self.echo(f"  {case.label}: cdc_assets imports the base ...", flush=True)
            step = run_measured([*self.cli, "run", "--config", cfg], product_env(case), self.timeout,
                                os.path.join(ws, "import.log"))
            if step.ok and delta_version(self._target(ws, first)) < 0:
                step.ok, step.status, step.error = False, "failed", "run exited 0 but left no target table"
            for name in others if step.ok else ():
                shutil.copytree(os.path.join(ws, "warehouse", first), os.path.join(ws, "warehouse", name))
            self._product_bases[key] = (ws, step)
        return self._product_bases[key]

    @staticmethod
    def _target(ws: str, table: str) -> str:
        return os.path.join(ws, "warehouse", table, "target")

    def product_apply(self, case: Case, mode: str) -> tuple[str, Step, list[int]]:
        base_ws, _ = self.product_base(case)
        ws = self._path("product", f"{case.workload}-{size_label(case.rows)}-{case.layout}-x{case.tables}-{mode}")
        shutil.rmtree(ws, ignore_errors=True)
        shutil.copytree(base_ws, ws, ignore=shutil.ignore_patterns("*.log"))
        for name, f in zip(case.table_names, self.change_files(case)):
            publish(pq.read_table(f), os.path.join(ws, "landing", name, "batch-0001"), "changes.parquet")
        before = [delta_version(self._target(ws, t)) for t in case.table_names]
        remote, also = None, ()
        if mode == "warm":
            if not self.ensure_server():
                return ws, Step(status="failed", error=f"no Spark Connect server: {self.server_error}"), before
            remote, also = self.server.url, (self.server.pid,)
        self.echo(f"  {case.label}: cdc_assets applies {case.changes} changes ({mode}) ...", flush=True)
        step = run_measured([*self.cli, "run", "--config", os.path.join(ws, "cdc.yaml")], product_env(case, remote),
                            self.timeout, os.path.join(ws, f"apply-{mode}.log"), also=also)
        if mode == "warm" and step.status == "timeout":
            self.stop_server()  # it may still be busy with the abandoned run; the next warm run starts a fresh one
        return ws, step, before

    def ensure_server(self) -> bool:
        if self.server is not None:
            return True
        if self.server_error:
            return False
        self.server = ConnectServer(self.work, driver_memory=self.driver_memory)
        try:
            secs = self.server.start()
            self.echo(f"  Spark Connect server up and warmed at {self.server.url} in {secs} s", flush=True)
            return True
        except Exception as e:  # noqa: BLE001 - warm runs are then reported failed, cold ones go on
            self.server_error = str(e)
            self.server.stop()
            self.server = None
            return False

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    # delta-rs
    def delta_base(self, case: Case) -> tuple[str, Step]:
        key = (case.rows, case.layout, case.tables)
        if key not in self._delta_bases:
            root = self._path("delta", f"base-{size_label(case.rows)}-{case.layout}-x{case.tables}")
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            first, *others = case.table_names
            job = {"op": "import", "table": os.path.join(root, first), "base": self.base_files(case)[0],
                   "partition_by": case.partition_by}
            step = run_measured(worker_cmd(job), child_env(), self.timeout, os.path.join(root, f"import-{first}.log"))
            for name in others if step.ok else ():
                shutil.copytree(os.path.join(root, first), os.path.join(root, name))  # as for the product
            self._delta_bases[key] = (root, step)
        return self._delta_bases[key]

    def delta_apply(self, case: Case, pruned: bool) -> tuple[str, Step, float | None, list[int]]:
        base_root, _ = self.delta_base(case)
        root = self._path("delta", f"{case.workload}-{size_label(case.rows)}-{case.layout}-x{case.tables}"
                                   f"-{'pruned' if pruned else 'plain'}")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base_root, root, ignore=shutil.ignore_patterns("*.log"))
        pairs = [[os.path.join(root, t), f] for t, f in zip(case.table_names, self.change_files(case))]
        before = [delta_version(p) for p, _ in pairs]
        job = {"op": "merge", "pairs": pairs, "pruned": pruned, "partition_by": case.partition_by}
        step = run_measured(worker_cmd(job), child_env(), self.timeout, os.path.join(root, "merge.log"))
        return root, step, worker_seconds(step) if step.ok else None, before

    # one case, every engine
    def run_case(self, case: Case, keep: bool = False) -> list[Result]:
        common = dict(case=case.workload, layout=case.layout, rows=case.rows, changes=case.changes, tables=case.tables)
        t0 = time.perf_counter()
        self.base_files(case)
        self.change_files(case)
        self.echo(f"{case.label}: {case.changes} changes per table; data ready in {time.perf_counter() - t0:.1f} s",
                  flush=True)
        results, references = [], {}
        _, dimport = self.delta_base(case)
        for engine, pruned in ((DELTA, False), (PRUNED, True)):
            r = Result(engine=engine, **common, import_s=dimport.seconds if dimport.ok else None,
                       import_peak_mb=_mb(dimport))
            results.append(r)
            if not dimport.ok:
                r.status, r.error = f"import {dimport.status}", dimport.error
                continue
            root, step, inner, before = self.delta_apply(case, pruned)
            r.apply_cold_s, r.cold_peak_mb, r.apply_warm_s = step.seconds if step.ok else None, _mb(step), inner
            r.status, r.error = step.status, step.error
            if step.ok:
                self._count_files(r, case, [os.path.join(root, t) for t in case.table_names], before)
                # paths, not tables: 65 targets of 1M rows per engine do not fit in memory at once
                references[engine] = {t: os.path.join(root, t) for t in case.table_names}
            elif not keep:
                shutil.rmtree(root, ignore_errors=True)
        if DELTA in references and PRUNED in references:
            self._judge(results[1], references[PRUNED], references[DELTA])

        ws, pimport = self.product_base(case)
        r = Result(engine=PRODUCT, **common, import_s=pimport.seconds if pimport.ok else None,
                   import_peak_mb=_mb(pimport))
        results.append(r)
        statuses = []
        if not pimport.ok:
            r.status, r.error = f"import {pimport.status}", pimport.error
        for mode in self.modes if pimport.ok else ():
            ws_mode, step, before = self.product_apply(case, mode)
            statuses.append(f"{mode} {step.status}")
            # seconds only for a step that finished: a timeout's or failure's time is in its error
            seconds = step.seconds if step.ok else None
            if mode == "cold":
                r.apply_cold_s, r.cold_peak_mb = seconds, _mb(step)
            else:
                r.apply_warm_s, r.warm_peak_mb = seconds, _mb(step)
                if step.ok:
                    r.warm_tables_s, r.warm_target_s = run_parts(step.output)
            if step.ok:
                targets = [self._target(ws_mode, t) for t in case.table_names]
                if r.files_total is None:
                    self._count_files(r, case, targets, before)
                if DELTA in references:
                    self._judge(r, dict(zip(case.table_names, targets)), references[DELTA], mode)
            else:
                r.error = "; ".join(x for x in (r.error, f"{mode}: {step.error}") if x)
            if not keep:
                shutil.rmtree(ws_mode, ignore_errors=True)
        if pimport.ok:
            r.status = ", ".join(statuses) if any("ok" not in s for s in statuses) else "ok"
        if DELTA not in references and not r.error:
            r.error = "no delta-rs result to compare with"
        if not keep:
            for tables in references.values():
                shutil.rmtree(os.path.dirname(next(iter(tables.values()))), ignore_errors=True)
        return results

    def _count_files(self, r: Result, case: Case, tables: list[str], before: list[int]) -> None:
        counts = [rewritten(t, v) for t, v in zip(tables, before)]
        if all(c[0] is not None for c in counts):
            r.files_rewritten, r.files_total = sum(c[0] for c in counts), sum(c[1] for c in counts)
            touched = [holding(t, v, pq.read_table(f, columns=["id"])["id"].combine_chunks())
                       for t, v, f in zip(tables, before, self.change_files(case))]
            r.files_touched = sum(touched)

    @staticmethod
    def _judge(r: Result, got: dict, want: dict, mode: str = "") -> None:
        """Every table equal by value (each read from its path in turn); several modes of one engine
        must all be."""
        notes, diffs = set(), []
        ids = values = types = True
        for t in want:
            c = compare_paths(got[t], want[t])
            ids, values, types = ids and c["ids_equal"], values and c["values_equal"], types and c["types_equal"]
            if c["types_note"]:
                notes.add(c["types_note"])
            if c["differences"]:
                diffs.append(f"{t}{' ' + mode if mode else ''}: {c['differences']}")
        r.ids_equal = ids if r.ids_equal is None else (r.ids_equal and ids)
        r.values_equal = values if r.values_equal is None else (r.values_equal and values)
        r.types_equal = types if r.types_equal is None else (r.types_equal and types)
        r.types_note = "; ".join(sorted(notes | ({r.types_note} if r.types_note else set())))
        if diffs:
            r.error = "; ".join([x for x in (r.error,) if x] + diffs[:3])

    def close(self) -> None:
        self.stop_server()


# --- the feature-cost case (F1) ----------------------------------------------------------------

FEATURES = "F1"
TRUNCATE_OP = "T"
PARTIAL_NULLS = ("customer", "amount", "status")  # half the columns; id, region and seq stay
# (feature, its table, its peer: the plain apply of the same changes)
PLAIN_1K, PARTIAL_1K, TRUNCATE_1K, PLAIN_PCT, SNAPSHOT_PCT = (
    "plain 1,000", "partial updates 1,000", "truncate + 1,000 above it", "plain 1 %", "snapshot 1 % changed")
FEATURE_TABLES = {PLAIN_1K: "PLAIN", PARTIAL_1K: "PARTIAL", TRUNCATE_1K: "TRUNC", PLAIN_PCT: "PLAIN_PCT",
                  SNAPSHOT_PCT: "SNAP"}
FEATURE_PEERS = {PARTIAL_1K: PLAIN_1K, TRUNCATE_1K: PLAIN_1K, SNAPSHOT_PCT: PLAIN_PCT}


@dataclass
class FeatureResult:
    case: str
    rows: int
    feature: str
    changes: int  # the changes the batch holds or (a snapshot) implies
    seconds: float | None = None  # the `cdc-assets run` process
    tables_s: float | None = None  # its table's own time (the summary line: ingest, staging, apply, checks)
    peak_mb: int | None = None
    peer: str = ""
    ratio: float | None = None  # tables_s / the peer's tables_s
    ratio_process: float | None = None  # seconds / the peer's seconds
    values_equal: bool | None = None
    status: str = ""
    error: str = ""


def without(table: pa.Table, ids: pa.Array) -> pa.Table:
    return table.filter(pc.invert(pc.is_in(table["id"], value_set=ids)))


def plain_result(base: pa.Table, batch: pa.Table) -> pa.Table:
    """A batch of distinct ids applied to the base: deletes gone, inserts and updates as sent."""
    upserts = batch.filter(pc.not_equal(batch["op"], "D")).select(COLUMNS)
    return pa.concat_tables([without(base, batch["id"]), upserts])


def partial_batch(batch: pa.Table) -> pa.Table:
    """The batch with PARTIAL_NULLS null in its updates: each update carries only id, region and seq."""
    updates = pc.equal(batch["op"], "U")
    out = batch
    for c in PARTIAL_NULLS:
        i = out.schema.get_field_index(c)
        out = out.set_column(i, c, pc.if_else(updates, pa.nulls(len(batch), out.schema.field(c).type), out[c]))
    return out


def partial_result(base: pa.Table, batch: pa.Table) -> pa.Table:
    """The partial batch applied: an update keeps the stored value of each column it leaves null."""
    updates = batch.filter(pc.equal(batch["op"], "U"))
    stored = base.take(pc.index_in(updates["id"], value_set=base["id"]))
    filled = updates.select(COLUMNS)
    for c in PARTIAL_NULLS:
        filled = filled.set_column(filled.schema.get_field_index(c), c, pc.coalesce(updates[c], stored[c]))
    inserts = batch.filter(pc.equal(batch["op"], "I")).select(COLUMNS)
    return pa.concat_tables([without(base, batch["id"]), filled, inserts])


def truncate_batch(batch: pa.Table) -> pa.Table:
    """One truncate ranked below every change of the batch (seq 0; its other columns null), first."""
    row = {c: None for c in CHANGE_SCHEMA.names} | {"seq": 0, "op": TRUNCATE_OP}
    return pa.concat_tables([pa.Table.from_pylist([row], schema=CHANGE_SCHEMA), batch.cast(CHANGE_SCHEMA)])


def truncate_result(batch: pa.Table) -> pa.Table:
    """After the truncate only the rows the changes above it insert or update are left."""
    return batch.filter(pc.is_in(batch["op"], value_set=pa.array(["I", "U"]))).select(COLUMNS)


def feature_table(name: str, base: str, feature: str) -> dict:
    t = {"name": name, "keys": ["id"], "base_snapshot": base}
    if feature == SNAPSHOT_PCT:
        return {**t, "format": "snapshot"}
    options = dict(CHANGESET, truncates=[TRUNCATE_OP]) if feature == TRUNCATE_1K else CHANGESET
    return {**t, "format": "changeset", "options": options} | ({"partial_updates": True} if feature == PARTIAL_1K else {})


def feature_batches(base: pa.Table, seed: int) -> dict[str, tuple[pa.Table, int]]:
    """Each feature's landed file and how many changes it holds or implies."""
    n = base.num_rows
    w2, pct = changes(n, 1000, "W2", seed), changes(n, max(1, n // 100), "W1", seed)
    return {PLAIN_1K: (w2, w2.num_rows), PARTIAL_1K: (partial_batch(w2), w2.num_rows),
            TRUNCATE_1K: (truncate_batch(w2), w2.num_rows + 1), PLAIN_PCT: (pct, pct.num_rows),
            SNAPSHOT_PCT: (plain_result(base, pct), pct.num_rows)}


def expected_target(feature: str, base: pa.Table, batch: pa.Table) -> pa.Table:
    if feature == PARTIAL_1K:
        return partial_result(base, batch)
    if feature == TRUNCATE_1K:
        return truncate_result(batch.filter(pc.not_equal(batch["op"], TRUNCATE_OP)))
    if feature == SNAPSHOT_PCT:
        return batch  # the export is the table
    return plain_result(base, batch)


def run_features(bench: Bench, n: int) -> list[FeatureResult]:
    """F1 at one size: one base import (copied to every feature's table), then each feature's
    batch in a fresh `cdc-assets run` of its own table, from a fresh copy of the base."""
    os.makedirs(bench._path("data"), exist_ok=True)
    base_file = write_base(bench._path("data", f"base-{n}-s{bench.seed}.parquet"), n, bench.seed)
    base_ws = bench._path("features", f"base-{size_label(n)}")
    shutil.rmtree(base_ws, ignore_errors=True)
    os.makedirs(os.path.join(base_ws, "landing"))
    config = os.path.join(base_ws, "cdc.yaml")
    with open(config, "w") as fh:
        json.dump({"warehouse": "./warehouse", "landing": "./landing",
                   "tables": [feature_table(t, base_file, f) for f, t in FEATURE_TABLES.items()]}, fh, indent=2)
    first = FEATURE_TABLES[PLAIN_1K]
    bench.echo(f"F1 {size_label(n)}: cdc_assets imports the base ...", flush=True)
    step = run_measured([*bench.cli, "run", "--config", config, "--table", first], child_env(), bench.timeout,
                        os.path.join(base_ws, "import.log"))
    results = []
    base = pq.read_table(base_file) if step.ok else None
    batches = feature_batches(base, bench.seed) if base is not None else {}
    for feature, table in FEATURE_TABLES.items():
        r = FeatureResult(FEATURES, n, feature, batches[feature][1] if batches else 0, peer=FEATURE_PEERS.get(feature, ""))
        results.append(r)
        if not step.ok:
            r.status, r.error = f"import {step.status}", step.error
            continue
        ws = bench._path("features", f"{size_label(n)}-{table}")
        shutil.rmtree(ws, ignore_errors=True)
        shutil.copytree(base_ws, ws, ignore=shutil.ignore_patterns("*.log"))
        if table != first:  # the imported base, as this table's own (the many-table case does the same)
            shutil.copytree(os.path.join(ws, "warehouse", first), os.path.join(ws, "warehouse", table))
        batch = batches[feature][0]
        publish(batch, os.path.join(ws, "landing", table, "batch-0001"),
                "export.parquet" if feature == SNAPSHOT_PCT else "changes.parquet")
        bench.echo(f"F1 {size_label(n)}: {feature} ...", flush=True)
        run = run_measured([*bench.cli, "run", "--config", os.path.join(ws, "cdc.yaml"), "--table", table],
                           child_env(), bench.timeout, os.path.join(ws, "run.log"))
        r.status, r.error, r.peak_mb = run.status, run.error, _mb(run)
        if run.ok:
            r.seconds, r.tables_s = run.seconds, run_parts(run.output)[0]
            c = compare(read_target(os.path.join(ws, "warehouse", table, "target")),
                        expected_target(feature, base, batch))
            r.values_equal = c["ids_equal"] and c["values_equal"]
            r.error = c["differences"]
        shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(base_ws, ignore_errors=True)
    by_feature = {r.feature: r for r in results}
    for r in results:
        peer = by_feature.get(r.peer)
        if peer is not None:
            if r.tables_s and peer.tables_s:
                r.ratio = round(r.tables_s / peer.tables_s, 2)
            if r.seconds and peer.seconds:
                r.ratio_process = round(r.seconds / peer.seconds, 2)
    return results


FEATURE_HEADER = ("rows", "feature", "changes", "run s", "table s", "peak GB", "against", "ratio (table s)",
                  "ratio (run s)", "target as expected", "status")


def feature_rows(results: list[FeatureResult]) -> list[tuple[str, ...]]:
    return [(size_label(r.rows), r.feature, str(r.changes), _s(r.seconds), _s(r.tables_s), _gb(r.peak_mb),
             r.peer or "-", "-" if r.ratio is None else f"{r.ratio:.2f}x",
             "-" if r.ratio_process is None else f"{r.ratio_process:.2f}x",
             "-" if r.values_equal is None else ("yes" if r.values_equal else "NO"),
             r.status + (f": {r.error}" if r.error else "")) for r in results]


def measured_line(command: str, note: str) -> str:
    """The first line of a written table: the command, the commit it measured, the date, and what
    else ran on the machine (`note`)."""
    from cdc_assets_tests.figures import measured_at

    return (f"Measured by `{command}` {measured_at()} on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores"
            + (f"; {note}" if note else "; shared") + "; one run each, so compare ratios within a run rather than "
            "seconds across runs).")


def write_features(results: list[FeatureResult], out: str, command: str, note: str = "") -> list[str]:
    paths = [os.path.join(out, "features.csv"), os.path.join(out, "features.md")]
    with open(paths[0], "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(FeatureResult.__dataclass_fields__))
        w.writeheader()
        for r in results:
            w.writerow(asdict(r))
    lines = [measured_line(command, note), "",
             "| " + " | ".join(FEATURE_HEADER) + " |", "|" + "---|" * len(FEATURE_HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in feature_rows(results)]
    lines += ["", "Run s: a fresh `cdc-assets run --table T` process. Table s: the table's own seconds from its "
              "summary line (landing, ingest, staging, apply, checks; without Python's start-up, imports and "
              "Dagster's instance). Ratio: against the plain apply of the same changes in the same run (the "
              "snapshot's against a plain apply of the 1 % its export changes). Each target is compared by value "
              "with the table expected from the data."]
    with open(paths[1], "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return paths


# --- results ----------------------------------------------------------------------------------

HEADER = ("case", "layout", "rows", "changes", "engine", "import s", "apply cold s", "apply warm s",
          "warm: tables s / target step s", "peak GB (import/cold/warm)", "files rewritten/touched/total", "equal to delta-rs", "status")


def _s(x) -> str:
    return "-" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


def _gb(*mbs) -> str:
    return "/".join("-" if m is None else f"{m / 1024:.1f}" for m in mbs)


def _equal(r: Result) -> str:
    if r.engine == DELTA:
        return "(reference)"
    if r.values_equal is None:
        return "-"
    text = "values " + ("equal" if r.values_equal else "DIFFER")
    if r.types_equal is False:
        text += f"; types differ ({r.types_note})"
    return text


def table_rows(results: list[Result]) -> list[tuple[str, ...]]:
    out = []
    for r in results:
        rows = size_label(r.rows) + (f" x{r.tables}" if r.tables > 1 else "")
        status = r.status + (f": {r.error}" if r.error else "")  # a failure's root cause, or what differs
        out.append((r.case, r.layout, rows, str(r.changes), r.engine, _s(r.import_s), _s(r.apply_cold_s),
                    _s(r.apply_warm_s),
                    "-" if r.warm_tables_s is None else f"{_s(r.warm_tables_s)} / {_s(r.warm_target_s)}",
                    _gb(r.import_peak_mb, r.cold_peak_mb, r.warm_peak_mb),
                    "-" if r.files_total is None else f"{r.files_rewritten}/{r.files_touched}/{r.files_total}",
                    _equal(r), status))
    return out


def text_table(results: list[Result]) -> str:
    body = table_rows(results)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(HEADER)]
    widths[-1] = len(HEADER[-1])  # the status goes last and may be long
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *map(line, body)])


def ratios(results: list[Result]) -> list[str]:
    """cdc_assets / delta-rs per case: the product's cold run against the peer's fresh process,
    its warm run against the peer's merge call, plain and pruned."""
    out = []
    by_case: dict[tuple, dict[str, Result]] = {}
    for r in results:
        by_case.setdefault((r.case, r.layout, r.rows, r.tables), {})[r.engine] = r
    for (case, layout, rows, tables), engines in by_case.items():
        p, d, q = engines.get(PRODUCT), engines.get(DELTA), engines.get(PRUNED)
        if p is None:
            continue
        parts = []
        for label, mine, peer in (("cold/delta-rs process", p.apply_cold_s, d and d.apply_cold_s),
                                  ("warm/delta-rs merge", p.apply_warm_s, d and d.apply_warm_s),
                                  ("warm/delta-rs pruned merge", p.apply_warm_s, q and q.apply_warm_s),
                                  ("target step/delta-rs pruned merge", p.warm_target_s, q and q.apply_warm_s)):
            if mine and peer:
                parts.append(f"{label} {mine / peer:.1f}x")
        if parts:
            name = f"{case} {layout} {size_label(rows)}" + (f" x{tables}" if tables > 1 else "")
            out.append(f"{name}: " + ", ".join(parts))
    return out


def read_csv(path: str) -> list[Result]:
    """bench.csv back as results (to redraw the plot without measuring again)."""
    types = {f.name: f.type for f in Result.__dataclass_fields__.values()}
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            kw = {}
            for k, v in row.items():
                t = str(types[k])
                if v == "" and "None" in t:
                    kw[k] = None
                elif t.startswith("int"):
                    kw[k] = int(v)
                elif "float" in t:
                    kw[k] = float(v)
                elif "int" in t:
                    kw[k] = int(v)
                elif "bool" in t:
                    kw[k] = v == "True"
                else:
                    kw[k] = v
            out.append(Result(**kw))
    return out


def write_csv(results: list[Result], path: str) -> None:
    names = list(asdict(results[0]).keys()) if results else [f for f in Result.__dataclass_fields__]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names)
        w.writeheader()
        for r in results:
            w.writerow(asdict(r))


def write_markdown(results: list[Result], path: str, command: str, note: str = "") -> None:
    body = table_rows(results)
    lines = [measured_line(command, note), "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in b) + " |" for b in body]
    rs = ratios(results)
    if rs:
        lines += ["", "cdc_assets / delta-rs, same data, same run:", ""] + [f"- {x}" for x in rs]
    lines += ["", "Apply cold: a fresh `cdc-assets run` process (a fresh Python process for delta-rs). "
              "Apply warm: `cdc-assets run` with `SPARK_REMOTE` at a Spark Connect server already up "
              "(for delta-rs, the `merge` call alone); of it, the tables' own seconds (landing, ingest, staging, "
              "apply, checks: without Python's start-up, imports and Dagster's instance) and the target step "
              "alone (what the merge call does: read the pending changes and the touched keys' state, merge, "
              "commit), both from the run's summary lines. Peak memory: the whole process tree (JVM and Python "
              "workers; warm includes the Connect server). Files: those of the previous target version that "
              "the apply removed / those that hold a changed id (the fewest a merge must rewrite) / all of them."]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_plot(results: list[Result], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    styles = {PRODUCT: ("tab:red", "o"), DELTA: ("tab:blue", "s"), PRUNED: ("tab:green", "^")}
    for engine, (color, marker) in styles.items():
        for layout, ls in (("flat", "-"), ("partitioned", "--")):
            for mode, alpha in (("warm", 1.0), ("cold", 0.45)):
                if engine != PRODUCT and mode == "cold":
                    continue  # the peer's fresh-process time is in the table; its merge time is the line
                pts = sorted((r.rows, r.apply_warm_s if mode == "warm" else r.apply_cold_s) for r in results
                             if r.engine == engine and r.layout == layout and r.case == "W2"
                             and (r.apply_warm_s if mode == "warm" else r.apply_cold_s))
                if pts:
                    label = f"{engine}{' ' + mode if engine == PRODUCT else ''}, {layout}"
                    ax.plot(*zip(*pts), color=color, marker=marker, linestyle=ls, alpha=alpha, label=f"W2 {label}")
            w1 = [(r.rows, r.apply_warm_s) for r in results if r.engine == engine and r.layout == layout
                  and r.case == "W1" and r.apply_warm_s]
            if w1:
                ax.scatter(*zip(*w1), color=color, marker="*", s=120, edgecolors="black" if layout == "flat" else color,
                           label=f"W1 {engine}{' warm' if engine == PRODUCT else ''}, {layout}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("target rows")
    ax.set_ylabel("apply seconds (delta-rs: the merge call)")
    ax.set_title("Applying one change batch: cdc_assets vs delta-rs MERGE (same data, same run)")
    ax.grid(alpha=0.3, which="both")
    ax.margins(x=0.15)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: it hid points
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- command line -----------------------------------------------------------------------------

def plan(args) -> list[Case]:
    cases = []
    for layout in args.layouts:
        if "W1" in args.cases:
            cases.append(Case("W1", layout, args.w1_size, args.w1_changes or max(1, args.w1_size // 50)))
        if "W2" in args.cases:
            cases += [Case("W2", layout, n, args.changes) for n in args.sizes]
        if CATCHUP in args.cases:
            cases.append(Case(CATCHUP, layout, args.catchup_size, args.catchup_changes))
    if "many" in args.cases and args.tables > 0:
        cases.append(Case("many", "flat", args.table_size, args.changes, args.tables))
    return cases


def _list(choices):
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)} (choose from {', '.join(choices)})")
        return items
    return parse


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cdc_assets_tests.benchmarks.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", action="store_true",
                    help="the issue's sizes: W1 5M rows/100,000 changes, W2 1M,10M,50M, 65 tables of 1M rows")
    ap.add_argument("--sizes", type=lambda t: [parse_size(x) for x in t.split(",")],
                    help="W2 and F1 table sizes (default 200k)")
    ap.add_argument("--cases", type=_list(("W1", "W2", "many", CATCHUP, FEATURES)),
                    help="default W1,W2; --long W1,W2,many; F1 runs at each of --sizes")
    ap.add_argument("--layouts", type=_list(("flat", "partitioned")), help="default flat; --long flat,partitioned")
    ap.add_argument("--modes", type=_list(("cold", "warm")), default=["cold", "warm"],
                    help="cdc_assets apply runs: a fresh process, and/or through a Spark Connect server")
    ap.add_argument("--w1-size", type=parse_size, help="W1 table rows (default 200k; --long 5M)")
    ap.add_argument("--w1-changes", type=parse_size, help="W1 changes (default rows/50, as 100,000 in 5M)")
    ap.add_argument("--catchup-size", type=parse_size, help="catch-up table rows (default 2M; --long 50M)")
    ap.add_argument("--catchup-changes", type=parse_size, help="catch-up pending changes (default 200k; --long 5M)")
    ap.add_argument("--changes", type=parse_size, default=1000, help="W2 and many-table changes per table")
    ap.add_argument("--tables", type=int, help="tables in the many-table case (default 3; --long 65; 0 skips it)")
    ap.add_argument("--table-size", type=parse_size, help="rows per table in the many-table case (default 20k; --long 1M)")
    ap.add_argument("--step-timeout", type=float, default=300,
                    help="seconds before a product or delta-rs step is killed and recorded as a timeout")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="docs/figures", help="where bench.csv, bench.md and bench_apply.png go")
    add_force_flag(ap)
    ap.add_argument("--note", default="", help="what else ran on the machine, said in the table's first line")
    ap.add_argument("--work", help="generated data and warehouses (default: a new /tmp/bench-* folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated data and warehouses")
    ap.add_argument("--driver-memory", default="2g", help="the Spark Connect server's driver memory (warm runs)")
    ap.add_argument("--run-driver-memory", help="cdc.yaml spark.driver.memory of the runs' own Spark (import, cold "
                                                "apply), with spark.driver.maxResultSize 64m (default: the product's)")
    ap.add_argument("--executor-memory", help="cdc.yaml spark.executor.memory of the runs' own Spark on a cluster "
                                              "(--master; the issue caps the drivers, not the executors)")
    ap.add_argument("--master", help="the Spark master of the product's runs and of the Connect server, for "
                    "example spark://127.0.0.1:7077 (cdc_assets_tests.benchmarks.cluster start); default local[2]")
    ap.add_argument("--replot", metavar="CSV", help="only redraw bench_apply.png from an earlier bench.csv (first argument)")
    args = ap.parse_args(argv)
    big = args.long
    # The plain command stays within minutes with today's product (about 1.5 min per step at 200k)
    args.cases = args.cases or (["W1", "W2", "many"] if big else ["W1", "W2"])
    args.layouts = args.layouts or (["flat", "partitioned"] if big else ["flat"])
    args.sizes = args.sizes or ([1_000_000, 10_000_000, 50_000_000] if big else [200_000])
    args.w1_size = args.w1_size or (5_000_000 if big else 200_000)
    args.w1_changes = args.w1_changes or (100_000 if big else None)
    args.catchup_size = args.catchup_size or (50_000_000 if big else 2_000_000)
    args.catchup_changes = args.catchup_changes or (5_000_000 if big else 200_000)
    args.tables = args.tables if args.tables is not None else (65 if big else 3)
    args.table_size = args.table_size or (1_000_000 if big else 20_000)
    return args


def run(args, echo=print) -> list[Result]:
    work = args.work or tempfile.mkdtemp(prefix="bench-", dir="/tmp")
    if getattr(args, "master", None):
        os.environ["CDC_ASSETS_SPARK_MASTER"] = args.master  # the runs and the Connect server inherit it
    run_spark = {"spark.driver.memory": args.run_driver_memory, "spark.driver.maxResultSize": "64m"} \
        if getattr(args, "run_driver_memory", None) else None
    if getattr(args, "executor_memory", None):
        run_spark = {**(run_spark or {}), "spark.executor.memory": args.executor_memory}
    bench = Bench(work, seed=args.seed, step_timeout=args.step_timeout, modes=args.modes, echo=echo,
                  driver_memory=args.driver_memory, run_spark=run_spark)
    results: list[Result] = []
    echo(f"work folder {work}; step timeout {args.step_timeout:.0f} s", flush=True)
    try:
        for case in plan(args):
            results += bench.run_case(case, keep=args.keep)
    finally:
        bench.close()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return results


def run_feature_sizes(args, echo=print) -> list[FeatureResult]:
    """F1 at each of --sizes, in one run."""
    work = args.work or tempfile.mkdtemp(prefix="bench-", dir="/tmp")
    bench = Bench(work, seed=args.seed, step_timeout=args.step_timeout, modes=(), echo=echo)
    echo(f"work folder {work}; step timeout {args.step_timeout:.0f} s", flush=True)
    try:
        return [r for n in args.sizes for r in run_features(bench, n)]
    finally:
        bench.close()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _stop_on_term(signum, frame):
    # SIGTERM as an exception, so that the Connect server and the running step are stopped too
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _stop_on_term)
    if argv[:1] == ["_worker"]:
        return _worker(argv[1:])
    if argv[:1] == ["--replot"]:
        # bench.csv -> bench_apply.png beside it, no measuring
        write_plot(read_csv(argv[1]), os.path.join(os.path.dirname(argv[1]) or ".", "bench_apply.png"))
        return 0
    args = parse_args(argv)
    shown, skip = [], False  # the command without its --note, which the line says apart
    for a in argv:
        if skip or a == "--note" or a.startswith("--note="):
            skip = a == "--note"
            continue
        shown.append(shlex.quote(a))
    command = "python -m cdc_assets_tests.benchmarks.bench " + " ".join(shown)
    figures = Figures(args.out, force=args.force_dirty)  # refused before measuring from a dirty tree
    features = run_feature_sizes(args) if FEATURES in args.cases else []
    if features:
        print()
        body = feature_rows(features)
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(FEATURE_HEADER)]
        for cells in [FEATURE_HEADER, *body]:
            print("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
        print("\nwrote " + ", ".join(write_features(features, args.out, command.strip(), args.note)))
    if not plan(args):
        return 1 if any(r.values_equal is False for r in features) else 0
    results = run(args)
    print()
    print(text_table(results))
    print()
    for line in ratios(results) or ["no ratios: no case has both a product and a delta-rs apply time"]:
        print(line)
    paths = [figures.path(n) for n in ("bench.csv", "bench.md", "bench_apply.png")]
    write_csv(results, paths[0])
    write_markdown(results, paths[1], command.strip(), args.note)
    write_plot(results, paths[2])
    print("\nwrote " + ", ".join(paths))
    unequal = [r for r in results if r.engine != DELTA and r.values_equal is False]
    return 1 if unequal or any(r.values_equal is False for r in features) else 0


if __name__ == "__main__":
    raise SystemExit(main())
