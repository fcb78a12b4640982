"""`cdc-assets run --config PATH`: take what landed, materialize it, check it, one line per table."""
from __future__ import annotations

import json
import sys

from .common import config_or_none
from .pools import POOL_WAIT_SECONDS, stop_on_signals


def register(sub) -> None:
    p = sub.add_parser("run", help="apply every complete change file no earlier run took",
                       description="Register the complete change files no earlier run took as a batch per table, "
                                   "materialize the tables' assets for it through the Dagster jobs, run the checks, "
                                   "and print one line per table. Exit 0: every table succeeded; 1: a table failed; "
                                   "2: cdc.yaml is not valid or --table names no table in it.")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--table", action="append", help="only this table (repeatable)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per table on stdout instead of the summary lines (progress stays on stderr)")
    p.add_argument("--parallel", type=_positive, default=1, metavar="N",
                   help="run the tables in N processes side by side (default 1: one after another); each table "
                        "stays in one process, and its lines are printed as it finishes")
    p.add_argument("--pool-wait", type=_seconds, default=POOL_WAIT_SECONDS, metavar="SECONDS",
                   help="how long a step waits for its table's Dagster pool while another live run holds it "
                        f"(default {POOL_WAIT_SECONDS:g}); the wait is said on stderr, naming the run that "
                        "holds the pool, and then the table fails while the others go on. What a killed run "
                        "held is freed at once")
    p.set_defaults(func=main)


def _positive(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return n


def _seconds(text: str) -> float:
    import argparse

    try:
        n = float(text)
    except ValueError:
        n = -1.0
    if not n >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return n


def main(args) -> int:
    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    known = [t.name for t in cfg.tables]
    unknown = [name for name in args.table or [] if name not in known]
    if unknown:
        # A misspelt name must not look like a run that found nothing to do.
        print(f"cdc-assets: {cfg.path}: no table {', '.join(repr(n) for n in unknown)} "
              f"(tables: {', '.join(known)})", file=sys.stderr)
        return 2
    if getattr(args, "console", False):
        stop_on_signals()
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    selected = [t.name for t in cfg.tables if not args.table or t.name in args.table]
    if args.parallel > 1 and len(selected) > 1:
        return 0 if all(run_in_processes(cfg.path, selected, args.parallel, args.json,
                                         pool_wait=args.pool_wait)) else 1
    outcomes = run_config(cfg, args.table, as_json=args.json, progress=progress, pool_wait=args.pool_wait)
    return 0 if all(o.ok for o in outcomes) else 1


def run_in_processes(config_path: str, tables: list[str], processes: int, as_json: bool, echo=None,
                     pool_wait: float = POOL_WAIT_SECONDS) -> list[bool]:
    """The tables' cycles in `processes` worker processes, tables handed out one at a time as
    workers free up: each worker has its own Dagster definitions, instance (the same DAGSTER_HOME
    when set) and, when a step needs one, Spark session (or the configuration's Spark Connect server,
    which they then share). An incremental apply needs no Spark, so small batches of many tables
    proceed side by side. Lines go out (printed, or to `echo`) as each table finishes; returns whether
    each succeeded."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a fork would copy this process's JVM gateway and Dagster state into the workers
    with ProcessPoolExecutor(max_workers=min(processes, len(tables)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_run_one, config_path, name, as_json, pool_wait) for name in tables]
        results = []
        for future in as_completed(futures):
            lines, ok = future.result()
            for line in lines:
                print(line, flush=True) if echo is None else echo(line)
            results.append(ok)
        return results


def _run_one(config_path: str, table: str, as_json: bool, pool_wait: float) -> tuple[list[str], bool]:
    """One table's cycle in a worker process (run_in_processes): its output lines and whether it succeeded."""
    from ..core.config import load_config

    stop_on_signals()  # a stopped worker also ends the run it executes and frees its pool
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    lines: list[str] = []
    outcomes = run_config(load_config(config_path), [table], echo=lines.append, as_json=as_json, progress=progress,
                          pool_wait=pool_wait)
    return lines, all(o.ok for o in outcomes)


def run_config(cfg, only=None, echo=print, as_json=False, progress=None, pool_wait=POOL_WAIT_SECONDS):
    from ..defs.definitions import build_definitions
    from ..engine import spark
    from .runner import instance, run_table, summary_line

    defs = build_definitions(cfg)
    inst = instance()
    outcomes = []
    for table in cfg.tables:
        if only and table.name not in only:
            continue
        seen = len(spark.used)
        outcome = run_table(defs, inst, cfg, table, progress=progress, pool_wait=pool_wait)
        # Which Spark served the run, once, when a step first needed one.
        used = [f"spark: {d}" for d in spark.used[seen:]]
        if as_json:
            for line in used:
                print(line, file=sys.stderr, flush=True)
            lines = [json.dumps(outcome.to_json(), default=str)]
        else:
            lines = used + [summary_line(outcome)]
        for line in lines:
            echo(line, flush=True) if echo is print else echo(line)
        outcomes.append(outcome)
    return outcomes
