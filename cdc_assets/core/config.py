"""`cdc.yaml`: read, validated, with errors naming table and field."""
from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import yaml

from . import cycles, names, postgres
from .apply_policy import ApplyPolicy, parse_duration
from .config_keys import keys_under
from .cycles import CycleGroup
from .errors import TerminalError
from .formats import FORMATS, SPECS, ChangesetOptions, FormatSpec, format_spec, inserts
from .maintenance_policy import DEFAULT_RETENTION, DEFAULT_SCHEDULE, MIN_RETENTION, MaintenancePolicy
from .values import parse_type

TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
TOP_KEYS = keys_under("")  # every key and its meaning: config_keys.py
# Object stores a warehouse can live in (engine/storage.py), besides a local folder.
WAREHOUSE_SCHEMES = ("gs", "s3")
TABLE_KEYS = keys_under("tables[]")
APPLY_KEYS = keys_under("tables[].apply")
MAINTENANCE_KEYS = keys_under("tables[].maintenance")
# Formats a table can read from a BigQuery table instead of landed files (`source: bigquery://...`).
BIGQUERY_SOURCE_FORMATS = tuple(f for f, spec in SPECS.items() if spec.bigquery_table)
BIGQUERY_SOURCE = re.compile(r"bigquery://[A-Za-z0-9][A-Za-z0-9_.:-]*\.[A-Za-z0-9_]+\.[A-Za-z0-9_$-]+")
# `publish: {bigquery: project.dataset.table}`: where a table's target is copied after each apply.
PUBLISH_KEYS = keys_under("tables[].publish")
BIGQUERY_TABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*\.[A-Za-z0-9_]+\.[A-Za-z0-9_-]+")
CHANGESET_OPTIONS = keys_under("tables[].options")
MAX_KEYS = 16


class ConfigError(TerminalError, ValueError):
    pass


class Publish(TypedDict, total=False):
    """A table's `publish:`: where its target is copied after each apply."""
    bigquery: str  # project.dataset.table


@dataclass(frozen=True)
class TableConfig:
    name: str
    keys: tuple[str, ...]
    format: str
    options: ChangesetOptions = field(default_factory=lambda: ChangesetOptions(), hash=False, compare=False)
    partition_by: tuple[str, ...] = ()
    base_snapshot: str | None = None
    reconcile_with: str | None = None
    columns: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # declared column types
    source: str | None = None  # bigquery://project.dataset.table: the changes are that table's rows;
    # postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE: the changes are captured from that table
    capture: str | None = None  # a PostgreSQL source's capture method (core/postgres.py CAPTURE_METHODS)
    max_retained_wal_mb: int | None = None  # `capture: logical`: the slot's WAL the slot_retained_wal check allows
    source_position: str | None = None  # the source column that grows as rows are appended
    publish: Publish = field(default_factory=lambda: Publish(), hash=False, compare=False)
    change_feed: bool = False  # the target records Delta's change data feed: row-level changes per version
    apply: ApplyPolicy = field(default_factory=ApplyPolicy)  # when pending changes are merged
    maintenance: MaintenancePolicy = field(default_factory=MaintenancePolicy)  # compaction, trim, vacuum
    insert_only: bool = False  # batches are appended, never merged; an update or delete goes to quarantine
    # a batch fails the table's run once at least this share of its records went to quarantine; None: never
    quarantine_limit: float | None = 1.0
    # an update's null or absent column keeps the key's value (rules.md#rule-10; engine/combine.py)
    partial_updates: bool = False
    history: bool = False  # a `history` table: every version of each key (SCD type 2), from `changes`
    # `history: {track_except: [...]}`: a change of only these columns updates the current version in place
    history_track_except: tuple[str, ...] = ()
    # `deletes: soft` (rules.md#rule-12): a deleted key keeps a row in the target, `_cdc_deleted` true
    soft_deletes: bool = False
    schedule: str | None = None  # cron of the table's own cycle schedule (defs/schedules.py); None: none
    # source column name -> target column name, for names a target cannot hold (core/names.py);
    # keys, partition_by, columns and zorder_by name target columns
    rename: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # `widen_to_text: false`: a value that would widen an inferred column to text is quarantined instead
    widen_to_text: bool = True

    @property
    def spec(self) -> FormatSpec:
        """What the table's format is (core/formats.py)."""
        return format_spec(self.format)

    @property
    def carries_truncates(self) -> bool:
        """Whether a change of the table may truncate it (rules.md#rule-9): its format's, or an op
        value `options.truncates` lists."""
        return self.spec.truncates or bool(self.options.get("truncates"))

    @property
    def reads_bigquery(self) -> bool:
        """The table's changes are a BigQuery table's rows (it needs the `bigquery` resource)."""
        return self.source is not None and not postgres.is_postgresql(self.source)


