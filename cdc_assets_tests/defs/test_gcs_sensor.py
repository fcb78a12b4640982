"""The landing sensor on a gs:// landing area (GCS emulator): its client is the `gcs` resource
(dagster_gcp's GCSResource), a tick lists from its cursor on rather than the whole landing area,
a full listing still runs now and then for an object named before the cursor, and no object is
ever registered twice, across a restart (no cursor) included. Then the sensor's runs take the
objects through the GCSResource's client to the target."""
from __future__ import annotations

import json
import time

import dagster as dg
import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine import landing
from cdc_assets.engine.landing import registered
from cdc_assets_tests.emulators import GCS_BUCKET, put
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.warehouse import target_rows, values

from .test_sensor import Daemon

pytestmark = pytest.mark.spark
TABLE = "ORDERS"
PREFIX = "datastream"


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def tick(defs, instance, cursor: str | None):
    context = dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs,
                                      cursor=cursor, resources=defs.get_repository_def().get_top_level_resources())
    data = defs.resolve_sensor_def(f"{TABLE}__landing_sensor").evaluate_tick(context)
    for req in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    return data


def listed(cfg, data) -> list[str]:
    """What a tick after `data` lists: the sensor's own listing from the cursor that tick left."""
    cursor = landing.ListingCursor.from_json(data.cursor)
    return sorted(landing.scan_landing(cfg.landing_dir(TABLE), cursor, time.time()).found)


def objects(cfg) -> list[str]:
    return [f for b in registered(cfg.table_dir(TABLE)) for f in b.files]


def test_a_gcs_sensor_lists_from_its_cursor_and_never_registers_an_object_twice(
        spark, tmp_path, gcs_bucket, instance, monkeypatch):
    # Only the newest writes decide where the next listing starts (the emulator's writes are all
    # within a second of each other).
    monkeypatch.setattr(landing, "LOOKBACK_SECONDS", 0.0)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": ["id"], "format": "datastream-json"}],
                       landing=f"gs://{GCS_BUCKET}/{PREFIX}")
    defs = build_definitions(cfg)
    folder = f"{PREFIX}/{TABLE}/2024/01/01/10"
    put(gcs_bucket, f"{folder}/00/a.jsonl", jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1)]))
    put(gcs_bucket, f"{folder}/00/b.jsonl", jsonl([mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)]))
    put(gcs_bucket, f"{folder}/01/c.jsonl", jsonl([mysql("UPDATE", {"id": 1, "v": "c"}, 1, 3)]))
    put(gcs_bucket, f"{PREFIX}/OTHER/2024/01/01/10/00/x.jsonl", jsonl([mysql("INSERT", {"id": 9}, 1, 1)]))

    # ---- first tick, no cursor: the whole table folder is listed, one batch registered -------------
    first = tick(defs, instance, None)
    assert objects(cfg) == ["2024/01/01/10/00/a.jsonl", "2024/01/01/10/00/b.jsonl", "2024/01/01/10/01/c.jsonl"]
    assert [r.partition_key for r in first.run_requests] == ["b000001"]
    assert json.loads(first.cursor)["start"] == "2024/01/01/10/01/"  # the newest write's folder

    # ---- the next tick lists from the cursor: the older folder is not listed again ------------------
    put(gcs_bucket, f"{folder}/01/d.jsonl", jsonl([mysql("DELETE", {"id": 2, "v": "a"}, 1, 4)]))
    put(gcs_bucket, f"{folder}/02/e.jsonl", jsonl([mysql("INSERT", {"id": 3, "v": "e"}, 1, 5)]))
    second = tick(defs, instance, first.cursor)
    assert [b.id for b in registered(cfg.table_dir(TABLE))] == ["b000001", "b000002"]
    assert registered(cfg.table_dir(TABLE))[1].files == ("2024/01/01/10/01/d.jsonl", "2024/01/01/10/02/e.jsonl")
    assert listed(cfg, second) == ["2024/01/01/10/02/e.jsonl"]  # the folder the cursor now starts at
    quiet = tick(defs, instance, second.cursor)
    assert len(registered(cfg.table_dir(TABLE))) == 2 and quiet.cursor == second.cursor

    # ---- a restart (no cursor): a full listing, and nothing registered twice ------------------------
    restart = tick(defs, instance, None)
    assert len(registered(cfg.table_dir(TABLE))) == 2

    # ---- an object named before the cursor waits for the next full listing, then is taken once ------
    put(gcs_bucket, f"{folder}/00/late.jsonl", jsonl([mysql("UPDATE", {"id": 3, "v": "late"}, 1, 6)]))
    incremental = tick(defs, instance, restart.cursor)
    assert len(registered(cfg.table_dir(TABLE))) == 2
    assert listed(cfg, incremental) == ["2024/01/01/10/02/e.jsonl"]
    overdue = json.dumps({**json.loads(incremental.cursor), "full_at": 0.0})  # the last full listing is old
    tick(defs, instance, overdue)
    assert registered(cfg.table_dir(TABLE))[-1].files == ("2024/01/01/10/00/late.jsonl",)
    assert len(objects(cfg)) == len(set(objects(cfg))) == 6

    # ---- the sensor's runs read the objects through the GCSResource's client -----------------------
    assert Daemon(defs, instance).settle() >= 2
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "c", 3: "late"}
