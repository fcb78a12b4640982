"""A warehouse keyed by an earlier release, which read number-like text keys as numbers: its run
says what to do, `cdc-assets rekey` recomputes its keys and rebuilds its target, and from then on
'1.10' and '1.1' are two keys. A warehouse whose keys read the same is simply marked and goes on."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from cdc_assets.cli.main import main as cli_main
from cdc_assets.core.values import canonical_text, key_text
from cdc_assets.engine.rekey import MARKER
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok, run_table
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS

TABLES = ("changes", "staging", "target", "tombstones")


def earlier_key_text(values_) -> str:
    """How the earlier release spelled a key: number-like text read as a number."""
    return json.dumps([canonical_text(v) for v in values_], ensure_ascii=False, separators=(",", ":"))


def as_earlier_release_wrote_it(cfg, table: str, ids: list[str]) -> None:
    """Rewrite the stored keys of `ids` as the earlier release built them, without the marker
    that this release writes."""
    earlier = {key_text([i]): earlier_key_text([i]) for i in ids}
    for name in TABLES:
        p = os.path.join(cfg.table_dir(table), name)
        dt = DeltaTable(p)
        data = dt.to_pyarrow_table()
        keys = [earlier.get(k, k) for k in data["_cdc_key"].to_pylist()]
        data = data.set_column(data.schema.get_field_index("_cdc_key"), "_cdc_key", pa.array(keys, pa.string()))
        write_deltalake(dt, data, mode="overwrite")
    os.remove(os.path.join(cfg.table_dir(table), MARKER))


def test_an_earlier_warehouse_is_rekeyed_once_and_then_keys_are_exact(spark, workdir):
    cfg = write_config(workdir, [{"name": "OLD", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "OLD", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "v1"}, 1, n + 1)
                                             for n, i in enumerate(["1.10", "2", "x", "3.0"])])})
    take_and_apply(spark, cfg, "OLD")
    land(cfg, "OLD", "b2", {"a.jsonl": jsonl([mysql("DELETE", {"id": "3.0", "v": None}, 2, 1)])})
    take_and_apply(spark, cfg, "OLD")
    as_earlier_release_wrote_it(cfg, "OLD", ["1.10", "3.0"])
    assert earlier_key_text(["1.10"]) == earlier_key_text(["1.1"])  # what the earlier release merged

    land(cfg, "OLD", "b3", {"a.jsonl": jsonl([mysql("UPDATE", {"id": "1.10", "v": "v3"}, 3, 1),
                                             mysql("INSERT", {"id": "1.1", "v": "other"}, 3, 2),
                                             mysql("INSERT", {"id": "3", "v": "v3"}, 3, 3)])})
    stopped = run_table(cfg, "OLD")  # the run's batch step asks for the rekey before it takes anything
    assert not stopped.ok
    assert "cdc-assets rekey OLD" in stopped.error, stopped.error
    assert {r["id"] for r in target_rows(cfg, "OLD")} == {"1.10", "2", "x"}  # nothing applied meanwhile

    assert cli_main(["rekey", "--config", str(cfg.path)]) == 0
    for name in TABLES:
        stored = {k for k in pc.unique(DeltaTable(os.path.join(cfg.table_dir("OLD"), name))
                                       .to_pyarrow_table()["_cdc_key"]).to_pylist()}
        assert earlier_key_text(["1.10"]) not in stored, name
    assert {r["_cdc_key"] for r in delta_rows(cfg, "OLD", "tombstones")} == {key_text(["3.0"])}
    assert cli_main(["rekey", "--config", str(cfg.path)]) == 0  # a second rekey finds nothing to do

    take_and_apply(spark, cfg, "OLD")
    assert values(target_rows(cfg, "OLD"), "id", "v") == {"1.10": "v3", "1.1": "other", "2": "v1", "x": "v1",
                                                          "3": "v3"}


def test_an_earlier_warehouse_whose_keys_read_the_same_goes_on(spark, workdir):
    cfg = write_config(workdir, [{"name": "SAME", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "SAME", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "v1"}, 1, n + 1)
                                              for n, i in enumerate(["a", "7", "-3"])])})
    take_and_apply(spark, cfg, "SAME")
    land(cfg, "SAME", "b2", {"a.jsonl": jsonl([mysql("DELETE", {"id": "a", "v": None}, 2, 1)])})
    take_and_apply(spark, cfg, "SAME")
    as_earlier_release_wrote_it(cfg, "SAME", [])
    land(cfg, "SAME", "b3", {"a.jsonl": jsonl([mysql("UPDATE", {"id": "7", "v": "v3"}, 3, 1)])})
    take_and_apply(spark, cfg, "SAME")
    assert values(target_rows(cfg, "SAME"), "id", "v") == {"7": "v3", "-3": "v1"}
    assert os.path.exists(os.path.join(cfg.table_dir("SAME"), MARKER))


def test_a_table_that_starts_from_a_base_snapshot_is_exact_from_its_import(spark, workdir):
    """Its keys are built by this release from the start: its first batch need not read the whole
    base back to find out (that cost follows the table, not the batch)."""
    export = workdir / "export.csv"
    export.write_text("id,v\n1.10,a\n1.1,b\n007,c\n")
    cfg = write_config(workdir, [{"name": "T", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string"}, "base_snapshot": str(export)}])
    run_ok(cfg, "T")
    assert os.path.exists(os.path.join(cfg.table_dir("T"), MARKER))
    assert values(target_rows(cfg, "T"), "id", "v") == {"1.10": "a", "1.1": "b", "007": "c"}
