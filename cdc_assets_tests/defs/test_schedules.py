"""Cycles on a schedule (issue 9, item 2): `schedule:` on a table and `groups:` of tables give a
stopped `<NAME>_cycle_schedule` over `<NAME>_cycle_job`, read in `timezone:`. A tick, evaluated with
`build_schedule_context` on a real instance and warehouse, registers what landed as the sensor does
and asks for one cycle run for the tables with work, never twice for the same work; the run, executed
in-process as the daemon would launch it, ingests and applies; the sensor beside it applies nothing
again."""
from __future__ import annotations

import json

import dagster as dg
import pytest

from cdc_assets.core.config import ConfigError, load_config
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine.landing import registered
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.expected import KEY, TABLE, differences, expected_state, read_export
from cdc_assets_tests.support.feeds import generate, publish
from cdc_assets_tests.support.warehouse import delta_versions, target_rows

from .test_sensor import Daemon

DT = {"keys": [KEY], "format": "datastream-json"}
CYCLE_JOB, CYCLE_SCHEDULE = f"{TABLE}_cycle_job", f"{TABLE}_cycle_schedule"


def cfg_file(root, tables, **top) -> str:
    (root / "landing").mkdir(exist_ok=True)
    path = root / "cdc.yaml"
    path.write_text(json.dumps({"warehouse": "./warehouse", "landing": "./landing", "tables": tables, **top}))
    return str(path)


# ---- definitions (no Spark) ------------------------------------------------------------------------------

def test_a_stopped_cycle_schedule_per_scheduled_table_and_group_in_the_timezone(tmp_path):
    tables = [{"name": "ORDERS", **DT, "schedule": "*/15 * * * *"}, {"name": "CUSTOMERS", **DT},
              {"name": "PAYMENTS", **DT}, {"name": "T_LEGACY", **DT}]
    cfg = load_config(cfg_file(tmp_path, tables, timezone="Europe/Paris",
                               groups={"every_hour": {"tables": ["CUSTOMERS", "PAYMENTS"], "schedule": "0 * * * *"}}))
    defs = build_definitions(cfg)
    dg.Definitions.validate_loadable(defs)

    cycles = {s.name: s for s in defs.get_repository_def().schedule_defs if s.name.endswith("_cycle_schedule")}
    assert set(cycles) == {"ORDERS_cycle_schedule", "every_hour_cycle_schedule"}  # T_LEGACY has none
    orders, group = cycles["ORDERS_cycle_schedule"], cycles["every_hour_cycle_schedule"]
    assert (orders.cron_schedule, orders.execution_timezone, orders.job_name) == (
        "*/15 * * * *", "Europe/Paris", "ORDERS_cycle_job")
    assert (group.cron_schedule, group.execution_timezone, group.job_name) == (
        "0 * * * *", "Europe/Paris", "every_hour_cycle_job")
    for s in cycles.values():
        assert s.default_status == dg.DefaultScheduleStatus.STOPPED  # nothing starts on its own
    # one timezone for every cron string of the file: the maintenance schedules too
    assert defs.resolve_schedule_def("T_LEGACY_maintenance_schedule").execution_timezone == "Europe/Paris"
    # the cycle jobs, besides each table's own jobs (which test_definitions.py lists)
    jobs = {j.name for j in defs.resolve_all_job_defs()}
    assert {"ORDERS_cycle_job", "every_hour_cycle_job"} <= jobs
    assert not {"CUSTOMERS_cycle_job", "PAYMENTS_cycle_job", "T_LEGACY_cycle_job"} & jobs

    # without `timezone:`, UTC (Dagster's default), and without schedules, no cycle definitions at all
    plain = build_definitions(load_config(cfg_file(tmp_path, [{"name": "ORDERS", **DT, "schedule": "0 3 * * *"}])))
    assert plain.resolve_schedule_def("ORDERS_cycle_schedule").execution_timezone is None
    bare = build_definitions(load_config(cfg_file(tmp_path, [{"name": "ORDERS", **DT}])))
    assert [s.name for s in bare.get_repository_def().schedule_defs] == ["ORDERS_maintenance_schedule"]