@dataclass(frozen=True)
class Config:
    path: str
    warehouse: str
    landing: str
    tables: tuple[TableConfig, ...]
    spark: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    groups: tuple[CycleGroup, ...] = ()  # `groups:` tables whose cycles run together on one schedule
    timezone: str | None = None  # IANA name the file's cron strings are read in (None: UTC)

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def table_dir(self, name: str) -> str:
        return os.path.join(self.warehouse, name)

    def landing_dir(self, name: str) -> str:
        """Where the table's change files are: its landing folder, or for a table read from
        BigQuery, the extracts of its source in the warehouse (engine/bigquery_source.py)."""
        if any(t.name == name and t.source for t in self.tables):
            return os.path.join(self.table_dir(name), "extracts")
        return os.path.join(self.landing, name)


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """YAML's safe loader, refusing a mapping that gives one key twice (YAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class _DuplicateKey(Exception):
    def __init__(self, key: object, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


def load_config(path: str) -> Config:
    path = os.path.abspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.load(fh, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except _DuplicateKey as e:
        raise ConfigError(f"{os.path.basename(path)} line {e.line}: '{e.key}' is given twice") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return parse_config(raw, path)


def parse_config(raw: object, path: str) -> Config:
    where = os.path.basename(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with warehouse, landing and tables")
    _unknown(raw, TOP_KEYS, where)
    base_dir = os.path.dirname(path)
    for req in ("warehouse", "landing", "tables"):
        if req not in raw:
            raise ConfigError(f"{where}: field '{req}' is required")
    warehouse = _path(raw["warehouse"], base_dir, f"{where}: field 'warehouse'")
    landing = _path(raw["landing"], base_dir, f"{where}: field 'landing'")
    if "://" in warehouse and warehouse.split("://", 1)[0].lower() not in WAREHOUSE_SCHEMES:
        # the engine would write a local folder named after the URL: refuse it instead
        raise ConfigError(f"{where}: field 'warehouse' {warehouse!r}: a warehouse is a folder, gs://bucket/prefix "
                          "or s3://bucket/prefix")
    if "://" in landing and not landing.startswith("gs://"):
        raise ConfigError(f"{where}: field 'landing' {landing!r}: a landing area is a folder or gs://bucket/prefix")
    if _nested(warehouse, landing):
        # run would take the warehouse's own Delta files as change files, or write into the landing area
        raise ConfigError(f"{where}: 'warehouse' ({warehouse}) and 'landing' ({landing}) must not contain each other")
    spark = raw.get("spark") or {}
    if not isinstance(spark, dict):
        raise ConfigError(f"{where}: field 'spark' must map Spark settings to values")
    if not isinstance(raw["tables"], list) or not raw["tables"]:
        raise ConfigError(f"{where}: field 'tables' must be a non-empty list")
    tables: list[TableConfig] = []
    seen: set[str] = set()
    for i, t in enumerate(raw["tables"]):
        table = _table(t, i, where, base_dir)
        if table.name.upper() in seen:
            raise ConfigError(f"{where}: table '{table.name}' is configured twice")
        seen.add(table.name.upper())
        tables.append(table)
    if "://" in warehouse:
        for t in tables:
            if t.source:
                # its extracts are the table's landing files, which are read from a folder or gs:// only
                kind = "PostgreSQL" if postgres.is_postgresql(t.source) else "BigQuery"
                raise ConfigError(f"{where}: table '{t.name}': a {kind} source needs a warehouse on a disk; "
                                  f"'warehouse' is {warehouse!r} (documentation: \"Google Cloud\")")
    tables = [_postgresql_source(t, warehouse, where) for t in tables]
    try:  # cycles on a schedule: a table's own `schedule:`, `groups:` of tables, the `timezone:` of both
        zone = cycles.timezone(raw.get("timezone"), f"{where}: field 'timezone'")
        groups = cycles.groups(raw.get("groups"), {t.name: t.schedule for t in tables}, where)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Config(path, warehouse, landing, tuple(tables), {str(k): str(v) for k, v in spark.items()},
                  groups=groups, timezone=zone)


def _unknown(raw: Mapping[object, object], allowed: Collection[str], where: str) -> None:
    for k in raw:
        if k not in allowed:
            raise ConfigError(f"{where}: unknown field '{k}' (allowed: {', '.join(sorted(allowed))})")


def _path(value: object, base_dir: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a path")
    if "://" in value:
        return value  # object stores (gs://) are validated by their clients
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))


def _nested(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


def _names(value: object, where: str, *, required: bool) -> tuple[str, ...]:
    if value is None and not required:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of column names")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where} names a column twice")
    return tuple(value)


def _target_names(value: object, where: str, rename: Mapping[str, str], *, required: bool) -> tuple[str, ...]:
    """Column names of the target: storable, distinct but for case, after `rename:`."""
    out = _names(value, where, required=required)
    for i, n in enumerate(out):
        _target_name(n, where, rename)
        other = names.same_but_case(n, out[:i])
        if other is not None:
            raise ConfigError(f"{where} names {other!r} and {n!r}, one column to Spark and Delta (case is not "
                              "told apart)")
    return out


def _target_name(name: str, where: str, rename: Mapping[str, str]) -> None:
    if name in rename and name not in rename.values():
        raise ConfigError(f"{where}: column {name!r} is renamed to {rename[name]!r} by 'rename': name the "
                          "target column")
    why = names.unstorable(name)
    if why:
        raise ConfigError(f"{where}: {why}; {names.way_out(name)}")


def _rename(value: object, here: str) -> dict[str, str]:
    """`rename: {source_name: target_name}`: the target's name of a source column."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{here}: field 'rename' must map source column names to target names, "
                          "e.g. rename: {'unit price': unit_price}")
    for source, target in value.items():
        if not isinstance(source, str) or not source:
            raise ConfigError(f"{here}: field 'rename': {source!r} is not a column name")
        if not isinstance(target, str) or not target:
            raise ConfigError(f"{here}: field 'rename.{source}': {target!r} is not a column name")
        why = names.unstorable(target)
        if why:
            raise ConfigError(f"{here}: field 'rename.{source}': the target name cannot be stored: {why}")
        other = names.same_but_case(target, [t for s, t in value.items() if s != source])
        if other is not None or list(value.values()).count(target) > 1:
            raise ConfigError(f"{here}: field 'rename': two columns are renamed to {target!r}"
                              + (f" and {other!r}, one name to Spark and Delta (case is not told apart)"
                                 if other is not None else ""))
    return dict(value)


