"""Crash anywhere, lose nothing: SIGKILL `cdc-assets run` at named points and at random moments.

Each kill is followed by further runs; the warehouse must end exactly as one clean run
leaves it: no batch lost, none applied twice, quarantine complete, target equal.
The CLI runs as a real subprocess against a Spark Connect server started once for
this module, so a killed run costs seconds, not a Spark start-up.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from cdc_assets.cli.generate import write_feed

TABLE = "CRASHY"
# Where a run can die; each is tried once per batch (and reached or not, depending on the batch).
POINTS = [
    "register.before_commit", "register.committed",
    "changes.parsed", "quarantine.before_commit", "quarantine.committed",
    "changes.before_commit", "changes.committed",
    "staging.before_commit", "staging.committed",
    "target.computed", "target.committed", "run.table_done",
]
BATCHES = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory):
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    work = tmp_path_factory.mktemp("connect")
    port = _free_port()
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


def _land(feed, root, b):
    shutil.copytree(os.path.join(feed, "landing", TABLE, f"batch-{b:04d}"),
                    os.path.join(root, "landing", TABLE, f"batch-{b:04d}"))


def _run(cli, cfg, remote, crash_at=None, kill_after=None) -> int:
    env = dict(os.environ, SPARK_REMOTE=remote)
    env.pop("DAGSTER_HOME", None)
    if crash_at:
        env["CDC_ASSETS_CRASH_AT"] = crash_at
    proc = subprocess.Popen(cli + ["run", "--config", cfg], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode not in (0, -signal.SIGKILL):
        print(out.decode(errors="replace")[-3000:])
    return proc.returncode


def _state(root) -> dict:
    wh = os.path.join(root, "warehouse", TABLE)

    def rows(name, cols):
        dt = DeltaTable(os.path.join(wh, name))
        for f in dt.file_uris():  # every file a reader is shown exists: no dangling adds
            assert os.path.exists(f.replace("file://", "")), f
        return sorted(tuple(str(r[c]) for c in cols) for r in dt.to_pyarrow_table(columns=cols).to_pylist())

    target_cols = ["_cdc_key", "_cdc_order", "region", "amount", "status", "customer"]
    return {
        "batches": rows("batches", ["batch_seq", "file"]),
        "changes": rows("changes", ["_cdc_batch_seq", "_cdc_event_id"]),
        "staging": rows("staging", ["_cdc_batch_seq", "_cdc_key", "_cdc_order"]),
        "quarantine": rows("quarantine", ["_cdc_batch_seq", "_cdc_file", "_cdc_line"]),
        "target": rows("target", target_cols),
    }


def test_killed_runs_end_as_one_clean_run(tmp_path, spark_connect, cli, long_run):
    feed = _feed(str(tmp_path))
    clean_root = str(tmp_path / "clean")
    clean_cfg = _warehouse(clean_root, feed)
    for b in range(1, BATCHES + 1):
        _land(feed, clean_root, b)
        assert _run(cli, clean_cfg, spark_connect) == 0
    clean = _state(clean_root)
    assert len(clean["quarantine"]) == BATCHES

    root = str(tmp_path / "crashy")
    cfg = _warehouse(root, feed)
    rng = random.Random(5)
    killed, tried = [], 0
    for b in range(1, BATCHES + 1):
        _land(feed, root, b)
        # The normal run takes every third point per batch (all points over the three batches
        # between them); --long takes every point at every batch.
        for p in (POINTS if long_run else POINTS[b - 1::BATCHES]):
            tried += 1
            if _run(cli, cfg, spark_connect, crash_at=p) == -signal.SIGKILL:
                killed.append(f"{p}@batch{b}")
        # and at random moments, wherever the run happens to be (inside delta-rs writes too)
        for _ in range(4 if long_run else 2):
            tried += 1
            if _run(cli, cfg, spark_connect, kill_after=rng.uniform(2.0, 9.0)) == -signal.SIGKILL:
                killed.append(f"random@batch{b}")
        assert _run(cli, cfg, spark_connect) == 0
    print(f"crash test: {len(killed)} kill points hit out of {tried} tries, "
          f"{len(set(killed))} distinct; all survived: {sorted(set(killed))}")
    assert len(set(killed)) >= (30 if long_run else 10)
    assert _state(root) == clean


def test_concurrent_runs_neither_lose_nor_double_a_batch(tmp_path, spark_connect, cli):
    """Two `run`s of the same table at once (as the sensor and a user would): one applies, one waits
    on the table lock and then finds the work done; the end state equals one clean run's."""
    feed = _feed(str(tmp_path))
    clean_root, root = str(tmp_path / "clean"), str(tmp_path / "twice")
    clean_cfg, cfg = _warehouse(clean_root, feed), _warehouse(root, feed)
    env = dict(os.environ, SPARK_REMOTE=spark_connect)
    env.pop("DAGSTER_HOME", None)
    for b in range(1, BATCHES + 1):
        _land(feed, clean_root, b)
        assert _run(cli, clean_cfg, spark_connect) == 0
        _land(feed, root, b)
        procs = [subprocess.Popen(cli + ["run", "--config", cfg], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for _ in range(2)]
        codes = [p.wait(timeout=600) for p in procs]
        assert codes == [0, 0], [p.stdout.read().decode(errors="replace")[-2000:] for p in procs]
    state = _state(root)
    assert state == _state(clean_root)
    assert sorted({b for b, _ in state["batches"]}) == [str(b) for b in range(1, BATCHES + 1)]