@pytest.mark.parametrize("table, top, names", [
    ({"schedule": "*/15 * * *"}, {}, ["ORDERS", "'schedule'", "5 fields"]),
    ({"schedule": "61 * * * *"}, {}, ["ORDERS", "'schedule'", "between 0 and 59"]),
    ({"schedule": "0 3 * * *"}, {"groups": {"g": {"tables": ["ORDERS"], "schedule": "0 * * * *"}}},
     ["group 'g'", "ORDERS", "'schedule' of its own"]),
    ({"maintenance": {"schedule": "0 25 * * *"}}, {}, ["ORDERS", "'maintenance.schedule'", "between 0 and 23"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS", "NOPE"], "schedule": "0 * * * *"}}},
     ["group 'g'", "'tables'", "'NOPE'", "not a configured table"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS"], "schedule": "0 * * * *"},
                     "h": {"tables": ["CUSTOMERS", "ORDERS"], "schedule": "0 * * * *"}}},
     ["group 'h'", "'ORDERS'", "group 'g' too"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS", "ORDERS"], "schedule": "0 * * * *"}}}, ["group 'g'", "twice"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS"], "schedule": "every 15 minutes"}}}, ["group 'g'", "'schedule'"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS"]}}}, ["group 'g'", "'schedule' is required"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS"], "schedule": "0 * * * *", "cron": "x"}}}, ["group 'g'", "'cron'"]),
    ({}, {"groups": {"orders": {"tables": ["CUSTOMERS"], "schedule": "0 * * * *"}}},
     ["group 'orders'", "named like a table ('ORDERS')"]),
    ({}, {"groups": {"9lives": {"tables": ["ORDERS"], "schedule": "0 * * * *"}}}, ["'groups'", "'9lives'"]),
    ({}, {"groups": ["ORDERS"]}, ["'groups'"]),
    ({}, {"timezone": "Mars/Olympus_Mons"}, ["'timezone'", "Mars/Olympus_Mons"]),
    ({}, {"groups": {"g": {"tables": ["ORDERS"], "schedule": "0 * * * *", "parallel": 0}}},
     ["group 'g'", "'parallel'", "number of processes"]),
])
def test_a_schedule_config_error_names_the_table_or_group_and_the_field(tmp_path, table, top, names):
    tables = [{"name": "ORDERS", **DT, **table}, {"name": "CUSTOMERS", **DT}]
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file(tmp_path, tables, **top))
    for name in names:
        assert name in str(e.value), str(e.value)


# ---- ticks and runs on a real warehouse --------------------------------------------------------------------

@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:  # build_schedule_context wants a persistent instance
        yield inst


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, name: str = CYCLE_SCHEDULE):
    # as the scheduler does, inside the context: an instance it opens is closed with it
    with dg.build_schedule_context(instance=instance, repository_def=defs.get_repository_def(),
                                   resources=defs.get_repository_def().get_top_level_resources()) as context:
        return defs.resolve_schedule_def(name).evaluate_tick(context)


def launch(defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest, name: str = CYCLE_SCHEDULE):
    """What the scheduler does with a request: a run of the schedule's own job, with its config and tags."""
    job = defs.resolve_job_def(defs.resolve_schedule_def(name).job_name)
    result = job.execute_in_process(instance=instance, run_config=request.run_config, tags=request.tags)
    assert result.success
    return result


def runs_of(instance: dg.DagsterInstance, job: str) -> int:
    return len(instance.get_runs(filters=dg.RunsFilter(job_name=job)))


def tables_of(request: dg.RunRequest, op: str) -> list[str]:
    return request.run_config["ops"][op]["config"]["tables"]


