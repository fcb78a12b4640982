"""A Parquet change set read column by column (`core.typed_changes`) gives exactly the records
the record-at-a-time reader gives (`formats.parse_file` + `changes.to_record`): the same keys,
ordering keys, content event ids and partitions, and the same row images; a file with a record
that must be rejected is left to that reader, which names it."""
from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets.core.changes import Change, to_record
from cdc_assets.core.formats import parse_file
from cdc_assets.core.typed_changes import read_typed_change_file, read_typed_row_group
from cdc_assets.core.values import decode_row, encode_row, same
from cdc_assets.engine import delta
from cdc_assets.engine.ingest import PARSED_FIELDS
from cdc_assets_tests.support.landing import parquet

OPTIONS = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
SCHEMA = delta.arrow_schema(PARSED_FIELDS)
UTC = dt.UTC
BATCH = {"batch_seq": 7, "batch_id": "batch-0007", "file_index": 3}


def by_record(data: bytes, keys, partition_by, options=OPTIONS, declared=None, row_group=None) -> tuple[pa.Table, list]:
    records, images = [], []
    for item in parse_file("changeset", options, keys, "f.parquet", data, declared, row_group=row_group):
        if not isinstance(item, Change):
            return None, [item]
        rec = to_record(item, batch_seq=7, batch_id="batch-0007", file_name="f.parquet", file_index=3,
                        partition_by=partition_by)
        rec["_cdc_reason"] = rec["_cdc_raw"] = None
        records.append(rec)
        images.append(decode_row(rec["_cdc_row"]))
    return pa.Table.from_pylist(records, schema=SCHEMA), images


def by_column(data: bytes, keys, partition_by, options=OPTIONS, declared=None):
    return read_typed_change_file("changeset", options, keys, "f.parquet", data, declared, partition_by,
                                  schema=SCHEMA, **BATCH)


def assert_same(data: bytes, keys, partition_by, options=OPTIONS, declared=None) -> bool:
    """True when the file was read column by column (and matched); False when it was left to
    the record-at-a-time reader."""
    typed = by_column(data, keys, partition_by, options, declared)
    expected, images = by_record(data, keys, partition_by, options, declared)
    if typed is None:
        return False
    assert expected is not None, f"read column by column, yet the record reader rejects {images}"
    for name in SCHEMA.names:
        if name != "_cdc_row":
            assert typed.records.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert typed.records.column("_cdc_row").null_count == typed.records.num_rows
    got = typed.values.to_pylist()
    assert len(got) == len(images)
    for a, b in zip(got, images):  # NaN is the same as NaN, -0.0 is not 0.0
        assert a.keys() == b.keys() and all(same(a[c], b[c]) for c in a), (a, b)
    assert [encode_row(r) for r in got] == expected.column("_cdc_row").to_pylist()
    # Spark's tasks carry the records alone: with their images, they are the record reader's records
    imaged = read_typed_change_file("changeset", options, keys, "f.parquet", data, declared, partition_by,
                                    schema=SCHEMA, images=True, **BATCH)
    assert imaged is not None and imaged.records.to_pylist() == expected.to_pylist()
    return True


