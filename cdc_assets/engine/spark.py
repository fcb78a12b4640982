"""One Spark session per process, configured from cdc.yaml and the environment.

Which Spark serves a run, first match wins:
1. an explicit Spark Connect address (SPARK_REMOTE, or `spark.remote` under `spark:`);
2. the configuration's own Spark Connect server (`cdc-assets spark start`, or `cdc-assets ui`),
   when it passes a quick health check;
3. an in-process session (local[2] unless `spark.master` says otherwise).
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .spark_conf import DEFAULTS, in_process_settings  # noqa: F401 - the session's settings, shared with connect


def session_of(spark):
    """Engine steps take a session, or a function that returns one: then Spark starts only
    when a step needs it (a small batch is parsed and applied without it)."""
    return spark if spark is None or hasattr(spark, "read") else spark()


def remote_settings(conf: dict, remote: str) -> dict:
    # A Connect server owns master and driver settings; a session can still set SQL settings
    # (ANSI off, UTC), which the engine's results depend on.
    out = {k: v for k, v in conf.items() if k == "spark.app.name" or k.startswith("spark.sql.")}
    out["spark.remote"] = remote
    return out


def spark_settings(config_spark: dict | None = None) -> dict:
    """Defaults < cdc.yaml `spark:` < environment (CDC_ASSETS_SPARK_MASTER, SPARK_REMOTE)."""
    conf = in_process_settings(config_spark)
    remote = os.environ.get("SPARK_REMOTE") or conf.get("spark.remote")
    if remote:
        conf = remote_settings(conf, remote)
    prepare_environment()
    return conf


def prepare_environment() -> None:
    # Python workers must run this interpreter, or they miss pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@dataclass(frozen=True)
class Choice:
    session: object
    description: str  # which Spark serves the run, for the run's log
    warning: str | None = None  # set when the configuration's server was passed over


# Spark Connect sessions by address: one per server per process, like the in-process session.
_remote_sessions: dict = {}
_lock = threading.Lock()
# What this process's runs used, in order (the `run` command prints it).
used: list[str] = []
# Told before a session is built (the `run` command prints it: starting Spark takes seconds).
announce: Callable[[str], None] | None = None


def _builder(settings: dict):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder


def _remote_session(url: str, settings: dict, timeout: float):
    """A working session on the server at url, or raises; bounded by timeout."""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    with _lock:
        session = _remote_sessions.get(url)
    result: list = []

    def connect():
        try:
            s = session
            if s is None:
                builder = RemoteSession.builder.remote(url)
                for k, v in settings.items():
                    if k != "spark.remote":
                        builder = builder.config(k, v)
                s = builder.create()
            s.version  # noqa: B018 - one round trip: the server answers
            result.append(s)
        except Exception as e:  # noqa: BLE001 - reported as the reason to fall back
            result.append(e)

    # A thread, because the Connect client retries an unanswered call for minutes.
    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise TimeoutError(f"no answer within {timeout:.0f} s")
    if isinstance(result[0], Exception):
        with _lock:
            _remote_sessions.pop(url, None)
        raise result[0]
    with _lock:
        _remote_sessions[url] = result[0]
    # pyspark.sql.functions build Connect columns only while this is set; the builder sets it
    # for SPARK_REMOTE, and a session made by connect's own builder does not.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return result[0]


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def choose_session(config_spark: dict | None = None, cfg=None, probe_timeout: float = 15.0) -> Choice:
    """The session a run uses (see the module's docstring), and a line saying which it is."""
    from . import connect

    settings = spark_settings(config_spark)
    if "spark.remote" in settings:
        description = _used(f"Spark Connect at {settings['spark.remote']} (SPARK_REMOTE or spark.remote)")
        return Choice(_builder(settings).getOrCreate(), description)
    warning = None
    server = connect.recorded(cfg) if cfg is not None else None
    if server is not None:
        problem = connect.unhealthy(server)
        if problem is None:
            try:
                session = _remote_session(server.url, remote_settings(settings, server.url), probe_timeout)
                return Choice(session, _used(f"Spark Connect server at {server.url} (pid {server.pid}, "
                                             f"started {server.started_at})"))
            except Exception as e:  # noqa: BLE001 - a broken server must not fail the run
                problem = _first_line(e)
        warning = (f"the Spark Connect server recorded in {connect.state_dir(cfg)} ({server.url}) cannot serve "
                   f"this run: {problem}; using an in-process Spark session instead")
    # Back from a Connect session in this process: functions must build classic columns again.
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    description = _used(f"in-process Spark session, master {settings['spark.master']}")
    if announce is not None:
        announce(f"spark: starting an {description}")
    return Choice(_builder(settings).getOrCreate(), description, warning)


def _used(description: str) -> str:
    # Noted before the session exists, so a session that fails to start is still named.
    if description not in used:
        used.append(description)
    return description


def map_in_arrow(frame, func, schema):
    """`frame.mapInArrow(func, schema)` for columns of any name: PySpark names each input column
    by parsing its name as an attribute, which fails on a backtick, so the columns travel under
    their positions and `func` sees them under their own names again."""
    own = frame.columns

    def run(batches):
        return func(b.rename_columns(own) for b in batches)
    return frame.toDF(*[f"_{i}" for i in range(len(own))]).mapInArrow(run, schema)