@pytest.mark.spark
def test_a_tick_registers_asks_for_one_cycle_run_and_never_twice(spark, tmp_path, instance):
    feed = generate(tmp_path, changes=200, batches=3, files_per_batch=2, seed=53)
    cfg = write_config(tmp_path, [{"name": TABLE, **DT, "partition_by": ["region"], "schedule": "*/15 * * * *"}])
    defs = build_definitions(cfg)

    # ---- nothing landed: a skip with the sensor's reason, nothing registered -------------------------
    data = tick(defs, instance)
    assert data.run_requests == [] and data.skip_message == f"nothing new for {TABLE}"
    assert registered(cfg.table_dir(TABLE)) == []

    # ---- a batch landed: the tick registers it (ledger and partition), asks for one cycle run --------
    files1 = publish(feed, cfg, TABLE, 1)
    [request] = tick(defs, instance).run_requests
    assert [(b.id, list(b.files)) for b in registered(cfg.table_dir(TABLE))] == [("b000001", files1)]
    assert instance.get_dynamic_partitions(f"{TABLE}__batches") == ["b000001"]
    assert tables_of(request, f"{TABLE}__cycle") == [TABLE]
    assert request.tags["cdc/cycle"] == TABLE

    # ---- the cycle run ingests and applies, through the same ingest and apply jobs ---------------------
    launch(defs, instance, request)
    assert (runs_of(instance, f"{TABLE}_ingest_job"), runs_of(instance, f"{TABLE}_apply_job")) == (1, 1)
    assert differences(target_rows(cfg, TABLE, source_only=False), expected_state(cfg, TABLE, files1)) == []

    # ---- the next tick: nothing new, no run, nothing committed ------------------------------------------
    versions = delta_versions(cfg)
    data = tick(defs, instance)
    assert data.run_requests == [] and data.skip_message == f"nothing new for {TABLE}"
    assert delta_versions(cfg) == versions

    # ---- the sensor beside it asks for nothing the cycle did --------------------------------------------
    daemon = Daemon(defs, instance)
    assert daemon.new_requests(daemon.tick()) == []
    assert delta_versions(cfg) == versions

    # ---- while a cycle run has not finished, a tick leaves the work to it -------------------------------
    files2 = publish(feed, cfg, TABLE, 2)
    job = defs.resolve_job_def(CYCLE_JOB)
    unfinished = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    data = tick(defs, instance)
    assert data.run_requests == [] and unfinished.run_id in data.skip_message
    assert [b.id for b in registered(cfg.table_dir(TABLE))] == ["b000001"]  # the run registers it
    instance.delete_run(unfinished.run_id)

    # ---- two batches registered before the run: the run ingests both, in order, then applies --------
    [request] = tick(defs, instance).run_requests  # registers batch 2
    files3 = publish(feed, cfg, TABLE, 3)  # lands after the tick, before the run starts: the run takes it
    launch(defs, instance, request)
    assert [(b.id, list(b.files)) for b in registered(cfg.table_dir(TABLE))] == [
        ("b000001", files1), ("b000002", files2), ("b000003", files3)]
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []
    assert delta_versions(cfg)["staging"] == versions["staging"] + 2  # one commit per batch
    versions = delta_versions(cfg)
    assert tick(defs, instance).run_requests == [] and daemon.new_requests(daemon.tick()) == []
    assert delta_versions(cfg) == versions