def test_a_typed_change_set_is_read_column_by_column_with_the_record_readers_result():
    table = pa.table({
        "id": pa.array([1, 2, 3, 1], pa.int64()),
        "name": pa.array(['a "quoted" \\ name', "ünï", None, "x\ny"]),
        "amount": pa.array([Decimal("12.50"), Decimal("-0.01"), None, Decimal("1E+3")], pa.decimal128(12, 2)),
        "ratio": pa.array([0.1, 1e16, None, -2.5]),
        "flag": pa.array([True, False, None, True]),
        "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1969, 12, 31), dt.date(2000, 1, 1)]),
        "at": pa.array([dt.datetime(2024, 1, 1, 9, 30, tzinfo=UTC), None, None,
                        dt.datetime(1960, 5, 1, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        "local": pa.array([dt.datetime(2024, 1, 1, 9, 30), None, None, None], pa.timestamp("ms")),
        "blob": pa.array([b"\x00\xff", None, b"", b"abc"]),
        "small": pa.array([1, None, -3, 4], pa.int16()),
        "region": pa.array(["eu", "us", "eu", "eu"]).dictionary_encode(),
        "nothing": pa.nulls(4),
        "seq": pa.array([10, 0, 7, 1000], pa.int64()),
        "op": pa.array(["I", "U", "D", "U"]),
    })
    assert assert_same(parquet(table), ["id"], ["region"], declared={"name": "string", "extra": "long"})
    assert assert_same(parquet(table), ["region", "id"], [])  # a composite key with text in it


def test_a_change_set_with_nan_infinities_and_negative_zero_is_read_column_by_column():
    table = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "seq": pa.array([1, 2, 3, 4], pa.int64()),
                      "v": pa.array([float("nan"), float("inf"), float("-inf"), -0.0]),
                      "w": pa.array([float("nan"), None, -0.0, 1.5], pa.float32()), "op": pa.array(["I"] * 4)})
    assert assert_same(parquet(table), ["id"], [])
    assert assert_same(parquet(table), ["v"], ["w"])  # NaN as a key and a partition value


def test_a_change_set_with_a_record_to_reject_is_left_to_the_record_reader():
    base = {"id": pa.array([1, 2], pa.int64()), "seq": pa.array([1, 2], pa.int64())}
    unknown_op = pa.table({**base, "op": pa.array(["I", "X"])})
    null_key = pa.table({"id": pa.array([1, None], pa.int64()), "seq": base["seq"], "op": pa.array(["I", "U"])})
    nested = pa.table({**base, "v": pa.array([[1], [2]]), "op": pa.array(["I", "U"])})
    for table in (unknown_op, null_key, nested):
        assert by_column(parquet(table), ["id"], []) is None
    assert by_column(parquet(pa.table({**base, "op": pa.array(["I", "U"])})), ["op"], []) is None


def test_each_row_group_of_a_typed_change_set_gives_the_record_readers_records_of_that_row_group():
    """A task reads one row group: its records, images included, are the record reader's for the
    same row group, lines counted from the file's first row; a row group holding a record to
    reject is left to that reader, and the others are still read column by column."""
    table = pa.table({"id": pa.array([1, 2, 3, None, 5, 6, 7], pa.int64()),
                      "name": pa.array(["a", None, "ünï", "d", 'q"uote', "f", "g"]),
                      "amount": pa.array([Decimal("1.50"), None, Decimal("-2.00"), None, Decimal("0.01"),
                                          Decimal("3.00"), None], pa.decimal128(10, 2)),
                      "seq": pa.array([1, 2, 3, 4, 5, 6, 7], pa.int64()),
                      "op": pa.array(["I", "U", "D", "I", "U", "I", "D"])})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=3)
    data = out.getvalue()
    read = []
    for g in range(3):
        typed = read_typed_row_group("changeset", OPTIONS, ["id"], "f.parquet", io.BytesIO(data), g, None, ["name"],
                                     schema=SCHEMA, images=True, **BATCH)
        expected, rejected = by_record(data, ["id"], ["name"], row_group=g)
        if g == 1:  # line 4 has no key
            assert typed is None and expected is None and rejected[0].line == 4
            continue
        assert typed is not None and typed.records.to_pylist() == expected.to_pylist()
        read += typed.records["_cdc_line"].to_pylist()
    assert read == [1, 2, 3, 7]


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6) | \
    st.sampled_from(["007", "12", "-3", "1.50", " 5", "+5", '"', "\\", "\x01", "a\tb", "1e3"])
COLUMNS = {
    "i64": (st.integers(-2**63, 2**63 - 1), pa.int64()),
    "i32": (st.integers(-2**31, 2**31 - 1), pa.int32()),
    "text": (TEXT, pa.string()),
    "money": (st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False), pa.decimal128(12, 2)),
    "tiny": (st.decimals(min_value=0, max_value=1, places=7, allow_nan=False), pa.decimal128(8, 7)),
    "real": (st.floats(), pa.float64()),  # NaN, the infinities and -0.0 too
    "float": (st.floats(width=32), pa.float32()),
    "flag": (st.booleans(), pa.bool_()),
    "day": (st.dates(), pa.date32()),
    "at": (st.datetimes(timezones=st.just(UTC)), pa.timestamp("us", "UTC")),
    "blob": (st.binary(max_size=4), pa.binary()),
}


@st.composite
def change_sets(draw):
    n = draw(st.integers(1, 8))
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=5, unique=True))
    key = draw(st.sampled_from([c for c in names if c not in ("real", "float", "blob")] or ["i64"]))
    if key not in names:
        names.append(key)
    data = {}
    for name in names:
        values, type_ = COLUMNS[name]
        nullable = st.none() | values if name != key else values
        data[name] = pa.array(draw(st.lists(nullable, min_size=n, max_size=n)), type_)
    seq_values = st.integers(0, 2**62) if draw(st.booleans()) else st.none() | st.integers(-2**62, 2**62)
    data["seq"] = pa.array(draw(st.lists(seq_values, min_size=n, max_size=n)), pa.int64())
    data["op"] = pa.array(draw(st.lists(st.sampled_from(["I", "U", "D"]), min_size=n, max_size=n)))
    partition = draw(st.sampled_from([[], [names[0]], ["missing"]]))
    return pa.table(data), [key], partition


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change_sets(), st.booleans())
def test_any_typed_change_set_gives_the_record_readers_records(case, sequenced):
    table, keys, partition_by = case
    options = OPTIONS if sequenced else {**OPTIONS, "sequence_by": []}
    assert assert_same(parquet(table), keys, partition_by, options)