def _history(value: object, here: str, keys: tuple[str, ...], rename: Mapping[str, str]) -> tuple[bool, tuple[str, ...]]:
    """`history: true`, or `history: {track_except: [columns]}`: (kept, the columns whose changes
    alone update the current version in place instead of opening a new one)."""
    if isinstance(value, bool):
        return value, ()
    if not isinstance(value, dict):
        raise ConfigError(f"{here}: field 'history' must be true, false or a mapping such as "
                          f"{{track_except: [updated_at]}}, not {value!r}")
    allowed = keys_under("tables[].history")
    for k in value:
        if k not in allowed:
            raise ConfigError(f"{here}: field 'history': unknown field {k!r} (allowed: {', '.join(sorted(allowed))})")
    where = f"{here}: field 'history.track_except'"
    columns = _target_names(value.get("track_except"), where, rename, required=True)
    if not columns:
        raise ConfigError(f"{where} must list at least one column (or write history: true)")
    for c in columns:
        if c in keys:
            raise ConfigError(f"{where}: key column {c!r} cannot be left out of the history: a key's "
                              "change is another key")
    return True, columns


def _table(t: object, i: int, where: str, base_dir: str) -> TableConfig:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: tables[{i}] must be a mapping")
    name = t.get("name")
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
        raise ConfigError(f"{where}: tables[{i}]: field 'name' {name!r} must be a letter then letters, digits "
                          f"or '_' (at most 128): it names folders in the warehouse and landing area")
    here = f"{where}: table '{name}'"
    for k in t:
        if k not in TABLE_KEYS:
            raise ConfigError(f"{here}: unknown field '{k}' (allowed: {', '.join(sorted(TABLE_KEYS))})")
    from_postgresql = postgres.is_postgresql(t.get("source"))
    if not t.get("keys") and not from_postgresql:
        raise ConfigError(f"{here}: field 'keys' is required: list the primary key columns (1 to {MAX_KEYS})")
    rename = _rename(t.get("rename"), here)
    # a PostgreSQL source's keys default to its primary key, which `capture enable` records (_source_keys)
    keys = _target_names(t.get("keys"), f"{here}: field 'keys'", rename, required=not from_postgresql)
    if len(keys) > MAX_KEYS:
        raise ConfigError(f"{here}: field 'keys' has {len(keys)} columns; at most {MAX_KEYS}")
    fmt = t.get("format")
    if from_postgresql:
        if fmt not in (None, postgres.FORMAT):
            raise ConfigError(f"{here}: field 'format': a PostgreSQL source's changes are captured by cdc_assets, "
                              f"in its own format; leave 'format' out (not {fmt!r})")
        fmt = postgres.FORMAT
    elif fmt == postgres.FORMAT:
        raise ConfigError(f"{here}: field 'format' '{fmt}' is the format of a PostgreSQL source's captured "
                          "changes: give the table a 'source: postgresql://...'")
    if fmt not in FORMATS:
        raise ConfigError(f"{here}: field 'format' {fmt!r} is unknown (known: {', '.join(FORMATS)})")
    options = t.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"{here}: field 'options' must be a mapping")
    options = _options(fmt, options, here)
    for column in format_spec(fmt).pseudo_columns(options):
        if column in rename:
            raise ConfigError(f"{here}: field 'rename.{column}': {column!r} is not a source column: format "
                              f"'{fmt}' reads what each change is from it, and it is never stored")
    partition_by = _target_names(t.get("partition_by"), f"{here}: field 'partition_by'", rename, required=False)
    base = t.get("base_snapshot")
    reconcile = t.get("reconcile_with")
    source, position = _source(t.get("source"), t.get("source_position"), fmt, here)
    capture = _capture(t.get("capture"), source, here)
    max_retained_wal = _max_retained_wal(t.get("max_retained_wal_mb"), capture, here)
    change_feed = t.get("change_feed", False)
    if not isinstance(change_feed, bool):
        raise ConfigError(f"{here}: field 'change_feed' must be true or false, not {change_feed!r}")
    insert_only = t.get("insert_only", False)
    if not isinstance(insert_only, bool):
        raise ConfigError(f"{here}: field 'insert_only' must be true or false, not {insert_only!r}")
    if insert_only and not inserts(fmt, options):
        raise ConfigError(f"{here}: field 'insert_only': format '{fmt}' does not say which changes insert "
                          "(an UPSERT may update) or names no insert flag, so updates could not be told from inserts")
    partial_updates = t.get("partial_updates", False)
    if not isinstance(partial_updates, bool):
        raise ConfigError(f"{here}: field 'partial_updates' must be true or false, not {partial_updates!r}")
    if partial_updates and insert_only:
        raise ConfigError(f"{here}: field 'partial_updates': an insert_only table takes no updates")
    history, track_except = _history(t.get("history", False), here, keys, rename)
    deletes = t.get("deletes", "hard")
    if deletes not in ("hard", "soft"):
        raise ConfigError(f"{here}: field 'deletes' must be 'hard' or 'soft', not {deletes!r}")
    if deletes == "soft" and insert_only:
        raise ConfigError(f"{here}: field 'deletes': an insert_only table has no deletes to keep")
    maintenance = _maintenance(t.get("maintenance"), here, rename)
    widen_to_text = t.get("widen_to_text", True)
    if not isinstance(widen_to_text, bool):
        raise ConfigError(f"{here}: field 'widen_to_text' must be true or false, not {widen_to_text!r}")
    if partial_updates and maintenance.trim_staging_after is not None:
        # a late change is combined column by column with every staged change of its key
        raise ConfigError(f"{here}: field 'partial_updates' needs every staged change kept: remove "
                          "'maintenance.trim_staging_after'")
    if history and maintenance.trim_changes_after is not None:
        # history is computed from every change ever taken: a rebuild after a trim would lose versions
        raise ConfigError(f"{here}: field 'history' needs every change kept: remove 'maintenance.trim_changes_after'")
    return TableConfig(
        name=name, keys=keys, format=fmt, options=options, partition_by=partition_by,
        columns=_columns(t.get("columns"), here, rename), source=source, source_position=position, capture=capture,
        max_retained_wal_mb=max_retained_wal,
        publish=_publish(t.get("publish"), source, here), change_feed=change_feed,
        apply=_apply_policy(t.get("apply"), here), maintenance=maintenance,
        insert_only=insert_only, partial_updates=partial_updates, history=history,
        quarantine_limit=_quarantine_limit(t.get("quarantine_limit", DEFAULT_QUARANTINE_LIMIT), here),
        history_track_except=track_except, soft_deletes=deletes == "soft",
        schedule=_cron(t.get("schedule"), f"{here}: field 'schedule'"),
        rename=rename, widen_to_text=widen_to_text,
        base_snapshot=_path(base, base_dir, f"{here}: field 'base_snapshot'") if base is not None else None,
        reconcile_with=_path(reconcile, base_dir, f"{here}: field 'reconcile_with'") if reconcile is not None else None,
    )


