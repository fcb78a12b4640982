"""Random feeds against a reference: generated source histories, delivered at random,
applied through the Dagster jobs and compared, AFTER EACH BATCH, with an independent replay.

What is generated (hypothesis draws value pools and seeds; each feed is then
built from its own `random.Random`, so one example holds hundreds of feeds
without overrunning hypothesis' buffer):

- a source history per feed: inserts, updates (and Datastream's UPDATE-DELETE +
  UPDATE-INSERT pairs at one source position), deletes, over 1-5 composite keys
  (`feed` text, `kid` integer, `kpart` and `kname` text), whose text parts a feed
  draws mostly from one family of values that only an exact comparison tells apart
  (rules.md#keys): number-like text ("1", "1.0", "1.10", "+5", "-0", "007", ".5",
  "1e3"), case, whitespace, NFC against NFD, "" (except where CSV would write it as
  null), astral characters, 2,000-character strings, and (kpart, kname) pairs whose
  concatenations collide, plainly or around the separators a key encoding might use;
  payload values at their types' limits: long min and max, decimal(38,s) extremes
  (every table declares a decimal(38,s) column, s drawn per table, and a timestamp
  column holding instants of years 1 and 9999 in UTC), long and astral text; null
  payload values, many changes within one second (1-second timestamps with ties:
  only the source position orders them), optional Datastream backfill events
  and optional base snapshot rows; every change carries its true position `seq`;
- its rendering in one format, as the conformance scenarios write it
  (the scenarios' batch-1 under `shared_dir`): datastream-json for Oracle
  (scn, rs_id, ssn), MySQL (log_file/log_position, with binlog rotation, also
  past mysql-bin.999999), PostgreSQL (lsn X/Y) and SQL Server (lsn, three hex
  numbers); bigquery-append (change_sequence_number as an integer or a CSN
  string); bigquery-cdc (_CHANGE_SEQUENCE_NUMBER, 1-4 hex sections, any case);
  changeset CSV and JSON lines (sequence_by an integer column and/or a
  timestamp column, its ISO 8601 spelling one per feed or mixed change by change), and changeset JSON lines whose columns are all declared
  (`columns:`: long, double, string, timestamp), which changes and staging
  store in typed columns, some of their files Parquet (read column by column);
- the sources of rules.md#rule-9 to rules.md#rule-12 (SOURCE_KINDS), each table drawing `partial_updates: true` (an
  update leaves columns out or null) and `deletes: soft` (the `_cdc_deleted` flag is compared too):
  Debezium events (c, u, d; ts_ms, then the PostgreSQL, MySQL, SQL Server or Oracle position) whose
  updates and deletes may carry TOAST placeholders (`__debezium_unavailable_value`, also as a
  one-element array) and whose deletes may carry the key alone; whole exports (`format: snapshot`),
  a feed's keys inserted, updated, deleted or left alone between exports; and Debezium (`op: t`) and
  change-set (`options.truncates`) feeds that truncate, one feed per table, since a truncate clears
  every key of it;
- column names: every table kind, in one of the two halves of examples, names its columns (keys and
  partition column included) from NAME_POOL, names Delta stores without column mapping; the
  plan keeps logical names, renamed where files and cdc.yaml are written and rows read back;
- a delivery: shuffled, split into files and batches, some events duplicated
  (same event id, in the same or another batch), some delayed into later
  batches; CSV base snapshots (source exports) for some tables.

Cost: many feeds share one table (the `feed` key column keeps their keys
apart), so one run of a table applies them all. Each batch is landed, then the
table is run as `cdc-assets run` runs it (`cdc_assets.defs.run_loop.run_table`:
the ledger entry, the Dagster base, ingest and apply jobs of
`build_definitions`, their asset checks), in this process.
Normal run: 1 example x (7 tables x 18 feeds + 2 tables of SOURCE_KINDS, one of 18 feeds and
one truncating table of 1 feed) = 145 feeds, the example's half (which tables are partitioned and
named, which two source kinds) drawn with its seed, so successive runs cover both halves;
`--long`: 10 x (9 x 40 + 2) = 3620.
RANDOM_FEEDS_KINDS=dbz,snap,cs_t,dbz_t draws only the named kinds, each in every example.
RANDOM_FEEDS_SEED draws the feeds of one seed again (each run draws its own, printed on the summary
line and in a failure). RANDOM_FEEDS_EXAMPLES / RANDOM_FEEDS_PER_TABLE override both; RANDOM_FEEDS_THREADS (default 2)
is how many tables run side by side.

The check: after every batch, the run succeeded with its checks passed, the
quarantine is empty (every generated record is well-formed), and each feed's
rows in `target` (its source columns, read with delta-rs) -- in a deferred table
(`apply: {min_changes: huge}`, about 40% of them), whose merges wait after the
first build, the fresh read instead -- equal the state of
`cdc_assets_tests.reference_model.ReferenceTable` fed with the changes
delivered so far (by their true `seq`, never by the formats' encodings). In a
partitioned table, partitions the batch does not touch keep their files. After
the last batch, one more run with nothing landed commits no target version, and
in a partitioned table a backfill of every partition (the apply job over the
whole dynamic range) rebuilds from staging the state the batches built. About
half the tables have `staging` trimmed by maintenance halfway through their
batches (each key's latest change of the applied ones kept): the later batches
apply over it, and a rebuild of the whole target from it must give that state
too. A deferred
table is then applied once (its apply job, as the UI materializes target), and the
target it commits must equal, row for row with the `_cdc_*` columns, the fresh read
taken just before.
Keys compare exactly (`key_of`): text key columns by their text, `kid` as a number;
a table with CSV input declares its text key columns `string`, as the README tells
users to. Other values compare by meaning (`same_by_meaning`): CSV input is typed by
inference and the target's column types are the join of the values seen, so 5, '5'
and 5.0 are one value and, where CSV is involved, '' is NULL.

When a feed fails
-----------------
1. The test shrinks the failing feed itself (`shrink_feed`: delta debugging
   over its deliveries and base rows; every round runs all candidate feeds of
   the round in one table, so a round is one run per batch), then fails with the
   shrunk feed written to `<repo>/.pytest_cache/random_feeds/shrunk-<hash>.json` and shown
   in the failure message. Hypothesis' own shrinking is switched off: one
   example is hundreds of feeds and a run costs seconds; the feed is
   the unit that shrinks.
2. Keep it as a regression test: move that file into
   `cdc_assets_tests/defs/random_feeds_regressions/` (name it after the bug).
   `test_random_feed_regressions` replays every file there, exactly as shrunk
   (the file holds the table's format/options and the feed's rendered records,
   deliveries and base rows; nothing is regenerated), against the reference.
3. To replay a whole failing example instead, hypothesis prints a
   `@reproduce_failure` blob (print_blob=True); decorate `check` with it.
"""
from __future__ import annotations

import copy
import csv
import datetime as dt
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import secrets
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation, localcontext
from urllib.parse import unquote

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.run_loop import QUIET, run_table
from cdc_assets.defs.sensors import apply_request_tags
from cdc_assets.defs.table_assets import TableNames, sync_target_partitions
from cdc_assets.engine.errors import root_cause_of_info
from cdc_assets.engine.fresh import fresh_table
from cdc_assets.engine.lock import table_lock
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.partition_layout import RELAYOUT, PartitionLayout
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.reference_model import DELETE, TRUNCATE, UPSERT, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.warehouse import canonical, delta_version, target_rows

pytestmark = pytest.mark.spark

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESSIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "random_feeds_regressions")
FAILURES_DIR = os.path.join(REPO, ".pytest_cache", "random_feeds")  # git ignores it

# `kpart` and `kname` are adjacent text key columns, so that composite keys whose concatenations
# collide (("a", "bc") and ("ab", "c")) are distinct keys side by side
KEYS = ["feed", "kid", "kpart", "kname"]
OLD_KEYS = ["feed", "kid", "kname"]  # the key columns of regression feeds kept before `kpart`
TEXT_KEYS = ["feed", "kpart", "kname"]
DEFERRED_MIN_CHANGES = 10**9  # never reached: a deferred table's merges wait
TEXT_COL = "tëxt"  # a non-ASCII column name, on purpose
REGION = "region"  # the partition column of partitioned tables, an ordinary column elsewhere
AMT, TS = "amt", "ts"  # declared decimal(38,s) and timestamp columns in every table, for values at their limits
PAYLOAD = ["n", "x", TEXT_COL, REGION, AMT, TS]  # the columns of payload_choices
# Partition values shared by all feeds of a table (escaping-prone text among them, and "007",
# text in JSON but a number to CSV inference); each feed also has a region of its own, which
# becomes empty when the feed's rows leave it. "" among them: a target that receives it is laid
# out again, partitioned by the column's derived value (engine/partition_layout.py).
# Partition values of every kind: plain, Hive's escapes ('/', '=', '%', ' '), non-ASCII, and folder
# names no file system takes (over 255 bytes, plain ASCII or not).
SHARED_REGIONS = ["eu", "us", "a b/c=d%", "x'y", "back\\slash", "007", "ü", "r" * 300, "日本/" * 60, None, "", ".x"]
OP_COL = "FLAG"
SEQ_COL, TS_COL = "SEQ", "CDC_TIMESTAMP"
DELETED = "_cdc_deleted"  # a soft-delete target's flag, compared as a column of the row

LONG_TEXT = "long " + "ᚠx" * 3000  # 6,005 characters, some of them 3 bytes in UTF-8
ASTRAL = "𝔘𝔫𝔦 😀 \U0010fffd"  # outside the Basic Multilingual Plane: surrogate pairs in UTF-16 and JSON
# Always in the pools, next to what hypothesis draws.
FIXED_TEXTS = [LONG_TEXT, ASTRAL, "", " ", "ü", "日本語テキスト", "emoji 🎉🚀", 'a,b;"c"', "line\nbreak", "cr\rlf\r\n", "tab\there",
               "5", "007", "1.50", "-0", "NULL", "null", "\\N", "Ωμέγα", "\u200b", "\u2028sep", "\x00nul",
               "1٣", "٣.5", "１２"]  # non-ASCII digits: text, not numbers
FIXED_NAMES = ["α", "k 1", "Ключ", "鍵", "a,b", 'x"y', " lead", "trail ", "A", "a"]
# Text key values that are distinct keys (rules.md#keys: a text key is exactly its text), in families
# whose members a number reading, case or whitespace folding, Unicode normalization or a key encoding
# that concatenates would merge; a feed draws its keys mostly from one family, so they meet in one batch.
KEY_FAMILIES = [
    ["1", "1.0", "1.10", "1.1", "01", "+1", "1e0", "1E0", "1.", " 1"],
    ["+5", "5", "-0", "0", "007", "7", ".5", "0.5", "1e3", "1000", "-5", "5e-0"],
    ["a", "A", "ä", "Ä", "ß", "SS", "ss"],  # case (and case mappings that change the length)
    ["a", " a", "a ", "a\t", "a\n", "\u00a0a", "a\r\n", "a  b", "a b"],  # whitespace
    ["\u00e9", "e\u0301", "\u00c9", "E\u0301", "\u212b", "\u00c5", "A\u030a"],  # NFC, NFD, NFKC
    ["", " ", "\u200b", "\x00", "\ufeff"],  # the empty string and near-empty ones ("" not in CSV tables)
    ["\U0001F600", "\U0001D518", "\U0010fffd", "\ue000", "\uffff", "\U0001F600\U0001F600"],  # astral
    ["k" * 2000, "k" * 1999 + "l", "k" * 1999, "k" * 2000 + "\U0001F600"],  # long
    ["NULL", "null", "None", "\\N", "true", "NaN", "Infinity", "-Infinity"],
]
# (kpart, kname) pairs whose concatenations collide, plainly or with a separator a key encoding might
# use (the JSON list `key_text` writes: '","', quotes and backslashes; '|', ',', '\x1f', '\x00')
COMPOSITE_FAMILIES = [
    [("a", "bc"), ("ab", "c"), ("abc", ""), ("", "abc")],
    [('a","', "b"), ("a", '","b'), ('a"', '"b'), ('a",', '"b')],
    [("a\\", "b"), ("a", "\\b"), ("a\\", '"b'), ('a\\"', "b")],
    [("a|b", "c"), ("a", "b|c"), ("a,b", "c"), ("a", "b,c"), ("a\x1fb", "c"), ("a", "b\x1fc")],
    [("a\x00b", "c"), ("a", "b\x00c"), ("[", "]"), ("[]", ""), ('["a"', '"b"]')],
]


