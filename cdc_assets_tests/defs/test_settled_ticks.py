"""A settled table's sensor ticks cost next to nothing, and still see what lands.

Sixty-five tables' sensors tick every few seconds each on two cores: a tick of a table where
nothing landed and nothing is pending opens no Delta table (the logs' file names say nothing
changed) and asks the instance nothing. A file that lands is still registered and its ingest
asked for at the next tick, and a tick still looks in full at least every
FULL_LOOK_SECONDS (what a full tick does besides registering: freeing a dead run's pool place,
adding batch partitions a new Dagster instance lacks)."""
from __future__ import annotations

import dagster as dg
import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import TableNames
from cdc_assets.engine import delta, landing
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.expected import KEY, TABLE, differences, read_export
from cdc_assets_tests.support.feeds import generate, publish
from cdc_assets_tests.support.warehouse import target_rows

from .test_sensor import BATCH, Daemon


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


class Opened:
    """Counts the Delta tables opened (every open goes through engine.delta.load)."""

    def __init__(self, monkeypatch):
        self.count = 0
        real = delta.load

        def load(*args, **kw):
            self.count += 1
            return real(*args, **kw)

        monkeypatch.setattr(delta, "load", load)

    def during(self, fn):
        before = self.count
        out = fn()
        return out, self.count - before


def test_settled_ticks_open_nothing_and_what_lands_is_still_taken(tmp_path, instance, monkeypatch):
    feed = generate(tmp_path, changes=120, batches=2, files_per_batch=1, seed=5)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    publish(feed, cfg, TABLE, 1)
    assert daemon.settle() == 1  # the batch's run, which applies it
    opened = Opened(monkeypatch)

    # ---- settled: the first tick looks in full, the next ones open no Delta table ------------------
    daemon.tick()
    for _ in range(3):
        data, n = opened.during(daemon.tick)
        assert n == 0
        assert data.run_requests == [] and not data.dynamic_partitions_requests
        assert data.skip_message == f"nothing new for {TABLE}"

    # ---- a file lands: the next tick registers it and asks for the run that ingests and applies it ---
    publish(feed, cfg, TABLE, 2)
    data = daemon.tick()
    assert [(r.job_name, r.partition_key) for r in data.run_requests] == [(BATCH, "b000002")]
    daemon.launch(data.run_requests[0])
    assert daemon.new_requests(daemon.tick()) == []
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []

    # ---- settled again --------------------------------------------------------------------------------
    daemon.tick()
    assert opened.during(daemon.tick)[1] == 0


def batch_partitions_name() -> str:
    return TableNames(TABLE).batches


def test_a_settled_table_is_still_looked_at_in_full_every_full_look_seconds(tmp_path, instance, monkeypatch):
    feed = generate(tmp_path, changes=60, batches=1, files_per_batch=1, seed=6)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    publish(feed, cfg, TABLE, 1)
    assert daemon.settle() == 1
    daemon.tick()
    # the instance forgets the batch partitions (a new Dagster home): only a full look adds them back
    instance.delete_dynamic_partition(batch_partitions_name(), "b000001")
    assert not daemon.tick().dynamic_partitions_requests
    monkeypatch.setattr(landing, "FULL_LOOK_SECONDS", 0.0)
    data = daemon.tick()
    assert [list(r.partition_keys) for r in data.dynamic_partitions_requests] == [["b000001"]]
    assert data.run_requests == []


def test_ticks_while_a_batch_waits_for_its_run_open_no_delta_table_and_ask_for_the_same_run(tmp_path, instance,
                                                                                              monkeypatch):
    # A batch's run takes seconds, in which a sensor ticks again: with many tables, some are always
    # in that state. Such a tick reads the ledger and the steps' versions only when a log has a commit
    # since the last tick, and asks for the same run under the same run key.
    feed = generate(tmp_path, changes=80, batches=2, files_per_batch=1, seed=7)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    publish(feed, cfg, TABLE, 1)
    first = daemon.tick()
    assert [(r.job_name, r.partition_key) for r in first.run_requests] == [(BATCH, "b000001")]
    opened = Opened(monkeypatch)
    for _ in range(3):
        data, n = opened.during(daemon.tick)
        assert n == 0
        assert [r.run_key for r in data.run_requests] == [first.run_requests[0].run_key]

    # ---- what lands meanwhile is registered, and each batch still gets its run, in order -------------
    publish(feed, cfg, TABLE, 2)
    data = daemon.tick()
    assert [r.partition_key for r in data.run_requests] == ["b000001"]  # the next batch waits for the first
    daemon.launch(data.run_requests[0])
    data = daemon.tick()
    assert [r.partition_key for r in daemon.new_requests(data)] == ["b000002"]
    daemon.launch(daemon.new_requests(data)[0])
    assert daemon.new_requests(daemon.tick()) == []
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []
