"""pgoutput messages (protocol 1, text values) built as bytes and read back as one table's changes,
ordered by commit LSN then position; key changes as a delete and an upsert; unchanged TOASTed
values not carried; values typed by the catalog's types."""
from __future__ import annotations

import struct

import pytest

from cdc_assets.core import pgoutput
from cdc_assets.core.pgoutput import (
    DELETE,
    TRUNCATE,
    UNCHANGED,
    UPSERT,
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    RelationColumn,
    TableChanges,
    Truncate,
    Update,
)
from cdc_assets.core.postgres import PgColumn

COLS = (RelationColumn("id", True, 23, -1), RelationColumn("region", True, 25, -1),
        RelationColumn("doc", False, 25, -1))
ORDERS = Relation(16384, "public", "orders", "d", COLS)
OTHER = Relation(16390, "public", "other", "d", (RelationColumn("id", True, 23, -1),))


def stream(*messages) -> list[bytes]:
    return [pgoutput.encode(m) for m in messages]


def read(*messages, keys=("region", "id")) -> list[tuple]:
    reader = TableChanges("public", "orders", keys)
    return [(c.sequence, c.op, dict(c.values), c.unset) for data in stream(*messages) for c in reader.feed(data)]


def test_every_message_kind_reads_back_what_was_written():
    for message in (Begin(0x1_0000_0028, 123, 7), Commit(0x28, 0x30, 456), ORDERS, Insert(1, ("1", None, UNCHANGED)),
                    Update(1, "K", ("1", "eu", None), ("2", "eu", "x")), Update(1, None, None, ("2", "eu", "x")),
                    Delete(1, "O", ("1", "eu", "y")), Truncate((1, 2))):
        assert pgoutput.decode(pgoutput.encode(message)) == message


def test_inserts_updates_and_deletes_come_in_order_with_the_commit_lsn_and_the_position():
    got = read(ORDERS, Begin(0x500, 0, 9),
               Insert(16384, ("1", "eu", "a")),
               Update(16384, None, None, ("1", "eu", "b")),
               Delete(16384, "K", ("1", "eu", None)),
               Commit(0x500, 0x530, 0),
               Begin(0x1_0000_0000, 0, 10), Insert(16384, ("2", "us", "c")), Commit(0x1_0000_0000, 0x1_0000_0030, 0))
    assert got == [("500/0", UPSERT, {"id": "1", "region": "eu", "doc": "a"}, frozenset()),
                   ("500/1", UPSERT, {"id": "1", "region": "eu", "doc": "b"}, frozenset()),
                   ("500/2", DELETE, {"id": "1", "region": "eu", "doc": None}, frozenset()),
                   ("100000000/0", UPSERT, {"id": "2", "region": "us", "doc": "c"}, frozenset())]


def test_an_update_that_changes_the_key_is_a_delete_of_the_old_key_then_an_upsert_of_the_new():
    got = read(ORDERS, Begin(0x600, 0, 1), Update(16384, "K", ("1", "eu", None), ("1", "us", "d")),
               Commit(0x600, 0x610, 0))
    assert got == [("600/0", DELETE, {"id": "1", "region": "eu", "doc": None}, frozenset()),
                   ("600/1", UPSERT, {"id": "1", "region": "us", "doc": "d"}, frozenset())]


def test_an_old_row_whose_key_is_unchanged_is_one_upsert():
    # REPLICA IDENTITY FULL sends the old row with every update; the configured key decides
    got = read(ORDERS, Begin(0x600, 0, 1), Update(16384, "O", ("1", "eu", "old"), ("1", "eu", "new")),
               Commit(0x600, 0x610, 0))
    assert got == [("600/0", UPSERT, {"id": "1", "region": "eu", "doc": "new"}, frozenset())]


def test_an_unchanged_toasted_value_is_not_carried_unless_the_whole_old_row_holds_it():
    got = read(ORDERS, Begin(0x700, 0, 1), Update(16384, None, None, ("1", "eu", UNCHANGED)),
               Update(16384, "O", ("1", "eu", "long text"), ("2", "eu", UNCHANGED)), Commit(0x700, 0x710, 0))
    assert got == [("700/0", UPSERT, {"id": "1", "region": "eu"}, frozenset({"doc"})),
                   ("700/1", DELETE, {"id": "1", "region": "eu", "doc": "long text"}, frozenset()),
                   ("700/2", UPSERT, {"id": "2", "region": "eu", "doc": "long text"}, frozenset())]


def test_other_tables_changes_are_passed_over_and_a_truncate_of_ours_is_a_truncate():
    got = read(ORDERS, OTHER, Begin(0x800, 0, 1), Insert(16390, ("5",)), Truncate((16390,)),
               Truncate((16390, 16384)), Commit(0x800, 0x810, 0))
    assert got == [("800/0", TRUNCATE, {}, frozenset())]


def test_a_relation_message_read_again_renames_the_columns_of_later_changes():
    renamed = Relation(16384, "public", "orders", "d", (*COLS, RelationColumn("extra", False, 25, -1)))
    got = read(ORDERS, Begin(0x900, 0, 1), Insert(16384, ("1", "eu", "a")), renamed,
               Insert(16384, ("2", "eu", "b", "x")), Commit(0x900, 0x910, 0))
    assert [g[2] for g in got] == [{"id": "1", "region": "eu", "doc": "a"},
                                   {"id": "2", "region": "eu", "doc": "b", "extra": "x"}]


