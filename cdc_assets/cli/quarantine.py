"""`cdc-assets quarantine TABLE`: the records in a table's quarantine; `cdc-assets quarantine replay
TABLE`: take them again once cdc.yaml is fixed."""
from __future__ import annotations

import json
import sys

from .common import MORE_NAMES, config_or_none, table_or_none

REPLAY = "replay"


def register(sub) -> None:
    p = sub.add_parser("quarantine", help="list a table's quarantined records, or replay them",
                       description="`quarantine TABLE` lists the records in the table's quarantine, tab-separated: "
                                   "batch, file, line, column and reason, in the order they arrived (their values "
                                   "only with --show-values). `quarantine replay TABLE`, after cdc.yaml is fixed, "
                                   "reads those records again under it, in their original order, and runs the table: "
                                   "each ranks by its own ordering key as if it had applied the first time (a newer "
                                   "change of its key still wins), each is taken once (a second replay, or a replay "
                                   "run again after a crash, takes nothing twice), and one that fails again stays in "
                                   "quarantine with its new reason. Exit 0: done (or nothing to replay); 1: the "
                                   "table failed (the summary line says why); 2: cdc.yaml is not valid or names no "
                                   "such table.")
    p.add_argument("words", nargs="+", metavar="[replay] TABLE",
                   help="the table's name in cdc.yaml, after `replay` to take its records again")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--show-values", action="store_true",
                   help="also each record's text as it landed (row values, keys included)")
    # `quarantine replay --config cdc.yaml ORDERS`: the names past an option join the words
    p.set_defaults(func=main, **{MORE_NAMES: "words"})


def main(args) -> int:
    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    words = args.words
    if len(words) > 2 or (len(words) == 2 and words[0] != REPLAY):
        print(f"cdc-assets quarantine: give one table, after `{REPLAY}` to replay it (not {' '.join(words)})",
              file=sys.stderr)
        return 2
    table = table_or_none(cfg, words[-1])
    if table is None:
        return 2
    if len(words) == 2:
        return _replay(cfg, table)
    from ..engine.replay import quarantined

    header = ["batch", "file", "line", "column", "reason"] + (["values"] if args.show_values else [])
    print("\t".join(header))
    for q in quarantined(cfg, table, with_raw=args.show_values):
        row = [q.batch, q.file, str(q.line), q.column or "", _one_line(q.reason)]
        if args.show_values:
            row.append(_one_line(q.raw or ""))
        print("\t".join(row))
    return 0


def _one_line(text: str) -> str:
    """A field of one line: tabs and line ends escaped as JSON escapes them."""
    return json.dumps(text, ensure_ascii=False)[1:-1] if any(c in text for c in "\t\r\n\\") else text


def _replay(cfg, table) -> int:
    from ..defs.definitions import build_definitions
    from ..defs.quarantine import replay_quarantined
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    batch, outcomes = replay_quarantined(cfg, table, build_definitions, progress=progress)
    if batch is None:
        print(f"{table.name}: nothing to replay (no record of a landed batch is in quarantine, or every one was taken)")
        return 0
    return 0 if all(o.ok for o in outcomes) else 1
