"""What Dagster's Declarative Automation runs, and what stays with the landing sensor.

The assets that follow another one, each table's SCD2 `history` (after `changes`) and its
BigQuery copy (after `target`), are materialized once their upstream updated, when none of its
partitions is in progress and they are not in progress themselves (`follows_upstream`). The copy
also waits until target's blocking checks (`keys_unique`) pass, so a target with duplicate keys
is never copied. `cdc_automation_sensor` evaluates them and the UI's automation page shows, per
evaluation, which part of the condition held.

From a landed file to target the flow stays with the landing sensor (defs/sensors.py), since its
rules are not conditions on materializations: batches are ingested one at a time in batch order
(an ingest of a later batch first would count the earlier one as done); an apply is due by the
table's `apply:` policy (pending change count or the oldest pending batch's age, read from the
warehouse, not from Dagster's event log); a staged batch whose `batch_accounted` failed holds it;
its run carries the target's partition range, and its run key the target version, so a restored
target is applied again. A run of `cdc-assets run` or of a cycle materializes these assets in
its own runs; the condition then sees them updated after their upstream and asks for nothing.
"""
from __future__ import annotations

import dagster as dg

AUTOMATION_SENSOR = "cdc_automation_sensor"


def follows_upstream() -> dg.AutomationCondition:
    """`AutomationCondition.eager()` without its wait for missing upstream partitions: the batch
    partitions a table had before this Dagster instance (a new instance never confuses the
    warehouse) were never materialized in it and would hold the asset forever; what it
    reads is what the warehouse holds, whichever instance ran it."""
    return (dg.AutomationCondition.any_deps_updated().since_last_handled()
            & ~dg.AutomationCondition.any_deps_in_progress()
            & ~dg.AutomationCondition.in_progress()).with_label("after its upstream updated")


def follows_checked_upstream() -> dg.AutomationCondition:
    """After the upstream updated and its blocking checks passed."""
    return (follows_upstream() & dg.AutomationCondition.all_deps_blocking_checks_passed()) \
        .with_label("after its upstream updated and passed its blocking checks")


def automation_sensor(keys: list[dg.AssetKey]) -> dg.AutomationConditionSensorDefinition:
    """The sensor over the assets with a condition (`keys`)."""
    # Running by default: it only ever asks for assets that follow an update, which happens only
    # once a landing sensor, a schedule or a user materializes something.
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR, target=dg.AssetSelection.assets(*keys), default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="Materializes each table's history after its changes, and its BigQuery copy after its "
                    "target (once target's blocking checks pass).")
