"""A long-lived local Spark Connect server per cdc.yaml, so runs skip Spark's start-up.

`cdc-assets spark start` (and `cdc-assets ui`) launch the server on 127.0.0.1 with the
config's `spark:` settings and record its address in `<config dir>/spark_connect/server.json`
once it answers. Runs read that record (engine/spark.py) and use the server when it
passes a quick health check; a record whose server is gone is only a stale note.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass

from ..core.config import Config
from ..core.errors import TransientError
from .spark_conf import in_process_settings

HOST = "127.0.0.1"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT = 180.0  # start-up takes 15-35 s here, far longer when the machine is busy
PROBE_TIMEOUT = 15.0


class SparkServerError(TransientError, RuntimeError):
    """The Spark Connect server could not be started or stopped; the message says why."""


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    pid: int
    host: str  # the machine the pid belongs to
    started_at: str
    log: str


def state_dir(cfg: Config) -> str:
    """Beside cdc.yaml, like the UI's dagster_home: the server belongs to this configuration."""
    return os.path.join(os.path.dirname(cfg.path), "spark_connect")


def _record_path(cfg: Config) -> str:
    return os.path.join(state_dir(cfg), "server.json")


def recorded(cfg: Config) -> Server | None:
    try:
        with open(_record_path(cfg), encoding="utf-8") as fh:
            return Server(**json.load(fh))
    except (OSError, ValueError, TypeError):
        return None


def _write_record(cfg: Config, server: Server) -> None:
    tmp = _record_path(cfg) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(asdict(server), fh, indent=2)
    os.replace(tmp, _record_path(cfg))


def _forget(cfg: Config, server: Server) -> None:
    if recorded(cfg) == server:
        try:
            os.remove(_record_path(cfg))
        except FileNotFoundError:
            pass


def _is_server_process(pid: int) -> bool:
    """True when pid is a live Spark Connect server JVM (a reused pid is some other program)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return False
    return SERVER_CLASS.encode() in cmdline


def _port_open(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def unhealthy(server: Server) -> str | None:
    """Why this recorded server cannot serve a run, or None when it can. Takes at most a second."""
    if server.host != socket.gethostname():
        return f"it was started on {server.host}"
    if not _is_server_process(server.pid):
        return f"its process {server.pid} is gone"
    if not _port_open(server.port):
        return f"nothing answers on {HOST}:{server.port}"
    return None


def live(cfg: Config) -> Server | None:
    server = recorded(cfg)
    return server if server is not None and unhealthy(server) is None else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def server_command(settings: dict, port: int) -> list[str]:
    conf = {k: v for k, v in settings.items() if k not in ("spark.master", "spark.app.name", "spark.remote")}
    # Bound to this machine only: a Connect server runs any code its clients send.
    conf["spark.connect.grpc.binding.address"] = HOST
    conf["spark.connect.grpc.binding.port"] = str(port)
    argv = [os.path.join(_spark_home(), "bin", "spark-submit"), "--class", SERVER_CLASS,
            "--name", "cdc_assets Spark Connect", "--master", settings.get("spark.master", "local[2]")]
    for k, v in sorted(conf.items()):
        argv += ["--conf", f"{k}={v}"]
    return argv


def _log_tail(log: str, lines: int = 15) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return ""


def launch(cfg: Config, port: int = 0) -> tuple[subprocess.Popen, Server]:
    """Start the server process; it answers once wait_ready returns."""

    settings = in_process_settings(cfg.spark)
    port = port or _free_port()
    root = state_dir(cfg)
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    os.makedirs(os.path.join(root, "work"), exist_ok=True)
    log = os.path.join(root, "logs", f"server-{port}.log")
    env = dict(os.environ)
    # Python workers must run this interpreter (the venv's), or they miss pyarrow and cdc_assets.
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = HOST
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    with open(log, "ab") as out:
        # A session of its own: Ctrl-C in the shell that started it does not stop it; `spark stop` does.
        proc = subprocess.Popen(server_command(settings, port), cwd=os.path.join(root, "work"), env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = Server(url=f"sc://{HOST}:{port}", port=port, pid=proc.pid, host=socket.gethostname(),
                    started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), log=log)
    return proc, server


def wait_ready(cfg: Config, proc: subprocess.Popen, server: Server, timeout: float = READY_TIMEOUT) -> Server:
    """Wait until the server answers, then record it; on failure stop it and say why (its log's end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SparkServerError(f"the Spark Connect server exited with code {proc.returncode} while starting; "
                                   f"end of {server.log}:\n{_log_tail(server.log)}")
        if _port_open(server.port, timeout=0.5):
            problem = probe(server.url)
            if problem is None:
                _write_record(cfg, server)
                return server
        time.sleep(0.5)
    _terminate(server.pid)
    raise SparkServerError(f"the Spark Connect server did not answer on {server.url} within {timeout:.0f} s; "
                           f"end of {server.log}:\n{_log_tail(server.log)}")


def probe(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Ask the server for its version over a fresh session: None when it answers, else why not."""
    result: list = []

    def ask():
        try:
            from pyspark.sql.connect.session import SparkSession as RemoteSession

            session = RemoteSession.builder.remote(url).create()
            result.append(session.version and None)
            session.stop()
        except Exception as e:  # noqa: BLE001 - any failure means: do not use this server
            result.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")

    # A thread, because the Connect client retries an unanswered call for minutes.
    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else f"no answer within {timeout:.0f} s"


def start(cfg: Config, port: int = 0, timeout: float = READY_TIMEOUT) -> tuple[Server, bool]:
    """The live server (False) or a newly started one (True)."""
    server = live(cfg)
    if server is not None:
        return server, False
    proc, server = launch(cfg, port)
    return wait_ready(cfg, proc, server, timeout), True


def _terminate(pid: int, grace: float = 30.0) -> None:
    if _is_server_process(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _is_server_process(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _is_server_process(pid):
            os.kill(pid, signal.SIGKILL)
    try:  # reap it when it is this process's child, or it lingers as a zombie
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop(cfg: Config, server: Server | None = None) -> Server | None:
    """Stop the recorded server (or the one given) and forget it; returns what was stopped."""
    server = server or recorded(cfg)
    if server is None:
        return None
    if server.host == socket.gethostname():
        _terminate(server.pid)
    _forget(cfg, server)
    return server