def _source(source: object, position: object, fmt: str, here: str) -> tuple[str | None, str | None]:
    """`source: bigquery://project.dataset.table` and the column whose growth marks new rows, or
    `source: postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE`."""
    if source is None:
        if position is not None:
            raise ConfigError(f"{here}: field 'source_position' needs a 'source'")
        return None, None
    if isinstance(source, str) and postgres.is_postgresql(source):
        try:
            postgres.parse_source(source)
        except ValueError as e:
            raise ConfigError(f"{here}: field 'source': {e}") from None
        if position is not None:
            raise ConfigError(f"{here}: field 'source_position': a PostgreSQL source is ordered by its capture's "
                              "own sequence; leave 'source_position' out")
        return source, None
    if not isinstance(source, str) or not BIGQUERY_SOURCE.fullmatch(source):
        shown = repr(postgres.redacted(source)) if isinstance(source, str) else f"of type {type(source).__name__}"
        raise ConfigError(f"{here}: field 'source' {shown} must be bigquery://project.dataset.table or "
                          "postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE")
    if fmt not in BIGQUERY_SOURCE_FORMATS:
        raise ConfigError(f"{here}: field 'source': format '{fmt}' is read from files; a BigQuery source "
                          f"takes format {' or '.join(BIGQUERY_SOURCE_FORMATS)}")
    if position is None and format_spec(fmt).source_position is None:
        raise ConfigError(f"{here}: field 'source_position' is required for format '{fmt}': name the "
                          "column that grows as rows are appended (an ingestion time or a sequence)")
    if position is not None and not (isinstance(position, str)
                                     and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", position)):
        raise ConfigError(f"{here}: field 'source_position' {position!r} must be a column name (a.b for a field "
                          "of a record)")
    return source, position


def _capture(value: object, source: str | None, here: str) -> str | None:
    """`capture:` of a PostgreSQL source: how its changes are captured (default `changelog`)."""
    if not postgres.is_postgresql(source):
        if value is not None:
            raise ConfigError(f"{here}: field 'capture' needs a 'source: postgresql://...'")
        return None
    method = "changelog" if value is None else value
    if method not in postgres.CAPTURE_METHODS:
        raise ConfigError(f"{here}: field 'capture' {value!r} must be one of {', '.join(postgres.CAPTURE_METHODS)}")
    return str(method)


DEFAULT_MAX_RETAINED_WAL_MB = 1024
DEFAULT_QUARANTINE_LIMIT = 1.0  # only a batch whose every record went to quarantine fails


def _quarantine_limit(value: object, here: str) -> float | None:
    """`quarantine_limit:`: a share above 0 and at most 1, or `none` (the table accepts any batch)."""
    if value == "none":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{here}: field 'quarantine_limit' {value!r} must be a share of a batch's records above "
                          "0 and at most 1 (1: only a batch whose every record is quarantined fails), or 'none'")
    return float(value)


