"""`cdc-assets ui --config PATH`: `dagster dev` on the configured tables, bound to 127.0.0.1."""
from __future__ import annotations

import os
import shutil
import signal
import sys

from .common import config_or_none
from .pools import ensure_settings


def register(sub) -> None:
    p = sub.add_parser("ui", help="open the Dagster UI (dagster dev) on the configured tables, on 127.0.0.1")
    p.add_argument("--config", default="cdc.yaml")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.set_defaults(func=main)


def command(cfg_path: str, host: str, port: int) -> tuple[list[str], dict]:
    env = dict(os.environ)
    env["CDC_ASSETS_CONFIG"] = cfg_path
    env.setdefault("DAGSTER_HOME", os.path.join(os.path.dirname(cfg_path), "dagster_home"))
    ensure_settings(env["DAGSTER_HOME"])  # the pool limit: one writer step per table at a time
    dagster = shutil.which("dagster", path=os.path.dirname(sys.executable)) or "dagster"
    return [dagster, "dev", "-m", "cdc_assets.definitions", "-h", host, "-p", str(port)], env


def main(args) -> int:
    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    argv, env = command(cfg.path, args.host, args.port)
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={env['DAGSTER_HOME']})", flush=True)
    # dagster dev started from a background shell ignores SIGINT; restore it so Ctrl-C and TERM stop it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvpe(argv[0], argv, env)
    return 0
