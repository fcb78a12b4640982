"""A fork server for the crash tests: each request runs in a fresh child process that may be killed.

Starting `cdc-assets` costs about 4 s of imports (Dagster, PySpark, delta-rs) before it does
anything, so a crash test that started the CLI for every kill spent most of its time importing.
This server imports those modules once (and nothing else: no thread, no Spark session, no Delta
table is opened before a fork), then forks one child per request. A child is an ordinary new
process: it builds its own Dagster definitions, instance and Spark Connect session, and it dies by
SIGKILL at its `CDC_ASSETS_CRASH_AT` point (or when `kill_after` seconds have passed) with no
cleanup, exactly as a killed `cdc-assets run` or sensor-evaluating code server would.

Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.
  {"cmd": "cli", "argv": [...], "env": {...}, "out": PATH, "kill_after": null | seconds}
      runs `cdc_assets.cli.main.main(argv)`: the `cdc-assets` command itself.
  {"cmd": "tick", "config": PATH, "table": NAME, "env": {...}, "out": PATH, "result": PATH}
      one evaluation of the table's landing sensor against the instance of $DAGSTER_HOME, then what
      the sensor daemon does with it (apply the dynamic partition requests); writes the requests.
  {"cmd": "settle", ...same...}
      ticks and launches each new run request in-process, as the daemon would, until a tick asks for
      nothing new; writes the runs launched and the batch partitions of the instance.
Any request may carry "kill_on_create": PATH of a Delta table folder: the child is then killed the
moment a data file (or its temporary) is created in that table, i.e. inside a delta-rs write, after
it began writing data files and, as a rule, before it commits them. The watch is inotify and the
child runs at nice 19, so the server usually acts within a millisecond; on a heavily loaded machine
the commit can still win the race, so the tests check for the uncommitted file instead of assuming it.
Any request may carry "hang_after": seconds after which a child still running is taken as hung (for
example waiting forever for its table's pool) and killed, so that a hang fails its test instead of
blocking it.
Answer: {"pid": child pid, "rc": exit code (negative: killed by that signal), "seconds": wall time,
"triggered": whether a kill_after or kill_on_create kill was sent, "hung": whether the hang_after kill was}.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import struct
import sys
import time
import traceback

# Imported once here, used by the children. Besides the obvious ones, the modules a Dagster
# instance on SQLite storage and a run import on first use (about 2 s more per child otherwise).
import alembic.command  # noqa: F401
import dagster as dg
import dagster._core.storage.event_log.sqlite  # noqa: F401
import dagster._core.storage.runs.sqlite  # noqa: F401
import dagster._core.storage.schedules.sqlite  # noqa: F401
import dagster._core.storage.sqlite_storage  # noqa: F401
import dagster._daemon  # noqa: F401
import dagster._grpc  # noqa: F401
import deltalake  # noqa: F401
import deltalake.fs  # noqa: F401
import grpc._channel  # noqa: F401
import pyarrow.acero  # noqa: F401
import pyarrow.dataset  # noqa: F401
import pyarrow.parquet  # noqa: F401
import pyspark.sql.connect.session  # noqa: F401

import cdc_assets.cli.main as cli_main
import cdc_assets.defs.run_loop  # noqa: F401
from cdc_assets.core.config import load_config
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine import faults

_IN_MOVED_TO, _IN_CREATE, _IN_ISDIR = 0x80, 0x100, 0x40000000
_EVENT = struct.Struct("iIII")


class CreateWatch:
    """inotify on a Delta table's data folders: reports the first file created outside `_delta_log`."""

    def __init__(self, table_path: str):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.table = os.path.abspath(table_path)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs: dict[int, str] = {}
        self.baseline = self._files()
        parent = os.path.dirname(self.table)
        os.makedirs(parent, exist_ok=True)
        self._watch(parent)  # for the table folder's own creation
        if os.path.isdir(self.table):
            self._watch_tree(self.table)

    def _watch(self, folder: str) -> None:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), _IN_CREATE | _IN_MOVED_TO)
        if wd >= 0:
            self.dirs[wd] = folder

    def _watch_tree(self, folder: str) -> None:
        self._watch(folder)
        for entry in os.scandir(folder):
            if entry.is_dir() and entry.name != "_delta_log":
                self._watch_tree(entry.path)

    def _files(self) -> set:
        out = set()
        for folder, dirs, files in os.walk(self.table):
            dirs[:] = [d for d in dirs if d != "_delta_log"]
            out |= {os.path.join(folder, f) for f in files}
        return out

    def triggered(self, timeout: float) -> bool:
        if not select.select([self.fd], [], [], timeout)[0]:
            return False
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return False
        i = 0
        while i < len(data):
            wd, mask, _, n = _EVENT.unpack_from(data, i)
            name = data[i + _EVENT.size:i + _EVENT.size + n].rstrip(b"\0").decode()
            i += _EVENT.size + n
            folder = self.dirs.get(wd)
            if folder is None:
                continue
            full = os.path.join(folder, name)
            if folder == os.path.dirname(self.table) and full != self.table:
                continue  # another table of the same warehouse folder
            if mask & _IN_ISDIR:
                if name != "_delta_log":
                    self._watch_tree(full)  # a new partition (or the table) folder: files may be in it already
                    if self._files() - self.baseline:
                        return True
            elif full not in self.baseline:
                return True
        return False

    def close(self) -> None:
        os.close(self.fd)