def _max_retained_wal(value: object, capture: str | None, here: str) -> int | None:
    """`max_retained_wal_mb:` of a `capture: logical` table (default 1 GiB)."""
    if capture != "logical":
        if value is not None:
            raise ConfigError(f"{here}: field 'max_retained_wal_mb' needs 'capture: logical' (only a replication "
                              "slot retains WAL)")
        return None
    if value is None:
        return DEFAULT_MAX_RETAINED_WAL_MB
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{here}: field 'max_retained_wal_mb' {value!r} must be a whole number of MiB, at least 1")
    return value


def _postgresql_source(table: TableConfig, warehouse: str, where: str) -> TableConfig:
    """A PostgreSQL source's table starts from the snapshot `capture enable` takes into the warehouse;
    without `keys:` it takes the primary key `capture enable` recorded there
    (`<warehouse>/<TABLE>/capture/`); until then its keys are empty, and only `capture enable` can run
    for it."""
    if not postgres.is_postgresql(table.source):
        return table
    if table.base_snapshot is not None:
        raise ConfigError(f"{where}: table '{table.name}': field 'base_snapshot': `cdc-assets capture enable` "
                          "takes a PostgreSQL source's base snapshot; leave 'base_snapshot' out")
    table_dir = os.path.join(warehouse, table.name)
    table = replace(table, base_snapshot=postgres.base_path(table_dir))
    recorded = postgres.read_record(table_dir)
    if table.keys or recorded is None:
        return table
    try:
        keys = _target_names(list(recorded.keys), f"{where}: table '{table.name}': the source's primary key",
                             table.rename, required=True)
    except ConfigError as e:
        raise ConfigError(f"{e}: list the table's 'keys'") from None
    return replace(table, keys=keys)


