"""The landing sensor, evaluated tick by tick with `build_sensor_context` on a real
instance, and its run requests executed in-process as the daemon would launch them:
complete files become one batch in the warehouse ledger, files still being written
are left alone, a request is made once per batch, and the incremental apply follows
the ingest."""
from __future__ import annotations

import dataclasses
import os

import dagster as dg
import pytest
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import APPLY_TAG, INCREMENTAL
from cdc_assets.engine.landing import registered
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.expected import KEY, TABLE, differences, expected_state, read_export
from cdc_assets_tests.support.feeds import generate, publish
from cdc_assets_tests.support.warehouse import delta_versions, target_rows

pytestmark = pytest.mark.spark

SENSOR = f"{TABLE}__landing_sensor"
INGEST, APPLY = f"{TABLE}_ingest_job", f"{TABLE}_apply_job"
BATCH = f"{TABLE}_batch_job"  # a batch's one run, when target is not partitioned: changes, staging, target


class Daemon:
    """What the sensor daemon does with a tick, minus the process launching: it applies
    the dynamic partition requests and launches each run request whose run key no run
    of this sensor has used yet (the run-key idempotence of `dagster._daemon.sensor`).
    Then, as the automation sensor's tick, it evaluates the assets' automation conditions
    and launches the job of each asset they request."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, table: str = TABLE,
                 sensor: str | None = None):
        self.defs, self.instance = defs, instance
        self.sensor = defs.resolve_sensor_def(sensor or f"{table}__landing_sensor")
        self.cursor: str | None = None
        self.automation_cursor = None
        # the job that materializes just that asset, for each asset with an automation condition
        graph = defs.resolve_asset_graph()
        automated = {k for k in graph.materializable_asset_keys if graph.get(k).automation_condition is not None}
        self.followers = {}
        for job in defs.resolve_all_job_defs():
            keys = job.asset_layer.executable_asset_keys
            if len(keys) == 1 and keys <= automated and not job.name.startswith("__"):
                self.followers[next(iter(keys))] = job.name
        # the automation sensor runs from the start (on by default): its first evaluation is the
        # baseline the later ones see updates against
        assert self.automation() == []

    def automation(self) -> list[str]:
        """One evaluation of the automation conditions: the jobs of the assets it requests."""
        result = dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance,
                                                   cursor=self.automation_cursor)
        self.automation_cursor = result.cursor
        return [job for key, job in sorted(self.followers.items()) if result.get_num_requested(key)]

    def tick(self):
        # With an instance_ref, as the daemon's gRPC call builds it: run requests for dynamic
        # partitions are then resolved against the instance (and this tick's add requests).
        # and with the definitions' resources, as the daemon gives them to a sensor
        context = dg.build_sensor_context(instance=self.instance, instance_ref=self.instance.get_ref(),
                                          definitions=self.defs, cursor=self.cursor,
                                          resources=self.defs.get_repository_def().get_top_level_resources())
        data = self.sensor.evaluate_tick(context)
        self.cursor = data.cursor
        for req in data.dynamic_partitions_requests or []:
            assert isinstance(req, dg.AddDynamicPartitionsRequest)
            self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        return data

    def launched(self, run_key: str) -> bool:
        tags = {RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: self.sensor.name}
        return bool(self.instance.get_runs(filters=dg.RunsFilter(tags=tags)))

    def new_requests(self, data) -> list[dg.RunRequest]:
        return [r for r in data.run_requests if not self.launched(r.run_key)]

    def launch(self, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        assert request.run_key and not self.launched(request.run_key)
        assert request.tags.get(SENSOR_NAME_TAG) == self.sensor.name
        result = self.defs.resolve_job_def(request.job_name).execute_in_process(
            instance=self.instance, partition_key=request.partition_key,
            tags={**request.tags, RUN_KEY_TAG: request.run_key}, raise_on_error=True)
        assert result.success
        return result

    def settle(self, max_ticks: int = 8) -> int:
        """Tick and launch until neither the landing sensor nor the automation conditions ask for
        anything new; returns the runs launched."""
        self.launched_jobs, self.materialized = [], []
        for _ in range(max_ticks):
            todo = self.new_requests(self.tick())
            for r in todo:
                result = self.launch(r)
                self.launched_jobs.append(r.job_name)
                # what each run materialized, as the UI's run page lists it
                self.materialized.append(sorted(e.asset_key.path[-1] for e in result.get_asset_materialization_events()))
            followers = self.automation()
            for job in followers:
                assert self.defs.resolve_job_def(job).execute_in_process(instance=self.instance).success
                self.launched_jobs.append(job)
            if not todo and not followers:
                return len(self.launched_jobs)
        raise AssertionError("the sensor never settled")


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:  # build_sensor_context wants a persistent instance
        yield inst


def ledger(cfg) -> list:
    return registered(cfg.table_dir(TABLE))


def test_sensor_ticks_register_request_once_and_apply(spark, tmp_path, instance):
    feed = generate(tmp_path, changes=200, batches=2, files_per_batch=2, seed=31)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json",
                                   "partition_by": ["region"]}])
    defs = build_definitions(cfg)
    daemon = Daemon(defs, instance)
    landing = cfg.landing_dir(TABLE)

    # ---- nothing landed: a skip, nothing registered ----------------------------------------------
    data = daemon.tick()
    assert data.run_requests == [] and data.skip_message and not data.dynamic_partitions_requests
    assert ledger(cfg) == []

    # ---- files still being written are not taken ----------------------------------------------------
    os.makedirs(os.path.join(landing, "_batch-in-progress"))
    os.makedirs(os.path.join(landing, "batch-0009"))
    writing = {"_batch-in-progress/part-0001.jsonl": "{not json yet",
               "batch-0009/.part-0001.jsonl.tmp": "{not json yet",
               "batch-0009/_part-0002.jsonl": "{not json yet",
               ".loose.jsonl": "{not json yet"}
    for name, text in writing.items():
        with open(os.path.join(landing, name), "w") as fh:
            fh.write(text)
    data = daemon.tick()
    assert data.run_requests == [] and not data.dynamic_partitions_requests
    assert ledger(cfg) == []

    # ---- a complete batch: one ledger entry, one ingest request, one partition add ------------------
    files1 = publish(feed, cfg, TABLE, 1)
    data = daemon.tick()
    assert [(b.id, list(b.files)) for b in ledger(cfg)] == [("b000001", files1)]
    assert [(r.job_name, r.partition_key) for r in data.run_requests] == [(INGEST, "b000001")]
    ingest_request = data.run_requests[0]
    assert ingest_request.run_key and ingest_request.tags.get(SENSOR_NAME_TAG) == SENSOR
    [add] = data.dynamic_partitions_requests
    assert (add.partitions_def_name, list(add.partition_keys)) == (f"{TABLE}__batches", ["b000001"])
    assert instance.get_dynamic_partitions(f"{TABLE}__batches") == ["b000001"]

    # ---- a second tick before the run: no new batch, no partition add, the same run key ------------
    data = daemon.tick()
    assert [b.id for b in ledger(cfg)] == ["b000001"]
    assert not data.dynamic_partitions_requests
    assert [r.run_key for r in data.run_requests] == [ingest_request.run_key]
    assert delta_versions(cfg) == {"batches": 0}

    # ---- the ingest run, as launched from the request ----------------------------------------------
    result = daemon.launch(ingest_request)
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {"changes", "staging"}
    assert all(e.passed for e in result.get_asset_check_evaluations())
    data = daemon.tick()
    [apply_request] = daemon.new_requests(data)
    assert ingest_request.run_key not in [r.run_key for r in data.run_requests]  # no duplicate of the batch
    assert apply_request.job_name == APPLY and apply_request.tags[APPLY_TAG] == INCREMENTAL
    parts = instance.get_dynamic_partitions(f"{TABLE}__target_partitions")
    assert sorted(parts) == ["region=amer", "region=apac", "region=emea"]
    assert apply_request.tags["dagster/asset_partition_range_start"] == parts[0]
    assert apply_request.tags["dagster/asset_partition_range_end"] == parts[-1]
    # asked again until it ran, always under the same run key
    assert [r.run_key for r in daemon.tick().run_requests] == [apply_request.run_key]

    result = daemon.launch(apply_request)
    meta = {e.asset_key.path[-1]: e.event_specific_data.materialization.metadata
            for e in result.get_asset_materialization_events()}
    assert meta["target"]["applied_batch"].value == 1
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert differences(target_rows(cfg, TABLE, source_only=False), expected_state(cfg, TABLE, files1)) == []
    keys = [r["_cdc_key"] for r in target_rows(cfg, TABLE, source_only=False)]
    assert keys and len(set(keys)) == len(keys)

    # ---- quiet: a skip, and nothing committed -------------------------------------------------------
    versions = delta_versions(cfg)
    data = daemon.tick()
    assert daemon.new_requests(data) == [] and not data.dynamic_partitions_requests
    assert delta_versions(cfg) == versions

    # ---- the next batch goes the same way; the files being written are still left alone ------------
    files2 = publish(feed, cfg, TABLE, 2)
    assert daemon.settle() == 2  # its ingest, then the apply
    assert [(b.id, list(b.files)) for b in ledger(cfg)] == [("b000001", files1), ("b000002", files2)]
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []
    assert "quarantine" not in delta_versions(cfg)  # the half-written files were never read


def test_a_batch_landing_while_the_previous_ingest_is_pending_loses_nothing(spark, tmp_path, instance):
    """Runs of one tick and the next may start in any order (they are separate processes
    waiting on the table lock): the sensor's requests must never let a later batch be
    ingested before an earlier one and so skip it."""
    feed = generate(tmp_path, changes=150, batches=2, files_per_batch=1, seed=37)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)

    publish(feed, cfg, TABLE, 1)
    pending = daemon.new_requests(daemon.tick())
    publish(feed, cfg, TABLE, 2)
    pending += [r for r in daemon.new_requests(daemon.tick()) if r.run_key not in {p.run_key for p in pending}]
    assert [b.id for b in ledger(cfg)] == ["b000001", "b000002"]
    # the daemon launches what it has, the later request happening to take the lock first
    for r in reversed(pending):
        daemon.launch(r)
    daemon.settle()

    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []
    versions = delta_versions(cfg)
    assert versions["changes"] == versions["staging"] == 1  # one commit per batch, in order


def test_a_second_warehouse_with_the_same_tables_is_not_confused(spark, tmp_path, instance):
    """rules.md#tables: the warehouse alone says what is done. A new warehouse (a fresh start, or a
    second one) watched from the same Dagster instance gets its own runs: run keys of the
    first warehouse's batches must not suppress the second's."""
    feed = generate(tmp_path, changes=100, batches=1, files_per_batch=1, seed=41)
    cfg_a = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    publish(feed, cfg_a, TABLE, 1)
    assert Daemon(build_definitions(cfg_a), instance).settle() == 1  # the batch's one run

    second = tmp_path / "second"
    second.mkdir()
    cfg_b = write_config(second, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}],
                         landing=cfg_a.landing)
    assert Daemon(build_definitions(cfg_b), instance).settle() == 1
    assert differences(target_rows(cfg_b, TABLE, source_only=False), read_export(feed["export"])) == []


def test_one_sensor_for_all_tables_brings_in_each_tables_batches_and_passes_over_a_busy_one(
        spark, tmp_path, instance):
    """Many tables, one sensor: a tick looks at every table as its own sensor would, asks for each
    table's run with the same run key, and a table another run holds is left to a later tick
    while the others go on."""
    from cdc_assets.defs.sensors import ALL_TABLES_SENSOR
    from cdc_assets.engine.lock import table_lock

    other = "SHIPMENTS"
    feed = generate(tmp_path, changes=100, batches=1, files_per_batch=1, seed=43)
    cfg = write_config(tmp_path, [{"name": t, "keys": [KEY], "format": "datastream-json"} for t in (TABLE, other)])
    publish(feed, cfg, TABLE, 1)
    publish(feed, cfg, other, 1)
    daemon = Daemon(build_definitions(cfg), instance, sensor=ALL_TABLES_SENSOR)
    with table_lock(cfg.table_dir(other)):  # a run of the other table holds it
        data = daemon.tick()
        assert [r.job_name for r in data.run_requests] == [BATCH]
        assert registered(cfg.table_dir(other)) == []  # left to a later tick
    own = Daemon(build_definitions(cfg), instance)  # the table's own sensor asks for the same run
    assert [r.run_key for r in own.tick().run_requests] == [r.run_key for r in data.run_requests]

    assert daemon.settle() == 2  # each table's one batch run
    assert sorted(daemon.launched_jobs) == sorted([BATCH, f"{other}_batch_job"])
    for t in (TABLE, other):
        assert differences(target_rows(cfg, t, source_only=False), read_export(feed["export"])) == []
    assert daemon.new_requests(daemon.tick()) == []


def test_base_snapshot_first_then_apply_and_a_base_alone_is_applied(spark, tmp_path, instance):
    """The base import and the first ingest are asked for together; the apply waits for both
    (whichever run finishes first: the import's run applies when the batch is staged by then),
    and a table with only its base snapshot is applied too."""
    feed = generate(tmp_path, changes=100, batches=1, files_per_batch=1, seed=43)
    base_csv = tmp_path / "base.csv"
    base_csv.write_text("id,customer,amount,status,region\n9001,base,1.5,,emea\n9002,base,2,new,apac\n")
    cfg = write_config(tmp_path, [
        {"name": TABLE, "keys": [KEY], "format": "datastream-json", "base_snapshot": str(base_csv)},
        {"name": "ONLY_BASE", "keys": [KEY], "format": "datastream-json", "base_snapshot": str(base_csv),
         "partition_by": ["region"]},
    ])
    defs = build_definitions(cfg)
    daemon = Daemon(defs, instance)

    publish(feed, cfg, TABLE, 1)
    data = daemon.tick()
    assert sorted(r.job_name for r in data.run_requests) == sorted([f"{TABLE}_base_job", BATCH])
    batch_request = next(r for r in data.run_requests if r.job_name == BATCH)
    base_request = next(r for r in data.run_requests if r.job_name != BATCH)
    result = daemon.launch(batch_request)  # the batch's run happens to finish first: it cannot apply yet
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {"changes", "staging"}
    data = daemon.tick()
    assert APPLY not in [r.job_name for r in data.run_requests], "apply asked for before the base import"
    assert [r.run_key for r in daemon.new_requests(data)] == [base_request.run_key]
    result = daemon.launch(base_request)  # the batch is staged: the import's run applies both
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {"base", "target"}
    assert daemon.settle() == 0  # no apply of its own
    expected = dict(read_export(feed["export"]))
    expected.update(read_export(str(base_csv)))
    assert differences(target_rows(cfg, TABLE, source_only=False), expected) == []

    # a table with a base snapshot and no change files yet: its target is the base
    only = Daemon(defs, instance, "ONLY_BASE")
    only.settle()
    assert only.launched_jobs == ["ONLY_BASE_base_job", "ONLY_BASE_apply_job"]
    assert differences(target_rows(cfg, "ONLY_BASE", source_only=False), read_export(str(base_csv))) == []
    assert instance.get_dynamic_partitions("ONLY_BASE__target_partitions") == ["region=apac", "region=emea"]


def test_a_tick_while_a_run_holds_the_table_does_not_wait_and_registers_later(spark, tmp_path, instance,
                                                                            monkeypatch):
    """Dagster ends a sensor evaluation after 60 s and an apply holds its table for minutes: a
    tick that finds the table held gives up registering at once, still asks for the runs of
    batches already registered, and a later tick registers what landed meanwhile."""
    from cdc_assets.defs import sensors
    from cdc_assets.engine.lock import table_lock

    monkeypatch.setattr(sensors, "TICK_LOCK_SECONDS", 0.2)
    feed = generate(tmp_path, changes=100, batches=2, files_per_batch=1, seed=43)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    publish(feed, cfg, TABLE, 1)
    [ingest] = daemon.tick().run_requests
    files2 = publish(feed, cfg, TABLE, 2)

    with table_lock(cfg.table_dir(TABLE)):  # as an apply holds it
        busy = daemon.tick()
        assert [b.id for b in ledger(cfg)] == ["b000001"]  # nothing registered while the table is held
        assert [r.run_key for r in busy.run_requests] == [ingest.run_key]  # the pending batch still asked for
    assert [(b.id, list(b.files)) for b in ledger(cfg)][1:] == []
    daemon.tick()
    assert [(b.id, list(b.files)) for b in ledger(cfg)][1:] == [("b000002", files2)]
    daemon.settle()
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []


def test_a_waiting_merge_is_asked_for_once_it_is_due_and_again_after_a_restore(spark, tmp_path, instance):
    """One run per batch: the batch's run takes it into changes and staging and, when the merge is due,
    into target; `apply: {min_changes}`: a batch that does not make it due is staged in its run and target
    is not materialized there, the sensor says why it waits, and asks for the apply on its own once it is
    due (a later batch's run applies it); after a restore it asks again for the same batch."""
    from cdc_assets.engine.target_versions import restore
    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql
    from cdc_assets_tests.support.warehouse import target_rows, values

    cfg = write_config(tmp_path, [{"name": TABLE, "keys": ["id"], "format": "datastream-json",
                                   "apply": {"min_changes": 3}}])
    daemon = Daemon(build_definitions(cfg), instance)
    land(cfg, TABLE, "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in (1, 2, 3)])})
    daemon.settle()
    assert daemon.launched_jobs == [BATCH]  # the first build does not wait, and is in the batch's run
    assert daemon.materialized == [["changes", "staging", "target"]]
    land(cfg, TABLE, "batch-2", {"p.jsonl": jsonl([mysql("UPDATE", {"id": i, "v": "b"}, 1, 10 + i) for i in (1, 2)])})
    daemon.settle()
    assert daemon.launched_jobs == [BATCH]  # 2 changes staged, fewer than 3
    assert daemon.materialized == [["changes", "staging"]]  # target is not shown as materialized
    assert daemon.tick().skip_message == f"{TABLE}: merge waits: 2 changes pending; min_changes 3"
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "a", 2: "a", 3: "a"}
    land(cfg, TABLE, "batch-3", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 3, "v": "c"}, 1, 20),
                                                   mysql("DELETE", {"id": 1, "v": None}, 1, 21)])})
    daemon.settle()
    assert daemon.launched_jobs == [BATCH]  # 4 pending: due, in the batch's run, with no apply run after it
    assert daemon.materialized == [["changes", "staging", "target"]]
    assert values(target_rows(cfg, TABLE), "id", "v") == {2: "b", 3: "c"}

    restore(TABLE, cfg.table_dir(TABLE), 0)  # back to batch 1: batches 2 and 3 are due again
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "a", 2: "a", 3: "a"}
    daemon.settle()
    assert daemon.launched_jobs == [APPLY]
    assert values(target_rows(cfg, TABLE), "id", "v") == {2: "b", 3: "c"}


