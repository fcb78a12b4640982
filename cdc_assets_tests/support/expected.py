"""What a generated feed's target must hold (its export, or the rules applied to its landed
files), compared by meaning: 5 == 5.0, '' == NULL."""
from __future__ import annotations

import csv
import os

from cdc_assets.core.values import canonical_text, infer_text

TABLE = "ORDERS"  # a generated feed's table
KEY = "id"
COLUMNS = ("id", "customer", "amount", "status", "region")


def read_export(path: str) -> dict:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [{k: infer_text(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    return {r[KEY]: r for r in rows}


def meaning(row: dict, columns=COLUMNS) -> dict:
    return {c: canonical_text(row.get(c)) for c in columns}


def differences(target_rows: list[dict], export: dict) -> list:
    """Target vs export by key, values by meaning (5 == 5.0, '' == NULL); [] when equal."""
    got = {r[KEY]: meaning(r) for r in target_rows}
    want = {k: meaning(r) for k, r in export.items()}
    diffs = [("missing", k) for k in sorted(set(want) - set(got))]
    diffs += [("extra", k) for k in sorted(set(got) - set(want))]
    diffs += [("differs", k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]]
    return diffs


def expected_state(cfg, table: str, files) -> dict:
    """The rows the rules give for these landed files: per key the greatest ordering key wins, a
    delete removes the row."""
    from cdc_assets.core.changes import Change
    from cdc_assets.core.formats import parse_file

    latest = {}
    for f in files:
        with open(os.path.join(cfg.landing_dir(table), f), "rb") as fh:
            data = fh.read()
        for c in parse_file("datastream-json", {}, [KEY], os.path.basename(f), data):
            assert isinstance(c, Change), (f, c)
            if c.key not in latest or c.order > latest[c.key].order:
                latest[c.key] = c
    return {k[0]: c.row for k, c in latest.items() if c.op != "D"}
