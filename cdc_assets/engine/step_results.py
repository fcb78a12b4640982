"""What a table step did, as the step returns it: a frozen dataclass per step.

Each step result gives `to_metadata()`, its entries of the Dagster materialization by name, in a
fixed order (defs/metadata.as_metadata gives each value its Dagster type), and `to_json()`, the same
entries as JSON values. A field that is None is no entry: a step says only what applies to it (an
apply that found nothing new says so, and which batch the target holds). `from_metadata` reads a
result back from a materialization's entries (the run loop's summary line).
"""
from __future__ import annotations

import dataclasses

from ..core.figures import Figures


@dataclasses.dataclass(frozen=True)
class StageResult(Figures):
    """A `staging` step: each key's latest change of a batch staged."""
    already_committed: bool | None = None  # the batch was staged before: nothing done
    changes: int | None = None  # the batch's changes
    staged: int | None = None
    superseded_in_batch: int | None = None  # changes a later change of their key in the batch replaced
    compacted: bool | None = None
    delta_version: int | None = None
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class HistoryResult(Figures):
    """A `history` step: an update by the new batches, or a (first) build."""
    nothing_new: bool | None = None
    history_batch: int | None = None  # the last batch the history holds
    batches: str | None = None  # an update's "first..last"
    built: str | None = None  # a build's kind: build, retype, rebuild, or truncate (one closing many versions)
    changes_read: int | None = None
    truncates_read: int | None = None
    keys_touched: int | None = None
    versions_before: int | None = None  # the touched keys' versions before the update
    versions_added: int | None = None
    versions_relabelled: int | None = None
    versions_removed: int | None = None
    files_added: int | None = None
    rows: int | None = None
    delta_version: int | None = None
    previous_version: int | None = None  # before a rebuild
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class ApplyResult(Figures):
    """A `target` step: an incremental apply, a first build, a type widening or a rebuild."""
    nothing_new: bool | None = None  # every staged batch was applied already
    nothing_applied_yet: bool | None = None  # a rebuild of a target no apply has built
    batches_applied: str | None = None  # "first..last"
    applied_batch: int | None = None  # the last batch the target holds
    appended: bool | None = None  # an insert_only table's rows, appended
    changes_pending: int | None = None
    keys_changed: int | None = None
    inserts: int | None = None
    updates: int | None = None
    deletes: int | None = None
    stale_skipped: int | None = None  # winners older than the key's row
    superseded: int | None = None  # changes a later change of their key replaced
    rows_written: int | None = None  # a build's rows
    files_added: int | None = None
    files_removed: int | None = None
    files_before: int | None = None
    partitions_rewritten: tuple[str, ...] | None = None
    rows: int | None = None
    delta_version: int | None = None
    rebuilt_as_of_batch: int | None = None
    partitions: str | tuple[str, ...] | None = None  # a rebuild's partitions, or "all"
    previous_version: int | None = None  # the target's version before a rebuild
    applied_on: str | None = None  # where a batch was applied, when not in this process the usual way
    # partition columns that received "" and are stored as data from now on, the table partitioned
    # by their derived `_cdc_part_` columns (engine/partition_layout.py)
    derived_partitions: tuple[str, ...] | None = None
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class ChangesResult(Figures):
    """A `changes` step: a batch's distinct changes (a snapshot's, derived from the export) and its
    rejected records."""
    already_committed: bool | None = None  # the batch was taken before: nothing done
    files: int | None = None
    records_read: int | None = None
    changes_new: int | None = None
    inserts: int | None = None  # a snapshot's derived changes, by kind
    updates: int | None = None
    derived_deletes: int | None = None
    unchanged: int | None = None
    duplicates_skipped: int | None = None
    quarantined: int | None = None
    deletes_withheld: str | None = None  # why a snapshot derived no deletes
    # inferred columns the batch widened to text (a value that is not a number): said, as rules.md#types allows it
    widened_to_text: tuple[str, ...] | None = None
    applied_on: str | None = None  # where the batch was derived, when not in this process
    typed_columns: int | None = None  # a typed export's columns, read column by column
    compacted: bool | None = None
    delta_version: int | None = None
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class BaseResult(Figures):
    """A `base` step: the source export a table starts from, imported."""
    already_committed: bool | None = None  # the export was imported before: nothing done
    rows_read: int | None = None
    rows: int | None = None
    quarantined: int | None = None
    files: int | None = None
    typed_columns: int | None = None  # a typed export's columns, kept as typed columns
    delta_version: int | None = None
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class PublishResult(Figures):
    """A `bigquery` step: the destination brought up to the target, or why nothing was sent."""
    not_published: bool | None = None  # the table names no destination
    nothing_new: bool | None = None
    mode: str | None = None  # "changes" (the changed keys) or "all" (the whole target)
    reason: str | None = None
    batches: str | None = None  # "first..last"
    published_batch: int | None = None  # the last batch the destination holds
    target_version: int | None = None  # the target snapshot sent
    rows_sent: int | None = None
    deletes_sent: int | None = None
    rows_affected: int | None = None  # rows the MERGE changed
    destination: str | None = None
    created: bool | None = None  # the BigQuery table was created by this publish
    seconds: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublishReconciliation(Figures):
    """The `reconciles_with_target` check's report: the destination against the target snapshot the
    last publish sent. `discrepancies` is 0 when they agree."""
    published: bool
    compared: str | None = None  # "all rows", or "sample of N"
    target_version: int | None = None
    rows_target: int | None = None
    rows_bigquery: int | None = None
    missing_in_bigquery: int | None = None
    not_in_target: int | None = None
    differing_rows: int | None = None
    differing_columns: tuple[str, ...] | None = None
    discrepancies: int