def test_a_batch_that_does_not_add_up_holds_the_apply_until_its_ingest_passes(spark, tmp_path, instance, monkeypatch):
    """batch_accounted fails for a staged batch: the sensor does not ask for the apply (saying why);
    once the batch's ingest is re-run and the check passes, it does."""
    from cdc_assets.engine import checks
    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql
    from cdc_assets_tests.support.warehouse import target_rows, values

    cfg = write_config(tmp_path, [{"name": TABLE, "keys": ["id"], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    land(cfg, TABLE, "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1)])})
    daemon.settle()
    real = checks.batch_accounting
    monkeypatch.setattr(checks, "batch_accounting", lambda *a, **kw: dataclasses.replace(real(*a, **kw), adds_up=False))
    land(cfg, TABLE, "batch-2", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 2)])})
    daemon.settle()
    assert daemon.launched_jobs == [BATCH] and daemon.materialized == [["changes", "staging"]]  # not applied
    assert daemon.tick().skip_message == f"{TABLE}: apply waits: batch_accounted failed for b000002 " \
                                         "(re-run its ingest once the cause is fixed)"
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "a"}

    monkeypatch.setattr(checks, "batch_accounting", real)  # the cause fixed; the batch's ingest re-run
    result = daemon.defs.resolve_job_def(INGEST).execute_in_process(instance=instance, partition_key="b000002")
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    daemon.settle()
    assert daemon.launched_jobs == [APPLY]
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "b"}