def _evaluate(config: str, table: str):
    """One sensor tick as the daemon's code server evaluates it, and the daemon's partition adds."""
    defs = build_definitions(load_config(config))
    instance = dg.DagsterInstance.get()
    sensor = defs.resolve_sensor_def(f"{table}__landing_sensor")
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs)
    data = sensor.evaluate_tick(context)
    for req in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    # The daemon's side: partitions added, runs not yet launched.
    faults.point("daemon.partitions_added")
    return defs, instance, sensor, data


def _launched(instance, sensor, run_key: str) -> bool:
    from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

    tags = {RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: sensor.name}
    return bool(instance.get_runs(filters=dg.RunsFilter(tags=tags)))


def _request(r) -> dict:
    return {"job": r.job_name, "partition": r.partition_key, "run_key": r.run_key}


def _tick(req: dict) -> dict:
    _, instance, sensor, data = _evaluate(req["config"], req["table"])
    return {"requests": [_request(r) for r in data.run_requests], "skip": data.skip_message,
            "partitions": instance.get_dynamic_partitions(f"{req['table']}__batches")}


def _settle(req: dict, max_ticks: int = 8) -> dict:
    from dagster._core.storage.tags import RUN_KEY_TAG

    launched = []
    for _ in range(max_ticks):
        defs, instance, sensor, data = _evaluate(req["config"], req["table"])
        todo = [r for r in data.run_requests if not _launched(instance, sensor, r.run_key)]
        if not todo:
            return {"launched": launched, "partitions": instance.get_dynamic_partitions(f"{req['table']}__batches")}
        for r in todo:
            result = defs.resolve_job_def(r.job_name).execute_in_process(
                instance=instance, partition_key=r.partition_key, tags={**r.tags, RUN_KEY_TAG: r.run_key},
                raise_on_error=False)
            launched.append({**_request(r), "success": result.success})
            if not result.success:
                return {"launched": launched, "error": "run failed"}
    return {"launched": launched, "error": "the sensor never settled"}


def _child(req: dict) -> int:
    os.environ.clear()
    os.environ.update(req["env"])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    try:
        if req["cmd"] == "cli":
            return cli_main.main(req["argv"])
        result = _tick(req) if req["cmd"] == "tick" else _settle(req)
        with open(req["result"], "w") as fh:
            json.dump(result, fh)
        return 0 if "error" not in result else 1
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported through the exit code and the output file
        traceback.print_exc()
        return 70


def serve() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        watch = CreateWatch(req["kill_on_create"]) if req.get("kill_on_create") else None
        t0 = time.time()
        pid = os.fork()
        if pid == 0:
            rc = 70
            try:
                if watch is not None:
                    watch.close()
                    # Yield the CPU to the watching server, which must act between the file and the commit.
                    os.nice(19)
                rc = _child(req)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 1)
        deadline = None if req.get("kill_after") is None else t0 + float(req["kill_after"])
        hang = None if req.get("hang_after") is None else t0 + float(req["hang_after"])
        triggered = hung = False
        while True:
            armed = not triggered and (deadline is not None or watch is not None)
            done, status = os.waitpid(pid, os.WNOHANG if armed or (hang is not None and not hung) else 0)
            if done:
                break
            if armed and ((watch is not None and watch.triggered(0.05))
                          or (deadline is not None and time.time() >= deadline)):
                os.kill(pid, signal.SIGKILL)  # our own child, not yet reaped: the pid is still its own
                triggered = True
            elif hang is not None and not hung and time.time() >= hang:
                os.kill(pid, signal.SIGKILL)
                hung = True
            elif not armed or watch is None:
                time.sleep(0.05)
        if watch is not None:
            watch.close()
        print(json.dumps({"pid": pid, "rc": os.waitstatus_to_exitcode(status), "triggered": triggered, "hung": hung,
                          "seconds": round(time.time() - t0, 2)}), flush=True)


if __name__ == "__main__":
    serve()