@pytest.mark.spark
def test_a_group_tick_runs_the_cycles_of_the_tables_with_work_after_the_sensor(spark, tmp_path, instance):
    orders = generate(tmp_path / "orders", changes=120, batches=2, files_per_batch=1, seed=59)
    payments = generate(tmp_path / "payments", "PAYMENTS", changes=120, batches=2, files_per_batch=1, seed=61)
    cfg = write_config(tmp_path, [{"name": TABLE, **DT}, {"name": "PAYMENTS", **DT},
                                  {"name": "WAITS", **DT, "apply": {"min_changes": 1_000_000}}],
                       groups={"every_15m": {"tables": [TABLE, "PAYMENTS", "WAITS"], "schedule": "*/15 * * * *"}},
                       timezone="UTC")
    defs = build_definitions(cfg)
    name, op = "every_15m_cycle_schedule", "every_15m__cycle"

    data = tick(defs, instance, name)
    assert data.run_requests == [] and data.skip_message == (
        f"nothing new for {TABLE}; nothing new for PAYMENTS; nothing new for WAITS")

    # ---- both landed: one run covers both cycles -----------------------------------------------------
    o1, p1 = publish(orders, cfg, TABLE, 1), publish(payments, cfg, "PAYMENTS", 1)
    [request] = tick(defs, instance, name).run_requests
    assert tables_of(request, op) == [TABLE, "PAYMENTS"]
    launch(defs, instance, request, name)
    assert differences(target_rows(cfg, TABLE, source_only=False), expected_state(cfg, TABLE, o1)) == []
    assert differences(target_rows(cfg, "PAYMENTS", source_only=False), expected_state(cfg, "PAYMENTS", p1)) == []

    # ---- the sensor took ORDERS' next batch first: the group's run is for PAYMENTS alone -------------
    publish(orders, cfg, TABLE, 2)
    assert Daemon(defs, instance).settle() == 1  # the sensor's run of the batch, which applies it
    orders_versions = delta_versions(cfg)
    publish(payments, cfg, "PAYMENTS", 2)
    [request] = tick(defs, instance, name).run_requests
    assert tables_of(request, op) == ["PAYMENTS"]
    launch(defs, instance, request, name)
    assert delta_versions(cfg) == orders_versions  # nothing applied twice
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(orders["export"])) == []
    assert differences(target_rows(cfg, "PAYMENTS", source_only=False), read_export(payments["export"])) == []

    # ---- a staged batch whose merge waits: the tick skips it with the apply policy's reason ---------
    waits = generate(tmp_path / "waits", "WAITS", changes=60, batches=2, files_per_batch=1, seed=67)
    publish(waits, cfg, "WAITS", 1)
    [request] = tick(defs, instance, name).run_requests
    assert tables_of(request, op) == ["WAITS"]
    launch(defs, instance, request, name)  # ingest and apply: the first build never waits
    publish(waits, cfg, "WAITS", 2)
    [request] = tick(defs, instance, name).run_requests
    launch(defs, instance, request, name)  # ingests batch 2; its merge waits for 1,000,000 changes
    versions = delta_versions(cfg, "WAITS")
    data = tick(defs, instance, name)
    assert data.run_requests == [] and "WAITS: merge waits" in data.skip_message, data.skip_message
    assert delta_versions(cfg, "WAITS") == versions


@pytest.mark.spark
def test_a_group_with_parallel_runs_its_tables_in_processes_side_by_side(spark, tmp_path, instance):
    """`parallel: 2` on a group: its cycle run takes the tables' batches in two processes, as
    `cdc-assets run --parallel 2` does, and every table ends equal to its source."""
    from cdc_assets.cli.main import main

    feeds = {name: generate(tmp_path / name.lower(), name, changes=120, batches=2, files_per_batch=1, seed=seed)
             for name, seed in ((TABLE, 71), ("PAYMENTS", 73), ("ITEMS", 79))}
    cfg = write_config(tmp_path, [{"name": n, **DT} for n in feeds],
                       groups={"every_15m": {"tables": list(feeds), "schedule": "*/15 * * * *", "parallel": 2}})
    for name, feed in feeds.items():
        publish(feed, cfg, name, 1)
    assert main(["run", "--config", cfg.path]) == 0  # first builds here, in this process's Spark session
    for name, feed in feeds.items():
        publish(feed, cfg, name, 2)
    defs = build_definitions(cfg)
    [request] = tick(defs, instance, "every_15m_cycle_schedule").run_requests
    result = launch(defs, instance, request, "every_15m_cycle_schedule")
    logged = [e.user_message for e in instance.all_logs(result.run_id)]
    for name, feed in feeds.items():
        assert differences(target_rows(cfg, name, source_only=False), read_export(feed["export"])) == [], name
        # the tick registered the batch; the line shows what the run took of it
        assert any(m.startswith(f"{name}: ok;") and " new changes" in m for m in logged), (name, logged[-12:])
