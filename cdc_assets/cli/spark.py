"""`cdc-assets spark start|stop|status --config PATH`: the configuration's long-lived Spark Connect server."""
from __future__ import annotations

from .common import config_or_none


def register(sub) -> None:
    p = sub.add_parser("spark", help="start, stop or show the Spark Connect server that runs use when it is up",
                       description="A long-lived local Spark Connect server for this configuration: runs, the UI and "
                                   "the sensor use it when it answers, and skip Spark's start-up.")
    p.add_argument("action", choices=("start", "stop", "status"),
                   help="start the server (and wait until it answers), stop it, or show whether it is up")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 for `start` (default: a free one)")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine import connect

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    if args.action == "start":
        try:
            running, started = connect.start(cfg, args.port)
        except connect.SparkServerError as e:
            print(f"cdc-assets: {e}")
            return 1
        print(f"Spark Connect server {'started' if started else 'already running'} at {running.url} "
              f"(pid {running.pid}, log {running.log})")
        return 0
    if args.action == "stop":
        server = connect.stop(cfg)
        print(f"Spark Connect server at {server.url} stopped" if server else "no Spark Connect server recorded")
        return 0
    server = connect.recorded(cfg)
    if server is None:
        print(f"no Spark Connect server recorded in {connect.state_dir(cfg)}: runs use an in-process Spark session")
        return 1
    problem = connect.unhealthy(server)
    if problem:
        print(f"Spark Connect server recorded at {server.url} is down ({problem}): runs use an in-process Spark session")
        return 1
    print(f"Spark Connect server up at {server.url} (pid {server.pid}, started {server.started_at}, log {server.log})")
    return 0
