"""A Spark standalone cluster on this machine (a master and two workers), for the scale-out runs.

    .venv/bin/python -m cdc_assets_tests.benchmarks.cluster start [--dir /tmp/cdc-spark-cluster]
    .venv/bin/python -m cdc_assets_tests.benchmarks.cluster stop  [--dir ...]

`start` prints the master's URL; point a run at it with `CDC_ASSETS_SPARK_MASTER=spark://127.0.0.1:7077`
(or `spark.master` under `spark:` in cdc.yaml). Executors then run in the workers' JVMs, as on any
cluster: every executor must reach the warehouse and landing paths (here, the same filesystem).
Everything binds 127.0.0.1; logs, pids and work folders go under --dir.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import pyspark

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
PORT = 7077


def _env(folder: str) -> dict:
    env = dict(os.environ)
    env.update({"SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_WORKER_DIR": os.path.join(folder, "work"), "SPARK_LOG_DIR": os.path.join(folder, "logs"),
                "SPARK_PID_DIR": os.path.join(folder, "pids"), "PYSPARK_PYTHON": sys.executable})
    return env


def _daemon(env: dict, action: str, cls: str, instance: int, *args: str) -> None:
    script = os.path.join(env["SPARK_HOME"], "sbin", "spark-daemon.sh")
    subprocess.run(["bash", script, action, cls, str(instance), *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start(folder: str, workers: int = 2, worker_memory: str = "4g") -> str:
    os.makedirs(folder, exist_ok=True)
    env = _env(folder)
    url = f"spark://127.0.0.1:{PORT}"
    _daemon(env, "start", MASTER, 1, "--host", "127.0.0.1", "--port", str(PORT), "--webui-port", "8080")
    deadline = time.time() + 60
    while not _answers(PORT):
        if time.time() > deadline:
            raise SystemExit(f"the master did not answer on {PORT} within 60 s; see {env['SPARK_LOG_DIR']}")
        time.sleep(0.5)
    for i in range(1, workers + 1):
        _daemon(env, "start", WORKER, i, "--host", "127.0.0.1", "--cores", "1", "--memory", worker_memory,
                "--webui-port", str(8080 + i), url)
    return url


def stop(folder: str, workers: int = 2) -> None:
    env = _env(folder)
    for i in range(1, workers + 1):
        _daemon(env, "stop", WORKER, i)
    _daemon(env, "stop", MASTER, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("--dir", default="/tmp/cdc-spark-cluster")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-memory", default="4g")
    args = ap.parse_args(argv)
    if args.action == "start":
        print(start(args.dir, args.workers, args.worker_memory))
    else:
        stop(args.dir, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
