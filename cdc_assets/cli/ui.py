"""`cdc-assets ui --config PATH`: `dagster dev` on the configured tables, bound to 127.0.0.1.

Unless told `--no-spark`, it also starts the configuration's Spark Connect server (when none
is up), so the UI's and the sensor's runs skip Spark's start-up, and stops it on exit.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading

from ..defs.instance import prepared_home
from ..engine.settings import variable
from .common import config_or_none


def register(sub) -> None:
    p = sub.add_parser("ui", help="open the Dagster UI (dagster dev) on the configured tables, on 127.0.0.1",
                       description="Run dagster dev on the tables of cdc.yaml, bound to 127.0.0.1, with the "
                                   "configuration's Spark Connect server started unless --no-spark.")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--port", type=int, default=3000, help="port of the UI (default 3000)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--no-spark", action="store_true",
                   help="do not start a Spark Connect server; runs then start Spark in their own process")
    p.set_defaults(func=main)


def command(cfg_path: str, host: str, port: int) -> tuple[list[str], dict]:
    env = dict(os.environ)
    env[variable("config")] = cfg_path
    # the instance `cdc-assets run` records into too, with its pool limit: one writer step per table at a time
    env["DAGSTER_HOME"] = prepared_home(cfg_path)
    dagster = shutil.which("dagster", path=os.path.dirname(sys.executable)) or "dagster"
    return [dagster, "dev", "-m", "cdc_assets.definitions", "-h", host, "-p", str(port)], env


def _default_sigint() -> None:
    # dagster dev started from a background shell ignores SIGINT; restore it so Ctrl-C and TERM stop it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _SparkServer:
    """The Spark Connect server this command started (none when one was already up)."""

    def __init__(self, cfg):
        from ..engine import connect

        self.connect, self.cfg = connect, cfg
        self.server = None
        self.thread = None
        up = connect.live(cfg)
        if up is not None:
            print(f"Spark Connect server already up at {up.url}; runs use it", flush=True)
            return
        proc, self.server = connect.launch(cfg)
        print(f"starting a Spark Connect server at {self.server.url} for the UI's runs (log {self.server.log})",
              flush=True)
        # Dagster comes up meanwhile; runs launched before the server answers use in-process Spark.
        self.thread = threading.Thread(target=self._wait, args=(proc,), daemon=True)
        self.thread.start()

    def _wait(self, proc) -> None:
        try:
            self.connect.wait_ready(self.cfg, proc, self.server)
            print(f"Spark Connect server up at {self.server.url}", flush=True)
        except self.connect.SparkServerError as e:
            print(f"cdc-assets: {e}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.server is None:
            return
        self.connect.stop(self.cfg, self.server)
        if self.thread is not None:
            self.thread.join(30)  # it sees the process gone and returns
        self.connect.stop(self.cfg, self.server)  # forget a record written while stopping
        print(f"Spark Connect server at {self.server.url} stopped", flush=True)


def main(args) -> int:
    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    argv, env = command(cfg.path, args.host, args.port)
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={env['DAGSTER_HOME']})", flush=True)
    spark = None if args.no_spark else _SparkServer(cfg)
    child = subprocess.Popen(argv, env=env, preexec_fn=_default_sigint)

    def forward(signum, _frame):
        child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        return child.wait()
    finally:
        if spark is not None:
            spark.stop()