def test_no_apply_is_asked_for_while_a_batch_run_that_applies_it_is_unfinished(spark, tmp_path, instance):
    """A tick between a batch run's staging and its target step sees the batch staged and not applied:
    it must not ask for an apply of its own (a second run doing what that run does); once no batch
    run is unfinished (the one here ended without applying), it does."""
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql
    from cdc_assets_tests.support.warehouse import target_rows, values

    cfg = write_config(tmp_path, [{"name": TABLE, "keys": ["id"], "format": "datastream-json"}])
    daemon = Daemon(build_definitions(cfg), instance)
    land(cfg, TABLE, "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1)])})
    [request] = daemon.tick().run_requests
    assert request.job_name == BATCH
    # the batch run, staged and not yet at its target step
    running = instance.add_run(DagsterRun(job_name=BATCH, status=DagsterRunStatus.STARTED))
    assert daemon.defs.resolve_job_def(INGEST).execute_in_process(instance=instance, partition_key="b000001").success
    data = daemon.tick()
    assert data.run_requests == [] and data.skip_message == f"{TABLE}: a batch run is unfinished; it applies what it stages"
    instance.report_run_failed(running)  # it ended before its target step
    assert [r.job_name for r in daemon.new_requests(daemon.tick())] == [APPLY]
    daemon.settle()
    assert values(target_rows(cfg, TABLE), "id", "v") == {1: "a"}


def test_the_sensor_keeps_the_history_current(spark, workdir):
    """Without `cdc-assets run`: the landing sensor's runs (ingest, apply, then history) keep
    the history's current versions equal to the target, batch after batch."""
    from cdc_assets_tests.engine.test_history import ACCOUNTS, history_rows, source_part
    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql

    cfg = write_config(workdir, [ACCOUNTS])
    with dg.instance_for_test() as instance:
        daemon = Daemon(build_definitions(cfg), instance, table="ACCOUNTS")
        for n, events in enumerate([[mysql("INSERT", {"id": 1, "balance": "1.00"}, 1, 10)],
                                    [mysql("UPDATE-INSERT", {"id": 1, "balance": "2.00"}, 1, 20),
                                     mysql("INSERT", {"id": 2, "balance": "3.00"}, 1, 21)]], start=1):
            land(cfg, "ACCOUNTS", f"batch-{n}", {"a.jsonl": jsonl(events)})
            daemon.settle()
            assert "ACCOUNTS_history_job" in daemon.launched_jobs
            rows = history_rows(cfg, "ACCOUNTS")
            assert source_part(r for r in rows if r["_cdc_is_current"]) == source_part(target_rows(cfg, "ACCOUNTS"))
        assert len(rows) == 3
        assert daemon.settle() == 0  # nothing new: no history run asked for again