def _publish(value: object, source: str | None, here: str) -> Publish:
    """`publish: {bigquery: project.dataset.table}`: the BigQuery table kept equal to the target."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{here}: field 'publish' must be a mapping, "
                          "e.g. publish: {bigquery: project.dataset.table}")
    for k in value:
        if k not in PUBLISH_KEYS:
            raise ConfigError(f"{here}: field 'publish': unknown destination '{k}' "
                              f"(allowed: {', '.join(sorted(PUBLISH_KEYS))})")
    dest = value["bigquery"]
    if not isinstance(dest, str) or not BIGQUERY_TABLE.fullmatch(dest):
        raise ConfigError(f"{here}: field 'publish.bigquery' {dest!r} must be project.dataset.table")
    if source is not None and source.split("://", 1)[-1] == dest:
        # the published rows would come back as the table's own changes
        raise ConfigError(f"{here}: field 'publish.bigquery' names the table's own source {dest!r}")
    return Publish(bigquery=dest)


def _apply_policy(value: object, here: str) -> ApplyPolicy:
    """`apply: {min_changes: N, max_staleness: 15m}`: merge once either holds (core/apply_policy.py)."""
    if value is None:
        return ApplyPolicy()
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{here}: field 'apply' must be a mapping, e.g. apply: {{min_changes: 1000, "
                          "max_staleness: 15m}")
    for k in value:
        if k not in APPLY_KEYS:
            raise ConfigError(f"{here}: field 'apply': unknown setting '{k}' (allowed: {', '.join(sorted(APPLY_KEYS))})")
    n = value.get("min_changes")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"{here}: field 'apply.min_changes' {n!r} must be a whole number of changes, at least 1")
    staleness = value.get("max_staleness")
    try:
        seconds = parse_duration(staleness) if staleness is not None else None
    except ValueError as e:
        raise ConfigError(f"{here}: field 'apply.max_staleness': {e}") from None
    return ApplyPolicy(min_changes=n, max_staleness=seconds)


def _maintenance(value: object, here: str, rename: Mapping[str, str]) -> MaintenancePolicy:
    """`maintenance: {retention: 7d, zorder_by: [col], trim_changes_after: 30d, trim_staging_after: 30d,
    schedule: "0 3 * * *"}`."""
    if value is None:
        return MaintenancePolicy()
    if not isinstance(value, dict):
        raise ConfigError(f"{here}: field 'maintenance' must be a mapping, e.g. maintenance: {{retention: 7d}}")
    for k in value:
        if k not in MAINTENANCE_KEYS:
            raise ConfigError(f"{here}: field 'maintenance': unknown setting '{k}' "
                              f"(allowed: {', '.join(sorted(MAINTENANCE_KEYS))})")
    durations: dict[str, float] = {}
    for k in ("retention", "trim_changes_after", "trim_staging_after"):
        if value.get(k) is not None:
            try:
                durations[k] = parse_duration(value[k])
            except ValueError as e:
                raise ConfigError(f"{here}: field 'maintenance.{k}': {e}") from None
    if durations.get("retention", MIN_RETENTION) < MIN_RETENTION:
        raise ConfigError(f"{here}: field 'maintenance.retention' must be at least 1h: a run's apply or a fresh "
                          "read may still read the files a shorter one removes")
    zorder_by: tuple[str, ...] = ()
    if "zorder_by" in value:
        zorder_by = _target_names(value["zorder_by"], f"{here}: field 'maintenance.zorder_by'", rename, required=True)
        dotted = [c for c in zorder_by if "." in c]
        if dotted:
            # delta-rs' Z-order reads a dot as a path into a struct, whatever the quoting
            raise ConfigError(f"{here}: field 'maintenance.zorder_by': column {dotted[0]!r}: delta-rs cannot Z-order "
                              "by a column whose name holds a dot; give it another name in the table's `rename:` "
                              "map, or leave it out")
    schedule = _cron(value.get("schedule"), f"{here}: field 'maintenance.schedule'")
    return MaintenancePolicy(retention=durations.get("retention", DEFAULT_RETENTION), zorder_by=zorder_by,
                             trim_changes_after=durations.get("trim_changes_after"),
                             trim_staging_after=durations.get("trim_staging_after"),
                             schedule=DEFAULT_SCHEDULE if schedule is None else schedule)


def _cron(value: object, where: str) -> str | None:
    """A cron string of 5 fields (core/cycles.py checks each field), or None when not given."""
    if value is None:
        return None
    try:
        return cycles.cron(value, where)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _columns(value: object, here: str, rename: Mapping[str, str]) -> dict[str, str]:
    """`columns:` maps column names to types, for files that carry none (JSON, CSV)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{here}: field 'columns' must map column names to types, e.g. amount: decimal(12,2)")
    out: dict[str, str] = {}
    for col, type_ in value.items():
        if not isinstance(col, str) or not col:
            raise ConfigError(f"{here}: field 'columns': {col!r} is not a column name")
        _target_name(col, f"{here}: field 'columns'", rename)
        try:
            out[col] = parse_type(type_)
        except ValueError as e:
            raise ConfigError(f"{here}: field 'columns.{col}': {e}") from None
    return out