# ---- comparing by meaning ---------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_NON_FINITE_TEXT = re.compile(r"[+-]?(nan|inf|infinity)", re.ASCII | re.IGNORECASE)
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?", re.ASCII)
TYPED = (Decimal, dt.date)  # values of typed target columns (decimal, date, timestamp; datetime is a date)
# A decimal value in a plan: JSON-able text that the files spell as the number (a JSON number, CSV
# text, a Parquet decimal), so that a kept regression feed replays it exactly
DECIMAL_MARK = "\x01decimal:"


def plan_decimal(d: Decimal) -> str:
    return DECIMAL_MARK + format(d, "f")


def decimal_of(value):
    """A plan's decimal value as a Decimal; any other value as it is."""
    return Decimal(value[len(DECIMAL_MARK):]) if isinstance(value, str) and value.startswith(DECIMAL_MARK) else value


def _instant(t: dt.datetime) -> tuple:
    """A timestamp as a UTC instant; one without zone is read as UTC (the target stores UTC)."""
    return ("time", t.astimezone(dt.UTC) if t.tzinfo else t.replace(tzinfo=dt.UTC))


def meaning(value, *, empty_is_null: bool = True):
    """What a value means, across CSV inference, column-type widening and typed columns:
    5 == '5' == 5.0 == '5.0' == Decimal('5.00'); '2018-01-01 05:30:00+05:30' == the datetime
    2018-01-01 00:00 UTC; '2018-01-01' == date(2018, 1, 1); with CSV input, '' is NULL.
    Other text is itself."""
    value = decimal_of(value)
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("number", Decimal(value))
    if isinstance(value, float):  # NaN is NaN; -0.0 means 0, as 5.0 means 5
        return ("number", Decimal(repr(value))) if math.isfinite(value) else ("number", _NON_FINITE[repr(value)])
    if isinstance(value, Decimal):
        return ("number", value)
    if isinstance(value, dt.datetime):
        return _instant(value)
    if isinstance(value, dt.date):
        return ("date", value)
    if isinstance(value, str):
        if value == "" and empty_is_null:
            return None
        if _NUMBER.fullmatch(value):
            try:
                return ("number", Decimal(value))
            except InvalidOperation:
                pass
        if _NON_FINITE_TEXT.fullmatch(value):  # a double's text, as a column widened to text holds it
            return ("number", _NON_FINITE[repr(float(value))])
        if _DATE.fullmatch(value):
            try:
                return ("date", dt.date.fromisoformat(value))
            except ValueError:
                pass
        if _TIMESTAMP.fullmatch(value):
            try:
                return _instant(dt.datetime.fromisoformat(value))
            except ValueError:
                pass
        return ("text", value)
    return ("other", repr(value))


def same_by_meaning(a, b, *, empty_is_null: bool = True) -> bool:
    return meaning(a, empty_is_null=empty_is_null) == meaning(b, empty_is_null=empty_is_null)


def same_value(expected, actual, *, csv_input: bool) -> bool:
    """With CSV input anywhere in the table, by meaning. Without, text must keep its exact
    spelling ('007' stays '007') unless its column is typed (a decimal, date or timestamp
    column holds the value the text means); a number may come back as its text (column
    types widen)."""
    if csv_input:
        return same_by_meaning(expected, actual)
    if isinstance(expected, str) and not isinstance(actual, TYPED):
        return actual == expected
    return same_by_meaning(expected, actual, empty_is_null=False)


def key_of(row: dict) -> tuple:
    """A row's key as rules.md#keys compares it: text key columns by their exact text, the integer
    column by its number (a key column a kept regression feed lacks is None on both sides)."""
    return tuple(row.get(k) if k in TEXT_KEYS else meaning(row.get(k)) for k in KEYS)


# ---- the plan: tables, feeds, changes, deliveries (plain JSON-able data) --------------

@dataclass
class FeedPlan:
    fid: str
    kind: str  # source kind / variant, for the report
    changes: list[dict]  # {"seq", "key", "op", "row", "eid", "record"}
    base: list[dict] = field(default_factory=list)  # base snapshot rows (source columns)
    delivery: list[list[int]] = field(default_factory=list)  # [change index, batch, slot]


@dataclass
class TablePlan:
    name: str
    format: str
    options: dict
    base: bool
    slots: list[list[str]]  # per batch: file names
    feeds: list[FeedPlan] = field(default_factory=list)
    partition_by: list[str] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)  # cdc.yaml `columns:`
    # `apply: {min_changes: huge}`: after the first build every batch is staged, not merged, and
    # the fresh read is what is compared; one apply after the last batch must give what it showed
    deferred: bool = False
    # `maintenance: {trim_staging_after}`: staging is trimmed once, halfway through the batches, so
    # the later batches (late changes included) apply over it and the final rebuild starts from it
    trimmed: bool = False
    keys: list[str] = field(default_factory=lambda: list(KEYS))
    # the source's column names (`draw_names`): logical name -> the name files and the target use;
    # the plan and the reference keep the logical names, renamed only where files are written and
    # rows read back
    names: dict[str, str] = field(default_factory=dict)
    partial: bool = False  # `partial_updates: true` (rules.md#rule-10)
    soft: bool = False  # `deletes: soft` (rules.md#rule-12): deleted keys stay, flagged `_cdc_deleted`

    @property
    def whole_table(self) -> bool:
        """Whether the table's changes include truncates, which clear every feed's keys: its feeds
        cannot share it with others (a truncating table holds one feed, shrinking runs each alone)."""
        return "truncates" in self.options or any(c["op"] == TRUNCATE for f in self.feeds for c in f.changes)

    def physical(self, column: str) -> str:
        return self.names.get(column, column)

    def logical(self, rows: list[dict]) -> list[dict]:
        back = {v: k for k, v in self.names.items()}
        return [{back.get(c, c): v for c, v in r.items()} for r in rows] if back else rows

    @property
    def batches(self) -> int:
        return len(self.slots)

    @property
    def csv_involved(self) -> bool:
        return self.base or any(f.endswith((".csv", ".csv.gz")) for s in self.slots for f in s)

    def spec(self) -> dict:
        spec = {"format": self.format, "options": self.options, "base": self.base, "slots": self.slots,
                "keys": self.keys}
        if self.partition_by:
            spec["partition_by"] = self.partition_by
        if self.columns:
            spec["columns"] = self.columns
        spec.update({k: True for k in ("deferred", "trimmed", "partial", "soft") if getattr(self, k)})
        if self.names:
            spec["names"] = self.names
        return spec


# ---- value pools, drawn by hypothesis ---------------------------------------------------

@dataclass
class Pools:
    texts: list
    names: list
    ints: list
    floats: list
    amts: list = field(default_factory=list)  # a table's decimal(38,s) values (`for_table`)
    csv: bool = False  # the table renders keys in CSV, where '' is null: no '' key

    def for_table(self, scale: int, csv: bool, partial: bool = False) -> Pools:
        with localcontext(prec=80):  # the default 28 digits would round a decimal(38,s)
            top = (Decimal(10) ** 38 - 1).scaleb(-scale)  # decimal(38,s)'s extremes
            tiny = Decimal(1).scaleb(-scale)
            some = Decimal(12345).scaleb(-scale if scale > 33 else -min(scale, 4))  # fits decimal(38,s)
            amts = [top, -top, tiny, -tiny, Decimal(0), top - tiny, some]
            amts = [plan_decimal(d.quantize(tiny)) for d in amts]
        # CSV writes '' as an empty field, which is null: on a partial-update table that keeps the
        # key's value, so a '' there is not a value the source sent
        texts = [x for x in self.texts if x != ""] if csv and partial else self.texts
        return replace(self, amts=amts, csv=csv, texts=texts)


# Instants at the ends of what a timestamp holds (years 1 and 9999 in UTC, some written with an
# offset that keeps them in range), the Julian-Gregorian switch and the Unix epoch
TIMESTAMPS = ["0001-01-01T00:00:00Z", "0001-01-01T05:30:00+05:30", "0001-01-01 00:00:00.000001",
              "9999-12-31T23:59:59.999999Z", "9999-12-31T18:59:59-05:00", "9999-12-31 23:59:59",
              "1582-10-10T12:00:00Z", "1970-01-01T00:00:00Z", "2024-02-29T23:59:59.5+01:00"]
DECIMAL_SCALES = [0, 2, 18, 38]

# Column names Delta Lake stores without column mapping (rules.md#names): dots, hyphens, leading
# digits, SQL reserved words, mixed case, non-ASCII, quotes, backticks, `$`, `#`, and characters a
# path or URL escapes (a partition folder is `name=value`); none is a logical
# column name, and `draw_names` keeps them distinct but for case
NAME_POOL = ["user.id", "a.b.c", "first-name", "x-y.z", "1st", "2024", "select", "from", "group", "order",
             "Table", "MiXeD.Case", "Ünïcödé", "名前", "ключ", 'say"hi', "it's", "back`tick", "``", "$amount",
             "#tag", "a$b#c", "null", "true", "key", "value", "é", "e\u0301", "😀", "a'b\"c`d", "\\esc",
             "a/b", "50%", "a%2Fb/c", "k:v", "a+b", "@at", "a[0]", "a&b", "q?", "~t"]  # path and URL characters
RENAMED = KEYS + ["n", "x", TEXT_COL, REGION, AMT, TS, "late"]


def draw_names(rnd: random.Random) -> dict[str, str]:
    """A physical name for every logical column, all distinct but for case."""
    pool = list(NAME_POOL)
    rnd.shuffle(pool)
    names, folded = {}, set()
    for column in RENAMED:
        name = next(n for n in pool if n.casefold() not in folded)
        folded.add(name.casefold())
        names[column] = name
    return names


@st.composite
def pools(draw) -> Pools:
    texts = draw(st.lists(st.text(max_size=8), min_size=1, max_size=8))
    names = draw(st.lists(st.text(min_size=1, max_size=6), max_size=6, unique=True))
    ints = draw(st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), min_size=1, max_size=6))
    floats = draw(st.lists(st.floats(), min_size=1, max_size=6))  # NaN and the infinities too
    return Pools(FIXED_TEXTS + texts, sorted(set(FIXED_NAMES + names)), [0, 1, -1, 7, 2 ** 63 - 1, -(2 ** 63)] + ints,
                 [0.5, -0.0, 1e300, 5e-324, 3.25, math.nan, math.inf, -math.inf] + floats)


# ---- source histories -------------------------------------------------------------------

def payload_choices(pools: Pools, key: tuple) -> dict[str, list]:
    """Per payload column, the values a row image draws from (a typed column is one more entry)."""
    return {"n": pools.ints + [None, None],
            "x": pools.floats + [None],
            TEXT_COL: pools.texts + [None],
            REGION: SHARED_REGIONS + [f"only {key[0]}"] * 2,  # an update may move the key
            AMT: pools.amts + [None],
            TS: TIMESTAMPS + [None]}


def _row(rnd: random.Random, pools: Pools, key: tuple, late: bool) -> dict:
    row = dict(zip(KEYS, key))
    row.update({c: rnd.choice(values) for c, values in payload_choices(pools, key).items()})
    if late:
        row["late"] = rnd.choice(pools.texts + ["late", None])  # a column that appears mid-history (rules.md#rule-6)
    return row


