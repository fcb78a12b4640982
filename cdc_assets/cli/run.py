"""`cdc-assets run --config PATH`: take what landed, materialize it, check it, one line per table."""
from __future__ import annotations

from .common import config_or_none


def register(sub) -> None:
    p = sub.add_parser("run", help="apply every complete change file no earlier run took")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--table", action="append", help="only this table (repeatable)")
    p.set_defaults(func=main)


def main(args) -> int:
    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    outcomes = run_config(cfg, args.table)
    return 0 if all(o.ok for o in outcomes) else 1


def run_config(cfg, only=None, echo=print):
    from ..defs.definitions import build_definitions
    from .runner import instance, run_table, summary_line

    defs = build_definitions(cfg)
    inst = instance()
    outcomes = []
    for table in cfg.tables:
        if only and table.name not in only:
            continue
        outcome = run_table(defs, inst, cfg, table)
        echo(summary_line(outcome), flush=True) if echo is print else echo(summary_line(outcome))
        outcomes.append(outcome)
    return outcomes
