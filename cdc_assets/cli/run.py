"""`cdc-assets run --config PATH`: take what landed, materialize it, check it, one line per table."""
from __future__ import annotations

import json
import sys

from .common import config_or_none


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
    p.set_defaults(func=main)


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
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    outcomes = run_config(cfg, args.table, as_json=args.json, progress=progress)
    return 0 if all(o.ok for o in outcomes) else 1


def run_config(cfg, only=None, echo=print, as_json=False, progress=None):
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
        outcome = run_table(defs, inst, cfg, table, progress=progress)
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
