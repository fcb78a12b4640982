"""Every key `cdc.yaml` accepts, with what it takes, its default and what it means.

config.py validates against these (the sets of allowed keys are read from here), and the
configuration page of the documentation shows `reference()` as written here (a test holds the
page equal to it), so the keys a file may use and the keys the manual describes are one list.
`python -m cdc_assets.core.config_keys` prints the reference.
"""
from __future__ import annotations

from dataclasses import dataclass

from .formats import FORMATS
from .maintenance_policy import DEFAULT_SCHEDULE

DURATION = "a duration: `90s`, `15m`, `2h`, `1d` (a bare number is seconds)"
CRON = "a cron string of 5 fields, read in `timezone`"
NAMES = "a list of column names"


@dataclass(frozen=True)
class Key:
    path: str  # where the key sits: `tables[].apply.min_changes`; `groups.NAME.x` for a named entry
    takes: str
    default: str  # "required", or what holds without the key
    meaning: str

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def parent(self) -> str:
        return self.path.rsplit(".", 1)[0] if "." in self.path else ""


KEYS: tuple[Key, ...] = (
    Key("warehouse", "a folder (relative to cdc.yaml), `gs://bucket/prefix` or `s3://bucket/prefix`", "required",
        "Where the Delta tables are kept, one folder per table."),
    Key("landing", "a folder (relative to cdc.yaml) or `gs://bucket/prefix`", "required",
        "Where change files arrive: a table's files under `<landing>/<TABLE>/**`."),
    Key("spark", "a mapping of Spark settings to values", "`spark.master: local[2]`",
        "Settings of the Spark sessions that big batches and imports run on."),
    Key("timezone", "an IANA zone name, e.g. `Europe/Paris`", "UTC", "The zone every cron string in the file is read in."),
    Key("groups", "a mapping of group names to groups", "none",
        "Tables whose cycles run together on one schedule."),
    Key("groups.NAME.tables", "a list of table names", "required", "The group's tables, each in one group at most."),
    Key("groups.NAME.schedule", CRON, "required", "When the group's cycle runs."),
    Key("groups.NAME.parallel", "a whole number, 1 or more", "1", "Processes the group's tables run in side by side."),
    Key("tables", "a list of tables", "required", "The tables kept in sync, at least one."),
    Key("tables[].name", "a letter, then letters, digits or `_` (at most 128)", "required",
        "The table's name: its folder in the warehouse and its landing sub-folder."),
    Key("tables[].keys", "1 to 16 column names", "required (a PostgreSQL source: its primary key)", "The source's key columns: a key is exactly its value."),
    Key("tables[].format", ", ".join(f"`{f}`" for f in FORMATS), "required", "How the table's change records are read."),
    Key("tables[].options", "a mapping", "none", "The `changeset` format's options; other formats take none."),
    Key("tables[].options.op_column", "a column name", "required for `changeset`", "The column holding each row's operation."),
    Key("tables[].options.inserts", "a list of op values", "none", "The op values that insert."),
    Key("tables[].options.updates", "a list of op values", "none", "The op values that update (inserts or updates are required)."),
    Key("tables[].options.deletes", "a list of op values", "required for `changeset`", "The op values that delete."),
    Key("tables[].options.truncates", "a list of op values", "none",
        "The op values that truncate: every row whose latest change ranks at or below the truncate's is deleted."),
    Key("tables[].options.sequence_by", NAMES, "arrival order",
        "The columns that order a key's changes, compared in turn (numbers as numbers, ISO 8601 times as time; see "
        "\"Formats, types and behaviour\" below); ties go by arrival."),
    Key("tables[].partition_by", NAMES, "none", "The target's partition columns."),
    Key("tables[].base_snapshot", "a file or folder (relative to cdc.yaml)", "none",
        "A source export the table starts from; its rows rank below every change. A Parquet export, or a local "
        "CSV export whose every column `columns:` declares, is read column by column (much faster than row by row)."),
    Key("tables[].reconcile_with", "a file or folder (relative to cdc.yaml)", "none",
        "An export the `reconciles_with_source` check compares the target with."),
    Key("tables[].columns", "a mapping of column names to types", "the files' own types, else inferred",
        "Types of columns whose files carry none (JSON, CSV): `boolean`, `int`, `long`, `double`, `string`, `date`, "
        "`timestamp`, `timestamp_ntz`, `binary`, `decimal(p,s)`."),
    Key("tables[].source", "`bigquery://project.dataset.table` or `postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE`",
        "none (landed files)",
        "Read the changes from a BigQuery table instead of landed files (formats `bigquery-append`, `bigquery-cdc`), "
        "or capture them from a PostgreSQL table (format implied; `keys` default to its primary key; the password "
        "and TLS come from libpq: `PGPASSWORD`, `~/.pgpass`, `PGSSLMODE`)."),
    Key("tables[].capture", "`changelog` or `logical`", "`changelog`",
        "How a PostgreSQL source's changes are captured (`cdc-assets capture enable`): a trigger-filled changelog, "
        "or a publication and a logical replication slot (needs `wal_level=logical`)."),
    Key("tables[].max_retained_wal_mb", "a whole number of MiB, 1 or more", "`1024` with `capture: logical`",
        "The `slot_retained_wal` check warns once the table's replication slot keeps more WAL than this on the "
        "PostgreSQL server."),
    Key("tables[].source_position", "a column name (`a.b` for a record's field)", "required for `bigquery-cdc`",
        "The source column that grows as rows are appended."),
    Key("tables[].publish", "a mapping", "none", "Copies of the target kept elsewhere."),
    Key("tables[].publish.bigquery", "`project.dataset.table`", "none", "A BigQuery table kept equal to the target."),
    Key("tables[].change_feed", "`true` or `false`", "`false`", "The target records Delta's change data feed."),
    Key("tables[].apply", "a mapping", "every batch is merged", "When pending changes are merged into the target."),
    Key("tables[].apply.min_changes", "a whole number, 1 or more", "none", "Merge once this many changes are pending."),
    Key("tables[].apply.max_staleness", DURATION, "none", "Merge once the oldest pending change has waited this long."),
    Key("tables[].schedule", CRON, "none", "Run this table's cycle on a schedule (not with a group)."),
    Key("tables[].maintenance", "a mapping", "see its keys", "Compaction, trims and vacuum of the table's Delta tables."),
    Key("tables[].maintenance.retention", DURATION + ", at least 1h", "`7d`",
        "How long a removed file stays readable: earlier versions can be read and restored that long."),
    Key("tables[].maintenance.zorder_by", NAMES, "none (compaction only)", "Z-order the target by these columns."),
    Key("tables[].maintenance.trim_changes_after", DURATION, "none (kept)",
        "Applied batches registered longer ago leave `changes`; not with `history`."),
    Key("tables[].maintenance.trim_staging_after", DURATION, "none (kept whole)",
        "Applied batches registered longer ago keep only each key's latest change in `staging`."),
    Key("tables[].maintenance.schedule", CRON, f"`{DEFAULT_SCHEDULE}`", "When the maintenance schedule runs (it starts stopped)."),
    Key("tables[].insert_only", "`true` or `false`", "`false`", "Append batches without a MERGE; an update or delete goes to quarantine."),
    Key("tables[].quarantine_limit", "a share above 0 and at most 1 (`0.5`: half), or `none`", "`1`",
        "A batch fails the table's run (its `quarantine_within_limit` check fails, the run says FAILED with the first "
        "reasons, exit 1) once at least this share of its records went to quarantine; `1`: only a batch whose every "
        "record did; `none`: the table accepts any batch. The batch's valid records are applied either way, and "
        "the next batch runs as usual."),
    Key("tables[].deletes", "`hard` or `soft`", "`hard`",
        "`soft`: a deleted key keeps its last live row in the target, `_cdc_deleted` true, with the delete's "
        "ordering key."),
    Key("tables[].partial_updates", "`true` or `false`", "`false`",
        "An update carries only what changed: a null or absent column keeps the key's value (the latest non-null "
        "one by ordering key since the key's last delete or truncate, whatever the arrival order)."),
    Key("tables[].widen_to_text", "`true` or `false`", "`true`",
        "Whether a value that is not a number (or not a boolean) widens an inferred column to text (said in the "
        "run's summary line and the batch's `batch_accounted` check); `false`: that change goes to quarantine, "
        "naming the column, and the column keeps its type. Declared columns always keep theirs."),
    Key("tables[].history", "`true`, `false` or a mapping", "`false`",
        "A `history` table keeps every version of each key (SCD type 2)."),
    Key("tables[].history.track_except", NAMES, "none (every change opens a version)",
        "A change that touches only these columns updates the key's current version in place."),
    Key("tables[].rename", "a mapping of source names to target names", "none",
        "Target names for source columns: one a target cannot hold, one the source renamed (it keeps landing in "
        "its target column), or one you want named otherwise."),
)


def keys_under(parent: str) -> set[str]:
    """The names of the keys directly under `parent` ("" for the top level, `tables[]` for a table)."""
    return {k.name for k in KEYS if k.parent == parent}


def reference() -> str:
    """The keys as a Markdown table, in the order above."""
    rows = ["| key | takes | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{k.path}` | {k.takes} | {k.default} | {k.meaning} |" for k in KEYS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
