"""Backfills of a partitioned target from staging, through the apply job: one partition, or
the whole dynamic partition range, rebuild exactly what the incremental runs built, and
rewrite only the partitions they name; an incremental batch rewrites only what it touches."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import dagster as dg
import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import APPLY_TAG, INCREMENTAL
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.expected import KEY, TABLE, differences, read_export
from cdc_assets_tests.support.feeds import generate, publish
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import check_results, execute, materialized, register_batch, run_table
from cdc_assets_tests.support.warehouse import delta_versions, files_by_partition, target_rows

pytestmark = pytest.mark.spark

PARTS = f"{TABLE}__target_partitions"
APPLY = f"{TABLE}_apply_job"
TABLE_CFG = {"name": TABLE, "keys": [KEY], "format": "datastream-json", "partition_by": ["region"]}


def snapshot(cfg) -> dict:
    """The whole target, metadata columns included, by key; each key must be there once."""
    rows = target_rows(cfg, TABLE, source_only=False)
    keys = [r["_cdc_key"] for r in rows]
    assert len(keys) == len(set(keys)), "a key is in the target more than once"
    return {r[KEY]: r for r in rows}


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """A partitioned table fed over 3 batches by the incremental runs of the `run` path."""
    root = tmp_path_factory.mktemp("incremental")
    feed = generate(root, changes=300, batches=3, files_per_batch=2, seed=53)
    cfg = write_config(root, [TABLE_CFG])
    instance = dg.DagsterInstance.ephemeral()
    states = []
    for n in range(1, 4):
        publish(feed, cfg, TABLE, n)
        outcome = run_table(cfg, TABLE, instance)
        assert outcome.ok and outcome.new_batch == f"b{n:06d}", outcome
        assert outcome.figures["target"]["applied_batch"] == n
        states.append(snapshot(cfg))
    return SimpleNamespace(root=root, cfg=cfg, feed=feed, states=states, final=states[-1],
                           batches=instance.get_dynamic_partitions(f"{TABLE}__batches"),
                           parts=instance.get_dynamic_partitions(PARTS))


def test_the_feed_moves_and_deletes_keys_across_batches(built):
    regions = [{k: r["region"] for k, r in s.items()} for s in built.states]
    moved = {k for a, b in zip(regions, regions[1:]) for k in set(a) & set(b) if a[k] != b[k]}
    deleted = {k for a, b in zip(regions, regions[1:]) for k in set(a) - set(b)}
    assert len(moved) >= 3 and len(deleted) >= 3, (moved, deleted)
    assert sorted(built.parts) == ["region=amer", "region=apac", "region=emea"]
    assert differences(list(built.final.values()), read_export(built.feed["export"])) == []
    for region, paths in files_by_partition(built.cfg).items():  # each key in its latest image's partition
        assert all(p.startswith(f"region={region}/") for p in paths)


@pytest.fixture
def copy(built, tmp_path):
    """The built warehouse (and landing area) copied, with a Dagster instance that knows its
    partitions: each test backfills its own copy."""
    shutil.copytree(built.root / "warehouse", tmp_path / "warehouse")
    shutil.copytree(built.root / "landing", tmp_path / "landing")
    cfg = write_config(tmp_path, [TABLE_CFG])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(f"{TABLE}__batches", built.batches)
    instance.add_dynamic_partitions(PARTS, built.parts)
    assert snapshot(cfg) == built.final
    return SimpleNamespace(cfg=cfg, instance=instance, defs=build_definitions(cfg))


def test_backfill_one_partition_rebuilds_it_alone_to_the_same_content(copy, built):
    before_files = files_by_partition(copy.cfg)
    version = delta_versions(copy.cfg)["target"]
    result = execute(copy.defs, APPLY, copy.instance, partition_key="region=emea")

    tg = materialized(result)["target"]
    assert tg["rows_written"] == sum(1 for r in built.final.values() if r["region"] == "emea")
    assert tg["rows"] == len(built.final) and tg["delta_version"] == version + 1
    assert tg["rebuilt_as_of_batch"] == 3
    assert [e.partition for e in result.get_asset_materialization_events()] == ["region=emea"]
    assert all(check_results(result).values())

    assert snapshot(copy.cfg) == built.final  # same keys, same values, _cdc_order included
    after_files = files_by_partition(copy.cfg)
    assert after_files["amer"] == before_files["amer"] and after_files["apac"] == before_files["apac"]
    assert after_files["emea"] and after_files["emea"].isdisjoint(before_files["emea"])  # rewritten


def test_backfill_all_partitions_over_the_dynamic_range(copy, built):
    keys = copy.instance.get_dynamic_partitions(PARTS)
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    result = execute(copy.defs, APPLY, copy.instance, tags=tags)

    tg = materialized(result)["target"]
    assert sorted(tg["partitions"]) == sorted(keys)
    assert tg["rows_written"] == tg["rows"] == len(built.final)
    assert sorted(e.partition for e in result.get_asset_materialization_events()) == sorted(keys)
    assert all(check_results(result).values())
    assert snapshot(copy.cfg) == built.final

    # the rebuild kept what target reached: the next incremental run has nothing to do
    version = delta_versions(copy.cfg)["target"]
    result = execute(copy.defs, APPLY, copy.instance, tags={APPLY_TAG: INCREMENTAL, **tags})
    assert materialized(result)["target"].get("nothing_new") is True
    assert delta_versions(copy.cfg)["target"] == version


def test_a_backfill_with_a_staged_batch_not_yet_applied_keeps_the_applied_state(copy, built):
    """A rebuild reads staging as of the batch target reached: a batch already staged but not
    applied must not reach one partition ahead of the others."""
    events = one_region_batch(built.final, "apac")
    land(copy.cfg, TABLE, "batch-0004", {"part-0001.jsonl": jsonl(events)})
    batch_id = register_batch(copy.cfg, TABLE, copy.instance)
    execute(copy.defs, f"{TABLE}_ingest_job", copy.instance, partition_key=batch_id)
    execute(copy.defs, APPLY, copy.instance, partition_key="region=apac")
    assert snapshot(copy.cfg) == built.final


def one_region_batch(state: dict, region: str) -> list[dict]:
    """Hand-written Datastream events, later than the whole feed, that touch `region` only:
    an update staying in it, a delete, and an insert."""
    in_region = sorted(k for k, r in state.items() if r["region"] == region)
    assert len(in_region) >= 2
    upd, gone = state[in_region[0]], state[in_region[1]]
    new_key = max(state) + 1000
    changes = [
        ("UPDATE-INSERT", {**{c: upd[c] for c in ("id", "customer", "status", "region")}, "amount": 4242.42}),
        ("DELETE", {c: gone[c] for c in ("id", "customer", "amount", "status", "region")}),
        ("INSERT", {"id": new_key, "customer": "new", "amount": 1.25, "status": "new", "region": region}),
    ]
    events = []
    for i, (change_type, row) in enumerate(changes):
        events.append({
            "uuid": f"00000000-0000-4000-8000-{i:012d}", "read_method": "mysql-cdc-binlog",
            "source_timestamp": f"2026-03-01T00:00:0{i}", "object": f"demo_{TABLE}",
            "source_metadata": {"table": TABLE, "database": "demo", "change_type": change_type,
                                "is_deleted": change_type == "DELETE", "primary_keys": ["id"],
                                "log_file": "mysql-bin.000900", "log_position": 1000 + 100 * i},
            "payload": row,
        })
    return events


def test_an_incremental_batch_in_one_region_rewrites_only_that_region(copy, built):
    region = "amer"
    events = one_region_batch(built.final, region)
    land(copy.cfg, TABLE, "batch-0004", {"part-0001.jsonl": jsonl(events)})
    before_files = files_by_partition(copy.cfg)
    batch_id = register_batch(copy.cfg, TABLE, copy.instance)
    execute(copy.defs, f"{TABLE}_ingest_job", copy.instance, partition_key=batch_id)
    result = execute(copy.defs, APPLY, copy.instance, tags={
        APPLY_TAG: INCREMENTAL, "dagster/asset_partition_range_start": built.parts[0],
        "dagster/asset_partition_range_end": built.parts[-1]})

    tg = materialized(result)["target"]
    assert (tg["inserts"], tg["updates"], tg["deletes"]) == (1, 1, 1)
    assert tg["partitions_rewritten"] == [f"region={region}"]
    assert all(check_results(result).values())

    after_files = files_by_partition(copy.cfg)
    for other in ("emea", "apac"):
        assert after_files[other] == before_files[other], f"{other} files were rewritten"
    assert after_files[region] != before_files[region]

    expected = {k: r for k, r in built.final.items()}
    upd, gone, new = (e["payload"] for e in events)
    expected[upd["id"]] = {**expected[upd["id"]], "amount": 4242.42}
    del expected[gone["id"]]
    expected[new["id"]] = new
    got = snapshot(copy.cfg)
    assert differences(list(got.values()), expected) == []
    untouched = set(built.final) - {upd["id"], gone["id"]}
    assert all(got[k] == built.final[k] for k in untouched)  # _cdc_ columns too

    # and a backfill of that region afterwards rebuilds the same, leaving the others alone
    state = snapshot(copy.cfg)
    files = files_by_partition(copy.cfg)
    execute(copy.defs, APPLY, copy.instance, partition_key=f"region={region}")
    assert snapshot(copy.cfg) == state
    after = files_by_partition(copy.cfg)
    assert after["emea"] == files["emea"] and after["apac"] == files["apac"]