def test_the_last_commits_end_is_known_for_the_slot_to_be_confirmed_there():
    reader = TableChanges("public", "orders", ("id",))
    for data in stream(ORDERS, Begin(0x900, 0, 1), Insert(16384, ("1", "eu", "a")), Commit(0x900, 0x918, 0)):
        reader.feed(data)
    assert reader.last_end == 0x918


@pytest.mark.parametrize("data, says", [
    (b"", "empty"),
    (b"Z", "unknown message kind 'Z'"),
    (b"I" + struct.pack(">I", 1) + b"X", "'X' at byte 5 where 'N' belongs"),
    (b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 1) + b"b", "column kind 'b'"),
    (b"B" + b"\0" * 4, "ends at byte 5"),
])
def test_a_message_that_is_not_pgoutput_1_says_where(data, says):
    with pytest.raises(pgoutput.DecodeError, match=says):
        pgoutput.decode(data)


def test_a_change_of_a_relation_never_described_is_an_error():
    reader = TableChanges("public", "orders", ("id",))
    reader.feed(pgoutput.encode(Begin(1, 0, 1)))
    with pytest.raises(pgoutput.DecodeError, match="relation 16384 before its Relation message"):
        reader.feed(pgoutput.encode(Insert(16384, ("1", "eu", "a"))))


def col(base: str, category: str = "N", formatted: str | None = None) -> PgColumn:
    return PgColumn("c", formatted or base, category, base)


def test_text_values_are_typed_as_the_catalog_types_them():
    assert pgoutput.typed(col("bool", "B"), "t") is True and pgoutput.typed(col("bool", "B"), "f") is False
    assert pgoutput.typed(col("int8"), "-9223372036854775808") == -2**63
    assert pgoutput.typed(col("float8"), "1.5") == 1.5 and pgoutput.typed(col("float4"), "-Infinity") == float("-inf")
    assert pgoutput.typed(col("bytea", "U"), "\\x00ff") == b"\x00\xff"
    assert pgoutput.typed(col("numeric", formatted="numeric(12,2)"), "NaN") == "NaN"  # its text: the reader types it
    assert pgoutput.typed(col("timestamptz", "D"), "2024-01-01 00:00:00+00") == "2024-01-01 00:00:00+00"
    assert pgoutput.typed(col("jsonb", "U"), '{"a": 1}') == '{"a": 1}'
    assert pgoutput.typed(col("text", "S"), None) is None


@pytest.mark.parametrize("text, element, expected", [
    ("{}", "int4", "[]"),
    ("{1,2,NULL}", "int4", "[1, 2, null]"),
    ("{{1,2},{3,4}}", "int8", "[[1, 2], [3, 4]]"),
    ("[0:1]={7,8}", "int4", "[7, 8]"),
    ('{"a b","c\\"d",NULL,"NULL",""}', "text", '["a b", "c\\"d", null, "NULL", ""]'),
    ("{t,f}", "bool", "[true, false]"),
    ("{1.50,NaN}", "numeric", '[1.50, "NaN"]'),
    ("{1.5,NaN,1e+20,-Infinity}", "float8", '[1.5, "NaN", 100000000000000000000, "-Infinity"]'),
    ('{"{\\"a\\": 1}"}', "jsonb", '[{"a": 1}]'),
    ('{ü,"x,y"}', "varchar", '["ü", "x,y"]'),
])
def test_arrays_become_the_json_text_to_jsonb_gives(text, element, expected):
    assert pgoutput.array_json(text, element) == expected


def test_only_the_changes_committed_within_the_window_are_taken():
    """An extraction takes the transactions whose commit starts at or after where the slot was
    confirmed and before the position it reads up to: one read past that position (decoding stops
    at the first record reaching it) is left for the next extraction, which the slot gives again."""
    messages = stream(ORDERS, *(m for lsn in (0x100, 0x200, 0x300) for m in (
        Begin(lsn, 0, 1), Insert(16384, (str(lsn), "eu", None)), Commit(lsn, lsn + 0x30, 0))))
    taken = pgoutput.changes(iter(messages), "public", "orders", ("id",), after=0x200, before=0x300)
    assert [c.values["id"] for c in taken] == [str(0x200)]
    everything = pgoutput.changes(iter(messages), "public", "orders", ("id",))
    assert [c.values["id"] for c in everything] == [str(0x100), str(0x200), str(0x300)]


@pytest.mark.parametrize("column, text", [
    (col("int4"), "abc"), (col("bool", "B"), "yes"), (col("float8"), "1,5"), (col("bytea", "U"), "\\xzz"),
    (col("_int4", "A"), "{1,2"), (col("_int4", "A"), "1,2}"),
    # integers past the column's range: captured before the column was narrowed (bigint to integer)
    (col("int4"), str(2 ** 31)), (col("int2"), str(-2 ** 15 - 1)), (col("int8"), str(2 ** 63)),
])
def test_a_value_whose_text_does_not_fit_the_catalogs_type_is_an_error_naming_the_column_not_the_value(column, text):
    with pytest.raises(pgoutput.DecodeError, match="column 'c'") as e:
        pgoutput.typed(column, text)
    assert text not in str(e.value)
