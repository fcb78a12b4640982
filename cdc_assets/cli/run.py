"""`cdc-assets run --config PATH`: take what landed, materialize it, check it, one line per table."""
from __future__ import annotations

import sys

from ..defs.pool_watch import POOL_WAIT_SECONDS, stop_on_signals
from .common import TRY_AGAIN, config_or_none


def register(sub) -> None:
    p = sub.add_parser("run", help="apply every complete change file no earlier run took",
                       description="Register the complete change files no earlier run took as a batch per table, "
                                   "materialize the tables' assets for it through the Dagster jobs, run the checks, "
                                   "and print one line per table: the batch's records read, new changes, "
                                   "duplicates skipped and records quarantined (cdc-assets quarantine lists them); "
                                   "the target's rows after the apply (+ inserted ~ updated - deleted keys, N stale: "
                                   "changes that lost to a newer one of their key) and its version; the checks "
                                   "passed. A batch that sent too much to quarantine (the table's quarantine_limit, "
                                   "default: every record) fails its table. Exit 0: every table succeeded; 1: a table failed; 75: every "
                                   "failed table may succeed when run again (a source that did not answer); "
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
    from ..defs.definitions import build_definitions
    from ..defs.run_loop import Finished, run_config, run_in_processes
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    selected = [t.name for t in cfg.tables if not args.table or t.name in args.table]
    if args.parallel > 1 and len(selected) > 1:
        return _status(run_in_processes(cfg.path, selected, args.parallel, args.json, build_definitions,
                                        pool_wait=args.pool_wait))
    outcomes = run_config(cfg, build_definitions, args.table, as_json=args.json, progress=progress,
                          pool_wait=args.pool_wait)
    return _status([Finished(o.ok, o.retryable) for o in outcomes])


def _status(finished) -> int:
    """0 when every table succeeded; 75 (EX_TEMPFAIL) when every failed table may succeed if run again (a
    source that did not answer), so a scheduler retries exactly those runs; 1 otherwise."""
    failed = [f.retryable for f in finished if not f.ok]
    return 0 if not failed else TRY_AGAIN if all(failed) else 1