def _options(fmt: str, options: Mapping[object, object], here: str) -> ChangesetOptions:
    if fmt != "changeset":
        if options:
            raise ConfigError(f"{here}: field 'options': format '{fmt}' takes no options, got {sorted(map(str, options))}")
        return ChangesetOptions()
    for k in options:
        if k not in CHANGESET_OPTIONS:
            raise ConfigError(f"{here}: field 'options': unknown option '{k}' (allowed: {', '.join(sorted(CHANGESET_OPTIONS))})")
    op_column = options.get("op_column")
    if not isinstance(op_column, str) or not op_column:
        raise ConfigError(f"{here}: field 'options.op_column' is required for format 'changeset'")
    sequence_by = list(_names(options.get("sequence_by"), f"{here}: field 'options.sequence_by'", required=False))
    values: dict[str, list[str]] = {}
    for k in ("inserts", "updates", "deletes", "truncates"):
        v = options.get(k, [])
        if isinstance(v, (str, int)):
            v = [v]
        if not isinstance(v, list):
            raise ConfigError(f"{here}: field 'options.{k}' must list the op column's values")
        values[k] = [str(x) for x in v]
    out = ChangesetOptions(
        op_column=op_column,
        sequence_by=sequence_by,
        inserts=values["inserts"], updates=values["updates"], deletes=values["deletes"])
    if values["truncates"]:
        out["truncates"] = values["truncates"]
    if not out["deletes"] or not (out["inserts"] or out["updates"]):
        raise ConfigError(f"{here}: field 'options': changeset needs values for 'deletes' and for 'inserts' or 'updates'")
    for k in ("inserts", "updates", "deletes"):
        both = sorted(set(values["truncates"]) & set(values[k]))
        if both:
            raise ConfigError(f"{here}: field 'options.truncates': op value {both[0]!r} is also listed in 'options.{k}'")
    return out
