"""An inferred `sequence_by` column orders by one rule: numbers as numbers, ISO 8601 times as time,
numbers below times; a value that is neither is quarantined naming its column, never ranked above
the times around it."""
from __future__ import annotations

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS

TABLE = {"name": "SEQ", "keys": ["ID"], "format": "changeset",
         "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                     "sequence_by": ["CDC_TIMESTAMP"]}}


def test_a_time_spelled_outside_iso_8601_does_not_outrank_later_changes(workdir):
    cfg = write_config(workdir, [TABLE])
    land(cfg, "SEQ", "b1", {"c.csv": "FLAG,ID,V,CDC_TIMESTAMP\n"
                                     "I,1,a,01/01/2018 09:00\n"
                                     "I,2,a,2018-1-1 9:00:00\n"
                                     "I,3,a,2018-01-01T09:00:00Z\n"})
    run_ok(cfg, "SEQ")
    land(cfg, "SEQ", "b2", {"c.csv": "FLAG,ID,V,CDC_TIMESTAMP\n"
                                     "U,1,b,2018-01-02 10:00:00\n"
                                     "U,2,b,2018-01-02 10:00:00\n"
                                     "U,3,b,2018-01-02T10:00:00+00:00\n"})
    run_ok(cfg, "SEQ")
    assert values(target_rows(cfg, "SEQ"), "ID", "V") == {1: "b", 2: "b", 3: "b"}
    q = sorted(delta_rows(cfg, "SEQ", "quarantine"), key=lambda r: r["_cdc_line"])
    assert [(r["_cdc_file"], r["_cdc_line"]) for r in q] == [("b1/c.csv", 2), ("b1/c.csv", 3)]
    for r in q:
        assert "CDC_TIMESTAMP" in r["_cdc_reason"] and "2018" not in r["_cdc_reason"], r["_cdc_reason"]