def _text_keys(rnd: random.Random, pools: Pools) -> list[tuple]:
    """(kpart, kname) pairs, mostly of one family (`KEY_FAMILIES`, `COMPOSITE_FAMILIES`), so that
    values only an exact comparison tells apart are keys of one feed."""
    r = rnd.random()
    if r < 0.25:
        pairs = list(rnd.choice(COMPOSITE_FAMILIES))
    elif r < 0.8:
        part = rnd.choice(["p", "P", "", "1.0"])
        pairs = [(part, n) for n in rnd.choice(KEY_FAMILIES)]
    else:
        pairs = [(rnd.choice(["p", "", "007"]), n) for n in pools.names or FIXED_NAMES]
    if pools.csv:  # CSV writes '' as an empty field, which is null
        pairs = [p for p in pairs if "" not in p] or [("p", "q")]
    return pairs


def _keys(rnd: random.Random, pools: Pools, fid: str) -> list[tuple]:
    """2-5 keys sharing one `kid`, their text parts of one family (so that only the text tells them
    apart), sometimes one more under another `kid`; few keys: many changes per key."""
    pairs = _text_keys(rnd, pools)
    kid = rnd.choice(pools.ints)
    keys = [(fid, kid, *p) for p in rnd.sample(pairs, min(len(pairs), rnd.randint(2, 5)))]
    if rnd.random() < 0.3:
        keys.append((fid, rnd.choice(pools.ints), *rnd.choice(pairs)))
    rnd.shuffle(keys)
    return list(dict.fromkeys(keys))


def source_history(rnd: random.Random, pools: Pools, fid: str, *, pairs: bool, initial: dict,
                   truncates: bool = False, whole_table: bool = False) -> list[tuple]:
    """[(op, key, row)]: op I, U, D, or the two halves of an update at one position, UD then UI;
    with `truncates`, also T (the whole table: key () and no row), after which nothing is live.
    `whole_table`: the feed is its table's only one, so it has more keys and changes."""
    keys = list(initial) + _keys(rnd, pools, fid)
    for _ in range(2 if whole_table else 0):
        keys += _keys(rnd, pools, fid)
    keys = list(dict.fromkeys(keys))
    live = dict(initial)
    late_from = rnd.randint(1, 30) if rnd.random() < 0.3 else None
    out = []
    for i in range(rnd.randint(30, 90) if whole_table else rnd.randint(1, 24)):
        late = late_from is not None and i >= late_from
        if truncates and rnd.random() < 0.07:
            out.append(("T", (), {}))
            live.clear()
            continue
        key = rnd.choice(keys)
        r = rnd.random()
        if key in live:
            if r < 0.5:
                op = "U"
            elif r < 0.75:
                op = "D"
            elif r < 0.9 and pairs:
                op = "PAIR"
            else:
                op = "I"  # an insert over a live row is an upsert too
        else:
            op = "I" if r < 0.8 else ("U" if r < 0.9 else "D")  # updates/deletes of missing rows happen too
        if op == "PAIR":
            new_key = key if rnd.random() < 0.8 else rnd.choice(keys)  # a primary-key update moves the row
            out.append(("UD", key, live[key]))
            live.pop(key)
            row = _row(rnd, pools, new_key, late)
            out.append(("UI", new_key, row))
            live[new_key] = row
        elif op == "D":
            image = live.pop(key, None) or dict(zip(KEYS, key))
            out.append(("D", key, image))
        else:
            row = _row(rnd, pools, key, late)
            out.append((op, key, row))
            live[key] = row
    return out


# ---- source positions (strictly increasing in the true order) ---------------------------

class Positions:
    """A source's log position, advanced so that its comparison (rules.md#formats) follows the true order."""

    def __init__(self, rnd: random.Random, kind: str):
        self.rnd, self.kind = rnd, kind
        self.rotation = rnd.choice([0.2, 0.4])
        self.start()

    def start(self) -> None:
        rnd, kind = self.rnd, self.kind
        if kind == "oracle":
            self.p = [rnd.randint(1, 2 ** 48), rnd.randint(0, 0xFFFF), rnd.randint(0, 0xFFFFFF), rnd.randint(0, 0x1F0),
                      rnd.randint(0, 300)]
            self.limits = [2 ** 60, 0xFFFFFF, 0xFFFFFFFF, 0xFFFF, 2 ** 40]
        elif kind == "mysql":
            # mostly just before mysql-bin.999999 -> mysql-bin.1000000 (as text, '9' > '1')
            self.p = [rnd.choice([7, 99_999, 999_998, 999_999, 999_999, 999_999]), rnd.randint(4, 2 ** 31)]
        elif kind == "postgres":
            # X/Y crossing hexadecimal digit counts (F/.. -> 10/.., FFFFF -> 100000): text order is wrong there
            hi = rnd.choice([0, 0xF, 0xFF, rnd.randint(0, 0xFFFF)])
            lo = rnd.choice([rnd.randint(0, 2 ** 32 - 1), 2 ** 32 - rnd.randint(1, 5000), 0x100000 - rnd.randint(1, 300),
                             0x10 - rnd.randint(1, 15)])
            self.p = [hi * 2 ** 32 + lo]
        elif kind == "sqlserver":
            self.p = [rnd.randint(1, 0xFFFF), rnd.randint(0, 0xFFFFFFF0), rnd.randint(0, 0xFFF0)]
            self.limits = [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFF]
        else:
            raise ValueError(kind)

    def advance(self) -> None:
        rnd, p = self.rnd, self.p
        if self.kind == "mysql":
            if rnd.random() < self.rotation:
                p[0] += 1  # binlog rotation: the position starts again small
                p[1] = rnd.randint(4, 200)
            else:
                p[1] += rnd.choice([1, 9, 90, rnd.randint(1, 5000)])
        elif self.kind == "postgres":
            p[0] += rnd.choice([1, 8, 0x10, rnd.randint(1, 2 ** 24)])
        else:
            # lexicographic: raise one component, restart the later ones low (maybe lower than before)
            weights = [1] * len(p)
            weights[-1] = weights[-2] = 4
            j = rnd.choices(range(len(p)), weights)[0]
            while p[j] >= self.limits[j] - 20 and j > 0:
                j -= 1
            p[j] += rnd.choice([1, 15, 16, rnd.randint(1, 20)])
            for k in range(j + 1, len(p)):
                p[k] = rnd.randint(0, 20)

    def fail_over(self) -> None:
        """A new second may start anywhere in the log (a failover, a restored replica): the
        timestamp orders such changes, the position only within one second."""
        self.start()

    def metadata(self) -> dict:
        rnd, p = self.rnd, self.p
        if self.kind == "oracle":
            w = [rnd.choice([1, 6]), rnd.choice([1, 8]), rnd.choice([1, 4])]
            rs = "0x" + ".".join(f"{v:0{wd}x}" for v, wd in zip(p[1:4], w))
            return {"log_file": "", "scn": p[0], "row_id": "AAAGYPAATAAPIC5AAB", "database": "DB1", "schema": "ROOT",
                    "table": "T", "tx_id": "", "rs_id": rnd.choice([rs, rs.upper().replace("0X", "0x")]), "ssn": p[4]}
        if self.kind == "mysql":
            return {"table": "t", "log_file": f"mysql-bin.{p[0]:06d}", "log_position": p[1],
                    "primary_keys": KEYS, "database": "shop"}
        if self.kind == "postgres":
            return {"schema": "public", "table": "t", "tx_id": 5, "lsn": f"{p[0] >> 32:X}/{p[0] & 0xFFFFFFFF:X}",
                    "primary_keys": KEYS}
        return {"table": "t", "database": "db", "schema": "dbo", "tx_id": "0x1",
                "lsn": f"{p[0]:08X}:{p[1]:08X}:{p[2]:04X}", "physical_location": [1, 2, 3],
                "replication_index": KEYS}


READ_METHODS = {"oracle": ("oracle-cdc-logminer", "oracle-backfill"),
                "mysql": ("mysql-cdc-binlog", "mysql-backfill-fulldump"),
                "postgres": ("postgres-cdc-wal", "postgresql-backfill"),
                "sqlserver": ("sqlserver-cdc", "sqlserver-backfill")}
BACKFILL_META = {"oracle": {"log_file": "", "scn": 0, "rs_id": "", "ssn": 0},
                 "mysql": {"log_file": "", "log_position": 0},
                 "postgres": {"lsn": ""}, "sqlserver": {"lsn": ""}}
UPDATE_TYPES = {"oracle": ["UPDATE", "UPDATE-INSERT"], "mysql": ["UPDATE-INSERT", "UPDATE"],
                "postgres": ["UPDATE"], "sqlserver": ["UPDATE"]}
EPOCH0 = 1_700_000_000


def _source_ts(rnd: random.Random, style: str, sec: int):
    iso = dt.datetime.fromtimestamp(sec, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return {"iso": iso, "iso_z": iso + ".000Z", "ms": sec * 1000, "ms_text": str(sec * 1000)}[style]


def _uuid(rnd: random.Random) -> str:
    return str(uuid.UUID(int=rnd.getrandbits(128), version=4))


def _change(seq, key, op, row, eid, record) -> dict:
    return {"seq": seq, "key": list(key), "op": op, "row": row, "eid": eid, "record": record}


def datastream_feed(rnd, pools, fid, kind, initial: dict, backfill: bool) -> list[dict]:
    """Datastream JSON events (rules.md#datastream; conformance datastream_mysql_orders)."""
    pairs = kind in ("oracle", "mysql")
    history = source_history(rnd, pools, fid, pairs=pairs, initial=initial)
    pos = Positions(rnd, kind)
    style = rnd.choice(["iso", "iso_z", "ms", "ms_text"])
    sec = EPOCH0 + rnd.randint(0, 10 ** 7)
    # how often a change starts a new second (MySQL: rarely, so rotations fall within one second)
    tick_rate = rnd.choice([0.02, 0.1] if kind == "mysql" else [0.05, 0.2, 0.4])
    cdc_method, backfill_method = READ_METHODS[kind]
    live = dict(initial)
    out: list[dict] = []

    def event(change_type, key, row, method, meta):
        ev = {"stream_name": "projects/p/locations/l/streams/s", "read_method": method, "object": "t",
              "schema_key": "k", "uuid": _uuid(rnd), "read_timestamp": "2026-11-20T10:01:23.868Z",
              "source_timestamp": _source_ts(rnd, style, sec),
              "source_metadata": {"is_deleted": change_type in ("DELETE", "UPDATE-DELETE"), **meta,
                                  "change_type": change_type},
              "payload": row}
        op = DELETE if change_type in ("DELETE", "UPDATE-DELETE") else UPSERT
        out.append(_change(len(out), key, op, row, ev["uuid"], ev))

    def backfills(n):
        # backfill events have no position and rank lowest at their second: emit them when the
        # second starts, before any CDC event of that second; one per key per second
        for key in rnd.sample(sorted(live, key=repr), min(n, len(live))):
            event("INSERT", key, live[key], backfill_method, dict(BACKFILL_META[kind]))

    if backfill and live:
        backfills(len(live))
    for i, (op, key, row) in enumerate(history):
        if op != "UI":
            tick = rnd.choice([1, 1, 2, 3600]) if i and rnd.random() < tick_rate else 0
            if tick:
                sec += tick
                if backfill and rnd.random() < 0.3:
                    backfills(rnd.randint(1, 2))
            if tick and rnd.random() < 0.2:
                pos.fail_over()
            elif i:
                pos.advance()
        if op == "UD":
            change_type = "UPDATE-DELETE"
        elif op == "UI":
            change_type = "UPDATE-INSERT"  # same position as its UPDATE-DELETE, which ranks first
        elif op == "U":
            change_type = rnd.choice(UPDATE_TYPES[kind])
        else:
            change_type = {"I": "INSERT", "D": "DELETE"}[op]
        if op in ("D", "UD"):
            live.pop(key, None)
        else:
            live[key] = row
        event(change_type, key, row, cdc_method, pos.metadata())
    return out


class CSN:
    """BigQuery change sequence numbers: 1-4 '/'-separated sections, compared section by section
    as unsigned 64-bit numbers; with an equal prefix fewer sections rank lower (rules.md#bigquery-cdc)."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd
        # the first section stays below 2**63 + a little, so it can always grow; later ones may start near 2**64
        start = rnd.choice([0, rnd.randint(0, 2 ** 40), 2 ** 63 - rnd.randint(1, 50)])
        self.sections = [start] + [rnd.choice([rnd.randint(0, 2 ** 64 - 1), 2 ** 64 - rnd.randint(21, 400)])
                                   for _ in range(rnd.randint(0, 2))]

    def advance(self) -> None:
        rnd, s = self.rnd, self.sections
        if len(s) < 4 and rnd.random() < 0.25:
            s.append(rnd.choice([0, rnd.randint(0, 2 ** 64 - 1)]))  # same prefix, one more section
            return
        j = len(s) - 1 if rnd.random() < 0.7 else rnd.randrange(len(s))
        while s[j] >= 2 ** 64 - 20:
            j -= 1  # (never below 0: the first section is far from the maximum)
        s[j] += min(rnd.choice([1, 9, 0x10, rnd.randint(1, 2 ** 20)]), 2 ** 64 - 1 - s[j])
        del s[j + 1:]
        while len(s) < 4 and rnd.random() < 0.2:
            s.append(rnd.randint(0, 2 ** 64 - 1))

    def text(self) -> str:
        rnd = self.rnd
        parts = []
        for v in self.sections:
            h = f"{v:x}"
            h = h.zfill(rnd.randint(len(h), 16))
            parts.append(rnd.choice([h, h.upper()]))
        return "/".join(parts)


def bigquery_append_feed(rnd, pools, fid, initial: dict) -> list[dict]:
    """Rows of a Datastream append-mode table (rules.md#bigquery-append; conformance seed000_*)."""
    history = source_history(rnd, pools, fid, pairs=True, initial=initial)
    as_int = rnd.random() < 0.5
    csn_int = rnd.choice([rnd.randint(1, 10 ** 6), 2 ** 63 - rnd.randint(1, 200), 2 ** 64 - 10 ** 5])
    csn = CSN(rnd)
    ms = (EPOCH0 + rnd.randint(0, 10 ** 7)) * 1000
    out = []
    for i, (op, key, row) in enumerate(history):
        if op != "UI" and i:
            csn_int += rnd.choice([1, 3, rnd.randint(1, 1000)])
            csn.advance()
            ms += rnd.choice([0, 0, 0, 1000])
        change_type = {"I": "INSERT", "U": "UPDATE-INSERT", "D": "DELETE", "UD": "UPDATE-DELETE",
                       "UI": "UPDATE-INSERT"}[op]
        eid = _uuid(rnd)
        rec = {**row, "datastream_metadata": {
            "uuid": eid, "source_timestamp": ms, "change_sequence_number": csn_int if as_int else csn.text(),
            "change_type": change_type, "is_deleted": change_type.endswith("DELETE")}}
        out.append(_change(len(out), key, DELETE if op in ("D", "UD") else UPSERT, row, eid, rec))
    return out


def bigquery_cdc_feed(rnd, pools, fid, initial: dict) -> list[dict]:
    """Rows with _CHANGE_TYPE and _CHANGE_SEQUENCE_NUMBER (rules.md#bigquery-cdc)."""
    history = source_history(rnd, pools, fid, pairs=False, initial=initial)
    csn = CSN(rnd)
    out = []
    for i, (op, key, row) in enumerate(history):
        if i:
            csn.advance()
        if op == "D":
            image = {**{c: None for c in PAYLOAD}, **{k: row[k] for k in KEYS if k in row}} \
                if rnd.random() < 0.5 else row
            rec = {**image, "_CHANGE_TYPE": "DELETE", "_CHANGE_SEQUENCE_NUMBER": csn.text()}
            row = image
        else:
            rec = {**row, "_CHANGE_TYPE": "UPSERT", "_CHANGE_SEQUENCE_NUMBER": csn.text()}
        # no event id in this format: a re-delivery is the same content
        out.append(_change(len(out), key, DELETE if op == "D" else UPSERT, row, f"{fid}#{len(out)}", rec))
    return out


def _ts_text(rnd: random.Random, style: str, micros: int) -> str:
    t = dt.datetime(2018, 1, 1) + dt.timedelta(microseconds=micros)
    if style == "offset":
        off = rnd.choice([-300, 0, 60, 120, 330])
        local = t + dt.timedelta(minutes=off)
        sign = "+" if off >= 0 else "-"
        return local.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond // 1000:03d}" if t.microsecond else "") \
            + f"{sign}{abs(off) // 60:02d}:{abs(off) % 60:02d}"
    sep = "T" if style in ("iso_t", "iso_z") else " "
    text = t.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond // 1000:03d}"
    return text + ("Z" if style == "iso_z" else "")


def partial_image(rnd: random.Random, row: dict) -> dict:
    """An update's image on a `partial_updates` table: some payload columns left out, some null."""
    out = {}
    for c, v in row.items():
        r = rnd.random() if c in PAYLOAD or c == "late" else 1
        if r >= 0.35:
            out[c] = v
        elif r >= 0.15:
            out[c] = None
    return out


def changeset_feed(rnd, pools, fid, initial: dict, sequence_by: list[str], flags: dict, typed: bool = False,
                   partial: bool = False, whole_table: bool = False) -> list[dict]:
    """Change sets with an op column and sequence columns (rules.md#changeset: FLAG, ID, VALUE, CDC_TIMESTAMP).
    `typed`: the columns are declared, and the integer column is written as a number. With a
    truncate flag (`flags["T"]`, `options.truncates`) the history truncates the table now and then
    (a row of the op and sequence columns only); `partial`: updates carry only some columns."""
    history = source_history(rnd, pools, fid, pairs=False, initial=initial, truncates="T" in flags,
                             whole_table=whole_table)
    styles = ["space", "iso_t", "iso_z", "offset"]
    style = rnd.choice(styles + ["mixed"])  # "mixed": each change spells its time its own way
    seq_as_text = not typed and rnd.random() < 0.35  # some writers (BigQuery JSON exports) write INT64 as text
    micros = rnd.randint(0, 10 ** 6) * 10 ** 6
    seq = rnd.choice([rnd.randint(-20, 20), 7, 98, 999])
    sub_second = rnd.random() < 0.5
    out = []
    for i, (op, key, row) in enumerate(history):
        if sequence_by == [SEQ_COL]:
            seq += rnd.choice([1, 2, 3, 11]) if i else 0
            micros += rnd.choice([-10 ** 6, 0, 10 ** 6])  # not an ordering column here: anything goes
        elif sequence_by == [TS_COL]:
            if i:
                micros += rnd.choice([1000, 250_000]) if sub_second else rnd.choice([1, 2, 60]) * 10 ** 6
            seq = rnd.randint(-5, 5)  # not an ordering column here
        else:  # [TS, SEQ]: 1-second ties, the integer orders within the second, restarts with it
            tick = rnd.choice([0, 0, 0, 1]) if i else 0
            if tick:
                micros += tick * 10 ** 6
                seq = rnd.choice([rnd.randint(-20, 20), 8, 98])
            elif i:
                seq += rnd.choice([1, 2, 9])
        spelled = rnd.choice(styles) if style == "mixed" else style
        position = {SEQ_COL: str(seq) if seq_as_text else seq, TS_COL: _ts_text(rnd, spelled, micros)}
        if op == "T":
            rec = {OP_COL: flags["T"], **position}
            out.append(_change(len(out), (), TRUNCATE, {}, f"{fid}#{len(out)}", rec))
            continue
        flag = flags["D"] if op == "D" else flags[op if op in ("I", "U") else "U"]
        if op == "D" and rnd.random() < 0.5:
            row = {**{c: None for c in PAYLOAD}, **{k: row[k] for k in KEYS if k in row}}
        elif op == "U" and partial:
            row = partial_image(rnd, row)
        image = {**row, **position}
        rec = {OP_COL: flag, **image}
        out.append(_change(len(out), key, DELETE if op == "D" else UPSERT, image, f"{fid}#{len(out)}", rec))
    return out


DEBEZIUM_CONNECTORS = ["postgresql", "mysql", "sqlserver", "oracle"]
UNAVAILABLE = "__debezium_unavailable_value"  # PostgreSQL's TOAST placeholder (rules.md#rule-10)
TOASTED = [TEXT_COL, "late"]  # the text columns whose unchanged values Debezium may leave out


def _debezium_source(pos: Positions | None, scn: int, connector: str, sec: int) -> dict:
    source = {"version": "2.7.0.Final", "connector": connector, "name": "srv", "ts_ms": sec * 1000, "db": "d",
              "table": "t", "snapshot": "false"}
    if connector == "postgresql":
        source.update(schema="public", lsn=pos.p[0], txId=5)
    elif connector == "mysql":
        source.update(file=f"mysql-bin.{pos.p[0]:06d}", pos=pos.p[1], row=0, server_id=1)
    elif connector == "sqlserver":
        lsn = f"{pos.p[0]:08x}:{pos.p[1]:08x}:{pos.p[2]:04x}"
        source.update(schema="dbo", change_lsn=lsn, commit_lsn=lsn, event_serial_no=1)
    else:
        source.update(schema="ROOT", scn=str(scn), commit_scn=str(scn + 1))
    return source


def debezium_feed(rnd, pools, fid, connector: str, initial: dict, *, partial: bool, truncates: bool,
                  whole_table: bool = False) -> list[dict]:
    """Debezium change events (`debezium-json`, the bare envelope): c, u, d and, with `truncates`, t;
    ordered by `source.ts_ms`, then the connector's position (a PostgreSQL LSN as one integer, a MySQL
    binlog file and position, SQL Server's commit and change LSNs, Oracle's scn). A delete's `before`
    is the row or (no REPLICA IDENTITY FULL) only the key. PostgreSQL TOAST: an update or a delete
    may carry the placeholder for an unchanged text column (also as a one-element array), which the
    reference does not count as carried. `partial`: an update carries only some columns."""
    history = source_history(rnd, pools, fid, pairs=False, initial=initial, truncates=truncates,
                             whole_table=whole_table)
    pos = Positions(rnd, {"postgresql": "postgres", "oracle": "postgres"}.get(connector, connector))
    scn = rnd.randint(1, 2 ** 40)
    sec = EPOCH0 + rnd.randint(0, 10 ** 7)
    tick_rate = rnd.choice([0.05, 0.2, 0.4])
    out: list[dict] = []
    for i, (op, key, row) in enumerate(history):
        tick = rnd.choice([1, 1, 2, 3600]) if i and rnd.random() < tick_rate else 0
        if tick:
            sec += tick
        if tick and rnd.random() < 0.2:
            pos.fail_over()  # a new second may start anywhere in the log: ts_ms orders it
        elif i:
            pos.advance()
        scn += rnd.choice([1, 2, 100])  # Oracle: changes at one scn rank by arrival, so the scn always grows
        source = _debezium_source(pos, scn, connector, sec)
        event = {"op": {"I": "c", "U": "u", "D": "d", "T": "t"}[op], "before": None, "after": None,
                 "source": source, "ts_ms": sec * 1000 + 5, "transaction": None}
        if op == "T":
            out.append(_change(len(out), (), TRUNCATE, {}, f"{fid}#{len(out)}", event))
            continue
        image = dict(row)
        if op == "U" and partial:
            image = partial_image(rnd, image)
        unset = []
        if op in ("U", "D"):
            for c in TOASTED:
                if image.get(c) is not None and rnd.random() < 0.3:
                    image[c] = [UNAVAILABLE] if rnd.random() < 0.2 else UNAVAILABLE
                    unset.append(c)
        event["before" if op == "D" else "after"] = image
        change = _change(len(out), key, DELETE if op == "D" else UPSERT,
                         {c: v for c, v in image.items() if c not in unset}, f"{fid}#{len(out)}", event)
        if unset:
            change["unset"] = unset
        out.append(change)
    return out


def snapshot_feed(rnd, pools, fid, initial: dict, n_batches: int) -> list[dict]:
    """A source table's rows as exported at every batch (`format: snapshot`): between two exports keys
    are inserted, updated, deleted or left alone, and now and then every key goes (an empty export of
    the feed's part of the table); a column may start to appear at some export. A change here is one
    exported row, its `seq` its batch: the reference derives inserts, updates and deletes from them."""
    keys = list(dict.fromkeys(list(initial) + _keys(rnd, pools, fid) + _keys(rnd, pools, fid)))
    state = dict(initial)
    late_from = rnd.randrange(n_batches) if rnd.random() < 0.3 else None
    out: list[dict] = []
    for b in range(n_batches):
        late = late_from is not None and b >= late_from
        if rnd.random() < 0.08:
            state = {}
        for key in keys:
            r = rnd.random()
            if key in state and r < 0.2:
                del state[key]
            elif (key in state and r < 0.55) or (key not in state and r < 0.6):
                state[key] = _row(rnd, pools, key, late)
        for key, row in state.items():
            out.append(_change(b, key, UPSERT, dict(row), f"{fid}#{len(out)}", dict(row)))
    return out


# ---- tables and deliveries ---------------------------------------------------------------

TABLE_KINDS = ["ds", "ds_base", "bqa", "bqc", "cs_csv", "cs_json", "cs_typed"]
# The sources of rules.md#rule-9 to rules.md#rule-12, each table drawing `partial_updates` and `deletes: soft`:
# Debezium (TOAST placeholders; partial updates), whole exports (`format: snapshot`), and change
# sets and Debezium feeds that truncate. A truncate clears the whole table, so a table that
# truncates holds one feed (`TablePlan.whole_table`), with more keys and changes. A normal run
# takes two of them in each example (`source_kinds`), `--long` all four.
SOURCE_KINDS = ["dbz", "snap", "cs_t", "dbz_t"]
TRUNCATING = ("cs_t", "dbz_t")


def source_kinds(example: int, long: bool) -> list[str]:
    return list(SOURCE_KINDS) if long else SOURCE_KINDS[example % 2::2]


def feeds_planned(examples: int, long: bool, feeds_per_table: int) -> int:
    """How many feeds a run generates: a truncating table holds one (either half of the source
    kinds holds one truncating kind, so the count does not depend on the half an example draws)."""
    return sum(1 if k in TRUNCATING else feeds_per_table
               for ex in range(examples) for k in TABLE_KINDS + source_kinds(ex, long))
# cs_typed declares every column's type (`columns:`), so its JSON changes are stored in typed
# columns of changes and staging, and its target holds longs, doubles and UTC timestamps.
TYPED_COLUMNS = {"feed": "string", "kid": "long", "kpart": "string", "kname": "string", "n": "long", "x": "double",
                 TEXT_COL: "string", REGION: "string", "late": "string", SEQ_COL: "long", TS_COL: "timestamp"}


def declared_columns(kind: str, scale: int, csv_involved: bool) -> dict[str, str]:
    """cdc.yaml `columns:` of a table: every table declares its decimal(38,s) and timestamp columns
    (JSON and CSV carry no types); a table with CSV input declares its text keys, as the README
    says to (CSV keeps a text's spelling only in a column declared or holding text); cs_typed all."""
    columns = {AMT: f"decimal(38,{scale})", TS: "timestamp"}
    if csv_involved:
        columns.update({k: "string" for k in TEXT_KEYS})
    if kind == "cs_typed":
        columns.update(TYPED_COLUMNS)
    return columns


def plan_table(rnd: random.Random, pools: Pools, name: str, kind: str, n_feeds: int, long: bool,
               partitioned: bool = False, named: bool = False) -> TablePlan:
    # (a normal run's tables of SOURCE_KINDS land 2 or 3 batches, to keep within the suite's time)
    n_batches = rnd.randint(2, 5 if long else 3 if kind in SOURCE_KINDS else 4)
    base = kind == "ds_base" or (kind != "ds" and rnd.random() < 0.5)
    fmt = {"ds": "datastream-json", "ds_base": "datastream-json", "bqa": "bigquery-append",
           "bqc": "bigquery-cdc", "cs_csv": "changeset", "cs_json": "changeset", "cs_typed": "changeset",
           "cs_t": "changeset", "dbz": "debezium-json", "dbz_t": "debezium-json", "snap": "snapshot"}[kind]
    options, flags, sequence_by = {}, {}, []
    csv_main = kind == "cs_csv" or (kind in ("cs_t", "snap") and rnd.random() < 0.5)
    if fmt == "changeset":
        # a table with CSV input always orders by the integer column (alone or after the timestamp)
        sequence_by = rnd.choice([[SEQ_COL], [TS_COL, SEQ_COL]] + ([[TS_COL]] if not csv_main else []))
        flags = rnd.choice([{"I": "I", "U": "U", "D": "D", "T": "T"}, {"I": 0, "U": 1, "D": 2, "T": 3}])
        if kind != "cs_t":
            del flags["T"]
        options = {"op_column": OP_COL, "sequence_by": sequence_by, "inserts": [flags["I"]],
                   "updates": [flags["U"]], "deletes": [flags["D"]]}
        if "T" in flags:
            options["truncates"] = [flags["T"]]
    main_ext = "csv" if csv_main else "jsonl"
    other_ext = "jsonl" if csv_main else ("csv" if kind in ("cs_json", "cs_typed", "cs_t", "snap") else "jsonl")
    slots = []
    for b in range(n_batches):
        names = []
        for s in range(rnd.randint(1, 3)):
            ext = main_ext if rnd.random() < 0.75 else other_ext
            if kind == "cs_typed" and rnd.random() < 0.4:
                ext = "parquet"
            elif rnd.random() < 0.15:
                ext += ".gz"
            names.append(f"batch-{b + 1:02d}/part-{s:04d}.{ext}")
        slots.append(names)
    table = TablePlan(name, fmt, options, base, slots, partition_by=[REGION] if partitioned else [])
    if kind in SOURCE_KINDS:
        table.partial = kind != "snap" and rnd.random() < 0.5
        table.soft = rnd.random() < 0.5
    scale = rnd.choice(DECIMAL_SCALES)
    table.columns = declared_columns(kind, scale, table.csv_involved)
    pools = pools.for_table(scale, table.csv_involved, table.partial)
    sources = ["oracle", "mysql", "postgres", "sqlserver"]
    rnd.shuffle(sources)
    connectors = list(DEBEZIUM_CONNECTORS)
    rnd.shuffle(connectors)
    for i in range(1 if kind in TRUNCATING else n_feeds):
        fid = f"{name.lower()}-f{i:03d}"
        frnd = random.Random(f"{rnd.random()}/{fid}")
        table.feeds.append(plan_feed(frnd, pools, table, fid, kind, sequence_by, flags, sources[i % 4],
                                     connectors[i % 4]))
    table.deferred = rnd.random() < 0.4
    # a partial-update table keeps every staged change (config.py refuses a staging trim there)
    table.trimmed = not table.partial and rnd.random() < 0.5
    if named:
        table.names = draw_names(rnd)
    return table


def plan_feed(rnd, pools, table: TablePlan, fid: str, kind: str, sequence_by, flags, ds_source: str,
              connector: str = "postgresql") -> FeedPlan:
    initial: dict = {}
    with_base = table.base and rnd.random() < 0.6
    backfill = kind.startswith("ds") and rnd.random() < 0.4
    if with_base or backfill:
        for key in _keys(rnd, pools, fid)[:rnd.randint(1, 3)]:
            initial[key] = _row(rnd, pools, key, False)
    whole_table = kind in TRUNCATING
    if kind.startswith("ds"):
        source = ds_source  # the Datastream source kinds take turns, so each has its share of feeds
        changes = datastream_feed(rnd, pools, fid, source, initial, backfill)
    elif kind == "bqa":
        source, changes = "bigquery-append", bigquery_append_feed(rnd, pools, fid, initial)
    elif kind == "bqc":
        source, changes = "bigquery-cdc", bigquery_cdc_feed(rnd, pools, fid, initial)
    elif kind.startswith("dbz"):
        source = f"debezium {connector}"
        changes = debezium_feed(rnd, pools, fid, connector, initial, partial=table.partial,
                                truncates=kind == "dbz_t", whole_table=whole_table)
    elif kind == "snap":
        source, changes = "snapshot", snapshot_feed(rnd, pools, fid, initial, table.batches)
    else:
        source = f"changeset {'+'.join(sequence_by)}"
        changes = changeset_feed(rnd, pools, fid, initial, sequence_by, flags, typed=kind == "cs_typed",
                                 partial=table.partial, whole_table=whole_table)
    base = []
    if with_base:
        for row in initial.values():
            row = dict(row)
            if table.format == "changeset":
                # a base row ranks below every change, even with sequence values above them all
                row[SEQ_COL] = rnd.choice([10 ** 9, -10 ** 9, None])
                row[TS_COL] = rnd.choice(["2099-01-01 00:00:00", "1999-01-01 00:00:00"])
            base.append(row)
    if table.format == "snapshot":  # an export's rows arrive in their batch, in any of its files
        delivery = [[i, c["seq"], rnd.randrange(len(table.slots[c["seq"]]))] for i, c in enumerate(changes)]
    else:
        delivery = plan_delivery(rnd, len(changes), table.slots)
    extras = [name for name, on in (("partial", table.partial), ("soft", table.soft)) if on]
    return FeedPlan(fid, " +".join([source] + extras) + (" +base" if base else "") + (" +backfill" if backfill else ""),
                    changes, base, delivery)


def plan_delivery(rnd: random.Random, n: int, slots: list[list[str]]) -> list[list[int]]:
    """Every change at least once: in its time's batch, or delayed, or anywhere; some twice or more."""
    n_batches = len(slots)
    mode = rnd.choice(["flow", "flow", "chaos"])
    out = []
    for i in range(n):
        if mode == "flow":
            b = min(n_batches - 1, i * n_batches // max(n, 1))
            if rnd.random() < 0.2:
                b = rnd.randint(b, n_batches - 1)  # delayed
        else:
            b = rnd.randrange(n_batches)
        out.append([i, b, rnd.randrange(len(slots[b]))])
        while rnd.random() < 0.12:  # duplicate delivery: same event, same or another batch
            d = rnd.randrange(n_batches)
            out.append([i, d, rnd.randrange(len(slots[d]))])
    return out


# ---- files --------------------------------------------------------------------------------

def _csv_text(value) -> str:
    value = decimal_of(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# A Parquet change file's column types: those cs_typed declares, the op column's inferred.
PARQUET_TYPES = {"feed": pa.string(), "kid": pa.int64(), "kpart": pa.string(), "kname": pa.string(), "n": pa.int64(),
                 "x": pa.float64(), TEXT_COL: pa.string(), REGION: pa.string(), "late": pa.string(), SEQ_COL: pa.int64(),
                 TS_COL: pa.timestamp("us", "UTC"), TS: pa.timestamp("us", "UTC")}
_JSON_DECIMAL = re.compile(r'"\\u0001decimal:([-0-9.]+)"')  # a plan's decimal, as json.dumps writes it


def _utc(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    t = dt.datetime.fromisoformat(text)
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


def _parquet_file(records: list[dict], table: TablePlan) -> bytes:
    columns = list(dict.fromkeys(c for r in records for c in r))
    scale = int(table.columns.get(AMT, "decimal(38,0)")[len("decimal(38,"):-1])
    types = {**PARQUET_TYPES, AMT: pa.decimal128(38, scale)}
    logical = {v: k for k, v in table.names.items()}
    arrays = {}
    for c in columns:
        values = [decimal_of(r.get(c)) for r in records]
        lc = logical.get(c, c)
        arrays[c] = pa.array([_utc(v) for v in values] if lc in (TS_COL, TS) else values, types.get(lc))
    buf = io.BytesIO()
    pq.write_table(pa.table(arrays), buf)
    return buf.getvalue()


def render_file(name: str, records: list[dict], rnd: random.Random, table: TablePlan) -> bytes:
    if name.endswith(".parquet"):
        return _parquet_file(records, table)
    if ".csv" in name:
        columns = list(dict.fromkeys(c for r in records for c in r))
        rnd.shuffle(columns)  # each writer its own column order
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(columns)
        for r in records:
            w.writerow([_csv_text(r.get(c)) for c in columns])
        data = buf.getvalue().encode("utf-8")
    else:
        ascii_only = rnd.random() < 0.5
        data = "".join(_JSON_DECIMAL.sub(r"\1", json.dumps(r, ensure_ascii=ascii_only)) + "\n"
                       for r in records).encode("utf-8")
    return gzip.compress(data, mtime=0) if name.endswith(".gz") else data


def physical_record(table: TablePlan, record: dict) -> dict:
    """A record as the source writes it, under the table's physical column names: a Datastream
    event's payload and key list, the row of the other formats."""
    if not table.names:
        return record
    rename = table.physical
    if "op" in record and "source" in record:  # a Debezium envelope
        return {**record, **{k: {rename(c): v for c, v in record[k].items()}
                             for k in ("before", "after") if isinstance(record.get(k), dict)}}
    if isinstance(record.get("payload"), dict):
        meta = {k: [rename(c) for c in v] if k in ("primary_keys", "replication_index") else v
                for k, v in record["source_metadata"].items()}
        return {**record, "payload": {rename(c): v for c, v in record["payload"].items()}, "source_metadata": meta}
    return {rename(c): v for c, v in record.items()}


def batch_files(table: TablePlan, b: int, rnd: random.Random) -> dict[str, bytes]:
    per_slot: dict[int, list[dict]] = {}
    for feed in table.feeds:
        for i, batch, slot in feed.delivery:
            if batch == b:
                per_slot.setdefault(slot, []).append(physical_record(table, feed.changes[i]["record"]))
    out = {}
    for slot, records in per_slot.items():
        rnd.shuffle(records)
        out[table.slots[b][slot]] = render_file(table.slots[b][slot], records, rnd, table)
    return out


def write_base(table: TablePlan, path: str) -> None:
    rows = [r for f in table.feeds for r in f.base]
    columns = list(dict.fromkeys(table.keys + [c for r in rows for c in r]))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([table.physical(c) for c in columns])
    for r in rows:
        w.writerow([_csv_text(r.get(c)) for c in columns])
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(buf.getvalue())


# ---- the reference and the comparison -----------------------------------------------------

def reference_after(feed: FeedPlan, batch: int, keys: list[str], *, partial: bool = False, soft: bool = False,
                    snapshots: list[int] | None = None) -> dict[tuple, dict]:
    """The feed's expected rows after `batch`: key -> source columns, and in a soft-delete table
    every key ever changed, its `_cdc_deleted` flag among them. `snapshots`: the table's batches that
    landed an export (`format: snapshot`), whose rows are the feed's whole state then: the reference
    is given, at each, an upsert of every exported row and a delete of every other key it knows."""
    ref = ReferenceTable({tuple(r[k] for k in keys): r for r in feed.base}, partial=partial)
    if snapshots is not None:
        known = {tuple(r[k] for k in keys) for r in feed.base}
        for b in sorted(x for x in snapshots if x <= batch):
            rows = [feed.changes[i] for i, d, _ in feed.delivery if d == b]
            seq = (b + 1) * 10 ** 6  # exports rank by batch, above the base
            for c in rows:
                ref.deliver(SourceChange(tuple(c["key"]), seq, UPSERT, c["row"]))
            for key in known - {tuple(c["key"]) for c in rows}:
                ref.deliver(SourceChange(key, seq, DELETE, dict(zip(keys, key))))
            known |= {tuple(c["key"]) for c in rows}
    else:
        for i, b, _ in sorted(feed.delivery, key=lambda d: d[1]):
            if b <= batch:
                c = feed.changes[i]
                ref.deliver(SourceChange(tuple(c["key"]), c["seq"], c["op"], c["row"], c["eid"],
                                         frozenset(c.get("unset", ()))))
    if soft:
        return {k: {**row, DELETED: deleted} for k, (row, deleted) in ref.soft_state().items()}
    return ref.state()


def compare_feed(feed: FeedPlan, rows: list[dict], batch: int, t: TablePlan, snapshots: list[int]) -> str | None:
    """None when the feed's target rows equal the reference state; else what differs. Keys compare
    exactly (`key_of`): two rows whose keys only a number reading or a folding would make one are two."""
    csv_input = t.csv_involved
    expected = {key_of(r): r for r in reference_after(
        feed, batch, t.keys, partial=t.partial, soft=t.soft,
        snapshots=snapshots if t.format == "snapshot" else None).values()}
    actual: dict[tuple, dict] = {}
    for r in rows:
        k = key_of(r)
        if k in actual:
            return f"key {k} appears twice in target"
        actual[k] = r
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    if missing or extra:
        return f"after batch {batch + 1}: missing keys {missing[:3]}, unexpected keys {extra[:3]}"
    for k, want in expected.items():
        got = actual[k]
        for c in set(want) | set(got):
            if not same_value(want.get(c), got.get(c), csv_input=csv_input):
                return f"after batch {batch + 1}: key {k} column {c!r}: expected {want.get(c)!r}, target has {got.get(c)!r}"
    return None


# ---- driving the engine ---------------------------------------------------------------------

def table_entry(root: str, t: TablePlan) -> dict:
    entry = {"name": t.name, "keys": [t.physical(k) for k in t.keys], "format": t.format, "history": True}
    if t.options:
        entry["options"] = t.options
    if t.partition_by:
        entry["partition_by"] = [t.physical(c) for c in t.partition_by]
    if t.columns:
        entry["columns"] = {t.physical(c): type_ for c, type_ in t.columns.items()}
    if t.base:
        entry["base_snapshot"] = os.path.join(root, "exports", f"{t.name}.csv")
    if t.deferred:
        entry["apply"] = {"min_changes": DEFERRED_MIN_CHANGES}
    if t.trimmed:
        entry["maintenance"] = {"trim_staging_after": "1h"}
    if t.partial:
        entry["partial_updates"] = True
    if t.soft:
        entry["deletes"] = "soft"
    return entry


def history_current(cfg, table: str) -> list[dict] | None:
    """The current versions of the table's SCD2 history, source columns only (None: no history yet)."""
    if delta_version(cfg, table, "history") < 0:
        return None
    rows = DeltaTable(os.path.join(cfg.table_dir(table), "history")).to_pyarrow_table().to_pylist()
    return [{k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows if r["_cdc_is_current"]]


def history_all(cfg, table: str) -> list[str]:
    return canonical(DeltaTable(os.path.join(cfg.table_dir(table), "history")).to_pyarrow_table().to_pylist())


def canonical_meaning(rows: list[dict]) -> list[str]:
    """Rows as comparable text of what their values mean (`meaning`; '' stays '')."""
    return sorted(repr(sorted((k, meaning(v, empty_is_null=False)) for k, v in r.items())) for r in rows)


def quarantined(cfg, table: str) -> list[dict]:
    path = os.path.join(cfg.table_dir(table), "quarantine")
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return []
    return DeltaTable(path).to_pyarrow_table(columns=["_cdc_file", "_cdc_line", "_cdc_reason", "_cdc_raw"]).to_pylist()


def target_files(cfg, t: TablePlan) -> dict:
    """Partition value (by meaning) -> the data files of the target's current snapshot."""
    if delta_version(cfg, t.name, "target") < 0:
        return {}
    target = os.path.join(cfg.table_dir(t.name), "target")
    dt = DeltaTable(target)
    layout = PartitionLayout.of(dt, [t.physical(REGION)])
    out: dict = {}
    for a in pa.table(dt.get_add_actions(flatten=False)).to_pylist():
        file = os.path.join(target, unquote(a["path"]))  # a value named by its digest is read from its file
        out.setdefault(meaning(layout.values(a["partition"] or {}, file)[0]), set()).add(a["path"])
    return out


def widened_since(cfg, t: TablePlan, version: int) -> bool:
    """Whether a commit after `version` rewrote the target to widen a column's type, or laid it out
    again for an empty text in its partition column."""
    if version < 0:
        return False
    history = DeltaTable(os.path.join(cfg.table_dir(t.name), "target")).history(limit=10)
    return any(h.get("cdc.step") in ("widen", RELAYOUT) for h in history if h["version"] > version)


def touched_partitions(t: TablePlan, batch: int, before: list[dict]) -> set:
    """The partitions a batch may rewrite (rules.md#rule-5): those of the images it delivers and
    those its keys are in before it; a truncate's, or an export's, every partition."""
    if t.format == "snapshot" or any(f.changes[i]["op"] == TRUNCATE for f in t.feeds for i, b, _ in f.delivery
                                     if b == batch):
        return {meaning(r.get(REGION)) for r in before} | {meaning(f.changes[i]["row"].get(REGION))
                                                          for f in t.feeds for i, b, _ in f.delivery if b == batch}
    touched, keys = set(), set()
    for f in t.feeds:
        for i, b, _ in f.delivery:
            if b == batch:
                touched.add(meaning(f.changes[i]["row"].get(REGION)))
                keys.add(key_of(f.changes[i]["row"]))
    touched |= {meaning(r.get(REGION)) for r in before if key_of(r) in keys}
    return touched


def source_rows(t: TablePlan, rows: list[dict]) -> list[dict]:
    """Rows of the target or the fresh read as the reference has them: source columns under their
    logical names, and in a soft-delete table the `_cdc_deleted` flag (null is false)."""
    out = [{c: v for c, v in r.items() if not c.startswith("_cdc_")} | ({DELETED: bool(r.get(DELETED))} if t.soft else {})
           for r in rows]
    return t.logical(out)


def live_rows(rows: list[dict]) -> list[dict]:
    """A soft-delete table's rows that are not flagged deleted, without the flag."""
    return [{c: v for c, v in r.items() if c != DELETED} for r in rows if not r.get(DELETED)]


def run_plans(spark, tables: list[TablePlan], rnd: random.Random, threads: int = 2,
              seen: Counter | None = None) -> dict[tuple[str, str], str | None]:
    """Land every table's batches one at a time, run the table as `cdc-assets run` does (its
    Dagster jobs, in this process, checks included), check each feed after each batch.
    Returns {(table, fid): first failure or None}; `seen` counts the partition events that
    happened (keys that moved, partitions emptied, left untouched, rebuilt)."""
    seen = Counter() if seen is None else seen
    from pathlib import Path

    results: dict[tuple[str, str], str | None] = {(t.name, f.fid): None for t in tables for f in t.feeds}
    with tempfile.TemporaryDirectory(prefix="random_feeds_") as tmp:
        root = Path(tmp)
        (root / "landing").mkdir()
        (root / "exports").mkdir()
        for t in tables:
            if t.base:
                write_base(t, str(root / "exports" / f"{t.name}.csv"))
        cfg = write_config(root, [table_entry(str(root), t) for t in tables])
        defs = build_definitions(cfg)
        files = {t.name: [batch_files(t, b, random.Random(f"{rnd.random()}")) for b in range(t.batches)]
                 for t in tables}

        # the batches that land files (an export's batch with no rows lands nothing)
        snapshots = {t.name: [b for b in range(t.batches) if files[t.name][b]] for t in tables}

        def read_target(t: TablePlan) -> list[dict]:
            return source_rows(t, target_rows(cfg, t.name, source_only=False))

        def fail_all(t: TablePlan, why: str, only=None) -> None:
            for f in t.feeds:
                if results[(t.name, f.fid)] is None and (only is None or f.fid in only):
                    results[(t.name, f.fid)] = why

        def one_batch(t: TablePlan, b: int, inst: dg.DagsterInstance, before: list[dict]) -> list[dict]:
            files_before = target_files(cfg, t) if t.partition_by else {}
            version_before = delta_version(cfg, t.name, "target")
            for name, data in files[t.name][b].items():
                folder, fname = name.split("/")
                land(cfg, t.name, folder, {fname: data})
            outcome = run_table(defs, inst, cfg, cfg.table(t.name))
            if t.partition_by and widened_since(cfg, t, version_before):
                # A column whose type widens (CSV inference: long -> double -> string) is rewritten
                # in every file, so every partition; rules.md#rule-5 holds for the other batches only.
                seen["widening rewrites"] += 1
            elif t.partition_by:
                files_after = target_files(cfg, t)
                rewritten = {p for p, fs in files_before.items() if files_after.get(p, set()) != fs}
                untouched = rewritten - touched_partitions(t, b, before)
                seen["partitions emptied"] += len(set(files_before) - set(files_after))
                seen["partitions kept"] += len(set(files_before) - rewritten)
                if untouched:
                    fail_all(t, f"after batch {b + 1}: partitions {sorted(repr(p and p[1]) for p in untouched)} were rewritten, "
                                "though no change of the batch was or is in them")
            if not outcome.ok:
                fail_all(t, f"after batch {b + 1}: the run failed: {outcome.error}; checks {outcome.checks}")
            # generated feeds are all well-formed: nothing of them belongs in quarantine
            for q in quarantined(cfg, t.name):
                why = f"after batch {b + 1}: quarantined {q['_cdc_file']} line {q['_cdc_line']}: {q['_cdc_reason']}"
                fail_all(t, why, only={f.fid for f in t.feeds if f.fid in (q["_cdc_raw"] or "")} or None)
            built = delta_version(cfg, t.name, "target") >= 0
            rows = read_target(t) if built else []
            # once a target exists (an empty base snapshot builds one) a deferred table's merges wait
            if t.deferred and built:
                if b > 0 and outcome.ok and files[t.name][b] and not (outcome.waiting or "").startswith("merge waits"):
                    fail_all(t, f"after batch {b + 1}: a deferred table's merge did not wait: {outcome.waiting}")
                seen["fresh reads compared"] += 1
                # what the next apply gives
                rows = source_rows(t, fresh_table(cfg, cfg.table(t.name), with_metadata=True).to_pylist())
            current = history_current(cfg, t.name)
            current = None if current is None else t.logical(current)
            if outcome.ok and current is not None:
                # the history's current versions are the target (or what the waiting merge will give);
                # a column only one of them has is null in every row (its values came in images the
                # other did not keep), so rows are compared over both's columns; and by meaning: a
                # number in a column widened to text is spelt by the path that converted it
                # (6.9E+16 from a decimal, 6.9e+16 from a double)
                seen["history tables compared"] += 1
                live = live_rows(rows)  # a deleted key has no current version, whatever the target keeps
                both = set().union(*(r.keys() for r in current + live))
                current, rows_ = ([{c: r.get(c) for c in both} for r in x] for x in (current, live))
                if canonical_meaning(current) != canonical_meaning(rows_):
                    fail_all(t, f"after batch {b + 1}: the history's current versions differ from the target: "
                                f"{len(set(canonical_meaning(current)) - set(canonical_meaning(rows_)))} only in the "
                                f"history, {len(set(canonical_meaning(rows_)) - set(canonical_meaning(current)))} only in "
                                "the target")
            if t.partition_by:
                was = {key_of(r): meaning(r.get(REGION)) for r in before}
                seen["keys moved"] += sum(1 for r in rows if was.get(key_of(r),
                                                                     meaning(r.get(REGION))) != meaning(r.get(REGION)))
            compare_all(t, b, rows)
            return rows

        def compare_all(t: TablePlan, b: int, rows: list[dict], when: str = "") -> None:
            by_feed: dict = {}
            for r in rows:
                by_feed.setdefault(r.get("feed"), []).append(r)
            for f in t.feeds:
                if results[(t.name, f.fid)] is None:
                    why = compare_feed(f, by_feed.get(f.fid, []), b, t, snapshots[t.name])
                    results[(t.name, f.fid)] = why and when + why

        def rebuild_all(t: TablePlan, inst: dg.DagsterInstance) -> None:
            """A backfill of every target partition from staging (the apply job over the whole
            dynamic range, as the UI launches it) ends in the state the batches built."""
            keys = inst.get_dynamic_partitions(TableNames(t.name).target_partitions)
            if not keys:
                return
            result = defs.resolve_job_def(TableNames(t.name).apply_job).execute_in_process(
                instance=inst, raise_on_error=False, run_config=QUIET,
                tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
            seen["partitions rebuilt"] += len(keys)
            failed_checks = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
            if not result.success or failed_checks:
                fail_all(t, f"rebuilding every partition: success {result.success}, failed checks {failed_checks}")
            compare_all(t, t.batches - 1, read_target(t), "after rebuilding every partition: ")

        def rebuild_history(t: TablePlan, inst: dg.DagsterInstance) -> None:
            """A rebuild of the history from `changes` (the history job with rebuild: true, as the
            UI's launchpad runs it) gives exactly the rows the batch-by-batch updates built."""
            if delta_version(cfg, t.name, "history") < 0:
                return
            updated = history_all(cfg, t.name)
            name = f"{t.name}_history_job"
            result = defs.resolve_job_def(name).execute_in_process(
                instance=inst, raise_on_error=False,
                run_config={**QUIET, "ops": {f"{t.name}__history": {"config": {"rebuild": True}}}})
            if not result.success:
                causes = [root_cause_of_info(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
                fail_all(t, f"rebuilding the history failed: {causes}")
            elif history_all(cfg, t.name) != updated:
                rebuilt = history_all(cfg, t.name)
                fail_all(t, f"the rebuilt history differs from the updated one: {len(set(updated) - set(rebuilt))} "
                            f"rows only in the updated, {len(set(rebuilt) - set(updated))} only in the rebuilt")
            seen["histories rebuilt"] += 1

        def apply_deferred(t: TablePlan, inst: dg.DagsterInstance) -> None:
            """The merge the deferred table waited for, as the UI's materialization of target runs
            it: the target it commits is exactly the fresh read taken before it."""
            table = cfg.table(t.name)
            fresh_rows = fresh_table(cfg, table, with_metadata=True).to_pylist()
            shown = canonical(fresh_rows)
            version = delta_version(cfg, t.name, "target")
            sync_target_partitions(inst, cfg, table)
            result = defs.resolve_job_def(TableNames(t.name).apply_job).execute_in_process(
                instance=inst, raise_on_error=False, run_config=QUIET, tags=apply_request_tags(inst, table) or {})
            if not result.success:
                causes = [root_cause_of_info(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
                fail_all(t, f"applying a deferred table after its last batch failed: {causes}")
            applied = canonical(target_rows(cfg, t.name, source_only=False))
            if widened_since(cfg, t, version):
                # The apply rewrote the target to widen a column to text first: Spark's rewrite spells a
                # number it turns into text as Java does (6.943109752889543E+16), the fresh read as
                # Python does (6.943109752889543e+16); the same number, compared by meaning.
                seen["widening deferred applies"] += 1
                applied = canonical_meaning(target_rows(cfg, t.name, source_only=False))
                shown = canonical_meaning(fresh_rows)
            if applied != shown:
                fail_all(t, f"the fresh read before the deferred apply differs from the target it committed: "
                            f"{len(set(shown) - set(applied))} rows only in the fresh read, "
                            f"{len(set(applied) - set(shown))} only in the target")
            seen["deferred applies"] += 1
            compare_all(t, t.batches - 1, read_target(t), "after the deferred apply: ")

        def trim_staging(t: TablePlan) -> None:
            """Maintenance as of two hours on: every applied batch keeps in staging only each key's
            latest change (the target does not change for it)."""
            table = cfg.table(t.name)
            if delta_version(cfg, t.name, "target") < 0:
                return  # no target yet (a shrunk feed may deliver nothing to the first batches)
            before = canonical(target_rows(cfg, t.name, source_only=False))
            with table_lock(cfg.table_dir(t.name)):
                report = maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
            seen["staging trims"] += report.staging_trimmed_through is not None
            seen["staged rows trimmed"] += report.staging_rows_trimmed
            if canonical(target_rows(cfg, t.name, source_only=False)) != before:
                fail_all(t, "maintenance changed the target's rows")

        def rebuild_whole(t: TablePlan) -> None:
            """A rebuild of the whole target from the trimmed staging ends in the state the batches built."""
            with table_lock(cfg.table_dir(t.name)):
                rebuild(spark, cfg, cfg.table(t.name), None)
            seen["trimmed tables rebuilt"] += 1
            compare_all(t, t.batches - 1, read_target(t),
                        "after rebuilding from the trimmed staging: ")

        def one_table(t: TablePlan) -> None:
            # an instance per table, as separate `run` processes would have: tables run side by side
            seen["tables with drawn column names"] += bool(t.names)
            with dg.DagsterInstance.ephemeral() as inst:
                rows: list[dict] = []
                for b in range(t.batches):
                    rows = one_batch(t, b, inst, rows)
                    if t.trimmed and b == t.batches // 2 - 1:
                        trim_staging(t)
                if t.deferred:
                    apply_deferred(t, inst)
                # landing nothing new changes nothing: a run commits no new target version
                before = delta_version(cfg, t.name, "target")
                idle = run_table(defs, inst, cfg, cfg.table(t.name))
                if idle.new_batch is not None or not idle.ok or delta_version(cfg, t.name, "target") != before:
                    fail_all(t, f"a run with nothing new landed: batch {idle.new_batch}, ok {idle.ok}, "
                                f"target v{before} -> v{delta_version(cfg, t.name, 'target')}")
                if t.partition_by:
                    rebuild_all(t, inst)
                if t.trimmed:
                    rebuild_whole(t)
                rebuild_history(t, inst)

        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                for fut in [pool.submit(one_table, t) for t in tables]:
                    fut.result()
        else:
            for t in tables:
                one_table(t)
    return results


# ---- shrinking a failing feed -------------------------------------------------------------

def relabel(feed: FeedPlan, fid: str) -> FeedPlan:
    """The same feed under another feed id (and fresh event ids), so that copies can share a table."""
    def walk(v):
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k == "feed" and x == feed.fid:
                    out[k] = fid
                elif k == "uuid" and isinstance(x, str) and x:
                    out[k] = str(uuid.uuid5(uuid.NAMESPACE_URL, fid + "/" + x))
                else:
                    out[k] = walk(x)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    changes = []
    for c in feed.changes:
        c2 = walk(copy.deepcopy(c))
        c2["key"] = [fid] + list(c["key"][1:]) if c["key"] else []  # a truncate has no key
        c2["eid"] = fid + "/" + c["eid"]
        changes.append(c2)
    return FeedPlan(fid, feed.kind, changes, [walk(r) for r in feed.base], [list(d) for d in feed.delivery])


def _items(feed: FeedPlan) -> list[tuple]:
    """What shrinking may drop: each delivery (an index: two deliveries may be alike) and each base row."""
    return [("d", j) for j in range(len(feed.delivery))] + [("b", i) for i in range(len(feed.base))]


def _with_items(feed: FeedPlan, items: list[tuple]) -> FeedPlan:
    keep_d = [list(feed.delivery[x]) for kind, x in items if kind == "d"]
    keep_b = [feed.base[x] for kind, x in items if kind == "b"]
    used = sorted({d[0] for d in keep_d})
    renumber = {old: new for new, old in enumerate(used)}
    changes = [dict(feed.changes[i]) for i in used]  # seq (the true order) is kept as generated
    delivery = [[renumber[i], b, s] for i, b, s in keep_d]
    return FeedPlan(feed.fid, feed.kind, changes, keep_b, delivery)


def _failures(spark, table: TablePlan, candidates: list[FeedPlan]) -> list[str | None]:
    """Run candidate feeds side by side in one table (one run per batch), or each in a table of its
    own where a truncate would clear the others' keys; each one's first failure."""
    def shell(name: str, feeds: list[FeedPlan]) -> TablePlan:
        return replace(table, name=name, feeds=[relabel(c, f"{table.name.lower()}-s{i:03d}") for i, c in feeds])

    if table.whole_table:
        shells = [shell(f"{table.name}_S{i:03d}", [(i, c)]) for i, c in enumerate(candidates)]
    else:
        shells = [shell(table.name, list(enumerate(candidates)))]
    res = run_plans(spark, shells, random.Random(0), threads=1 if len(shells) == 1 else 2)
    return [res[(s.name, f.fid)] for s in shells for f in s.feeds]


def shrink_feed(spark, table: TablePlan, feed: FeedPlan, max_rounds: int = 40,
                max_seconds: float = 900) -> tuple[FeedPlan, str] | None:
    """Delta debugging over the feed's deliveries and base rows: the smallest still-failing
    feed found and its failure; None if the feed does not fail alone."""
    t0 = time.time()
    why = _failures(spark, table, [feed])[0]
    if why is None:
        return None
    items = _items(feed)
    n = 2
    for _ in range(max_rounds):
        if len(items) <= 1 or time.time() - t0 > max_seconds:
            break
        n = min(n, len(items))
        chunks = [items[i * len(items) // n:(i + 1) * len(items) // n] for i in range(n)]
        candidates = [[x for x in items if x not in set(ch)] for ch in chunks]
        candidates = [c for c in candidates if c][:32]
        results = _failures(spark, table, [_with_items(feed, c) for c in candidates])
        failing = [(c, r) for c, r in zip(candidates, results) if r is not None]
        if failing:
            items, why = min(failing, key=lambda cr: len(cr[0]))
            n = max(n - 1, 2)
        elif n >= len(items):
            break
        else:
            n = min(2 * n, len(items))
    return _with_items(feed, items), why


def keep_failure(table: TablePlan, feed: FeedPlan, why: str) -> str:
    entry = {"why": why, "table": table.spec(), "feed": asdict(feed)}
    text = json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True)
    os.makedirs(FAILURES_DIR, exist_ok=True)
    path = os.path.join(FAILURES_DIR, f"shrunk-{hashlib.sha1(text.encode()).hexdigest()[:12]}.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


# ---- the tests --------------------------------------------------------------------------------

_SHRUNK: dict[str, str] = {}  # failing example -> report, so hypothesis' replay does not shrink twice


def test_random_feeds(spark, long_run, capsys, figures):
    draw_names_in = True
    examples = int(os.environ.get("RANDOM_FEEDS_EXAMPLES", 10 if long_run else 1))
    feeds_per_table = int(os.environ.get("RANDOM_FEEDS_PER_TABLE", 40 if long_run else 18))
    threads = int(os.environ.get("RANDOM_FEEDS_THREADS", "2"))
    tally = {"generated": 0, "passed": 0, "examples": 0, "planned": 0}
    drawn_kinds: list[list[str]] = []
    seeds: list[int] = []
    seen: Counter = Counter()
    # RANDOM_FEEDS_KINDS=dbz,snap,...: only these table kinds (to draw many of a few)
    only = [k for k in os.environ.get("RANDOM_FEEDS_KINDS", "").split(",") if k]

    @settings(max_examples=examples, deadline=None, database=None, print_blob=True,
              phases=[Phase.explicit, Phase.reuse, Phase.generate],  # feeds shrink in shrink_feed
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example, HealthCheck.filter_too_much])
    # Hypothesis gives its simplest example first (seed 0, the smallest pools; even
    # `st.randoms(use_true_random=True)` gives one fixed seed there), so a run of one example would
    # draw the same feeds every time: the seed comes from the operating system's randomness instead
    # (RANDOM_FEEDS_SEED repeats one), said on the summary line and in every failure.
    @given(value_pools=pools())
    def check(value_pools: Pools):
        seed = int(os.environ.get("RANDOM_FEEDS_SEED") or secrets.randbits(32))
        seeds.append(seed)
        rnd = random.Random(f"random-feeds/{seed}")
        # every other table kind is partitioned, the others in the other half; every table kind
        # names its columns from NAME_POOL in one of the two halves (some of them partitioned);
        # examples alternate halves from one the seed draws, so a run of one example covers either
        ex = tally["examples"] + seed % 2
        drawn_kinds.append(source_kinds(ex, long_run))
        kinds = [k for k in TABLE_KINDS + source_kinds(ex, long_run) if not only or k in only]
        if only:  # every drawn kind in every example
            kinds += [k for k in SOURCE_KINDS if k in only and k not in kinds]
        tables = [plan_table(rnd, value_pools, f"R{seed % 10000:04d}_{kind.upper()}", kind, feeds_per_table, long_run,
                             partitioned=(i + ex) % 2 == 0, named=draw_names_in and (i // 2 + ex) % 2 == 0)
                  for i, kind in enumerate(kinds)]
        for t in (t for t, k in zip(tables, kinds) if k in SOURCE_KINDS):
            seen["source tables " + "+".join([t.format] + [x for x in ("partial", "soft") if getattr(t, x)]
                                      + (["truncates"] if t.whole_table else []))] += 1
        tally["planned"] += sum(len(t.feeds) for t in tables)
        results = run_plans(spark, tables, rnd, threads=threads, seen=seen)
        tally["examples"] += 1
        failed = {k: v for k, v in results.items() if v is not None}
        tally["generated"] += len(results)
        tally["passed"] += len(results) - len(failed)
        if not failed:
            return
        marker = json.dumps(sorted(failed))
        if marker not in _SHRUNK:
            reports = []
            by_name = {t.name: t for t in tables}
            for (tname, fid), why in sorted(failed.items())[:3]:
                table = by_name[tname]
                feed = next(f for f in table.feeds if f.fid == fid)
                shrunk = shrink_feed(spark, table, feed)
                if shrunk is None:
                    path = keep_failure(table, feed, why + " (fails only together with other feeds)")
                    reports.append(f"{tname} {fid} [{feed.kind}]: {why}\n  does not fail alone; feed: {path}")
                else:
                    path = keep_failure(table, shrunk[0], shrunk[1])
                    reports.append(f"{tname} {fid} [{feed.kind}]: {why}\n  shrunk to {len(shrunk[0].changes)} "
                                   f"changes, {len(shrunk[0].delivery)} deliveries: {shrunk[1]}\n  shrunk feed: {path}")
            _SHRUNK[marker] = "\n".join(reports)
        pytest.fail(f"{len(failed)} of {len(results)} random feeds of seed {seed} (RANDOM_FEEDS_SEED={seed} draws "
                    f"them again) differ from the reference:\n{_SHRUNK[marker]}\n"
                    f"keep a shrunk feed as a regression: move its file to {REGRESSIONS_DIR}/")

    t0 = time.time()
    try:
        check()
    finally:
        with capsys.disabled():
            print(f"\nrandom feeds: {tally['generated']} generated, {tally['passed']} passed "
                  f"({tally['examples']} examples of {len(TABLE_KINDS)} tables x {feeds_per_table} feeds through the Dagster "
                  f"jobs, half of the tables partitioned: {seen['keys moved']} keys moved, "
                  f"{seen['partitions emptied']} partitions emptied, {seen['partitions kept']} left untouched, "
                  f"{seen['partitions rebuilt']} rebuilt, {seen['widening rewrites']} rewritten whole to widen a column; "
                  f"{seen['fresh reads compared']} fresh reads of deferred tables compared, "
                  f"{seen['deferred applies']} deferred applies; {seen['history tables compared']} history tables "
                  f"compared with the target, {seen['histories rebuilt']} rebuilt; {seen['staging trims']} stagings "
                  f"trimmed ({seen['staged rows trimmed']} rows), {seen['trimmed tables rebuilt']} rebuilt whole from "
                  f"them; {seen['tables with drawn column names']} tables with drawn column names; "
                  f"{', '.join(f'{n} {k}' for k, n in sorted(seen.items()) if k.startswith('source tables '))}; "
                  f"seeds {seeds}; {time.time() - t0:.0f} s)")
        if figures:
            figures.write_json("random_feeds.json", {
                "generated": tally["generated"], "passed": tally["passed"], "examples": tally["examples"],
                "tables": len(TABLE_KINDS), "feeds_per_table": feeds_per_table, "planned": tally["planned"],
                "source_kinds": drawn_kinds, "seeds": seeds, **dict(seen),
                "regression_feeds": len(_regression_entries()), "seconds": round(time.time() - t0)},
                command="./bootstrap.sh test cdc_assets_tests/defs/test_random_feeds.py --figures docs/figures")
    # the README states these counts for a normal run: exactly this many feeds, every one compared
    planned = tally["planned"] if only else feeds_planned(examples, long_run, feeds_per_table)
    assert (tally["examples"], tally["generated"], tally["passed"]) == (examples, planned, planned)


def _regression_entries() -> list[tuple[str, dict]]:
    if not os.path.isdir(REGRESSIONS_DIR):
        return []
    out = []
    for name in sorted(os.listdir(REGRESSIONS_DIR)):
        if name.endswith(".json"):
            with open(os.path.join(REGRESSIONS_DIR, name), encoding="utf-8") as fh:
                out.append((name, json.load(fh)))
    return out


def test_random_feed_regressions(spark):
    """Shrunk failing feeds, kept as they were shrunk; all that share a table shape run in one pass."""
    entries = _regression_entries()
    if not entries:
        pytest.skip("no kept random feeds")
    groups: dict[str, list] = {}
    for name, e in entries:
        groups.setdefault(json.dumps(e["table"], sort_keys=True), []).append((name, e))
    tables, names = [], {}
    for gi, (spec_text, members) in enumerate(sorted(groups.items())):
        spec = json.loads(spec_text)
        t = TablePlan(f"REG{gi:03d}", spec["format"], spec["options"], spec["base"], spec["slots"],
                      partition_by=spec.get("partition_by", []), columns=spec.get("columns", {}),
                      deferred=spec.get("deferred", False), trimmed=spec.get("trimmed", False),
                      keys=spec.get("keys", OLD_KEYS), names=spec.get("names", {}),
                      partial=spec.get("partial", False), soft=spec.get("soft", False))
        if t.whole_table or any(c["op"] == TRUNCATE for _, e in members for c in e["feed"]["changes"]):
            # a truncate clears every feed of its table: each kept feed replays in a table of its own
            for mi, (name, e) in enumerate(members):
                solo = replace(t, name=f"REG{gi:03d}_{mi:03d}", feeds=[relabel(FeedPlan(**e["feed"]), f"reg{gi:03d}-{mi:03d}")])
                names[(solo.name, solo.feeds[0].fid)] = name
                tables.append(solo)
            continue
        for mi, (name, e) in enumerate(members):
            fid = f"reg{gi:03d}-{mi:03d}"
            t.feeds.append(relabel(FeedPlan(**e["feed"]), fid))
            names[(t.name, fid)] = name
        tables.append(t)
    results = run_plans(spark, tables, random.Random(0), threads=int(os.environ.get("RANDOM_FEEDS_THREADS", "2")))
    failed = {names[k]: v for k, v in results.items() if v is not None}
    assert not failed, failed
