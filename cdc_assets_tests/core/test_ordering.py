"""Ordering keys: encoded strings whose string order is the source's order (rules.md#changes, rules.md#bigquery-cdc)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets.core import ordering
from cdc_assets.core.changes import Change, to_record
from cdc_assets.core.ordering import U64_MAX, OrderingError

u64s = st.integers(min_value=0, max_value=U64_MAX)
csn_sections = st.lists(u64s, min_size=1, max_size=4)

FAST = settings(max_examples=150, deadline=None)


def csn(value) -> str:
    return ordering.change_sequence_number(value)


# ---- _CHANGE_SEQUENCE_NUMBER (rules.md#bigquery-cdc) -------------------------

@pytest.mark.parametrize(
    "older, newer",
    [
        ("77", "7B"),  # example 1: 119 < 123
        ("FFF/B", "FFF/ABC"),  # example 2: 4095/11 < 4095/2748
        ("BA/FFFFFFFF", "ABC"),  # example 3: 186/4294967295 < 2748
        ("ABC", "FFF/ABC"),  # example 4: 2748 < 4095/2748
    ],
)
def test_seed_004_worked_examples(older, newer):
    assert csn(newer) > csn(older)
    assert csn(older) < csn(newer)


def test_csn_compares_numbers_not_text():
    # As text '9' > '10' and 'F' > '10'; as numbers they are smaller.
    assert csn("9") < csn("10")
    assert csn("F") < csn("10")
    assert csn("FFFFFFFF") < csn("100000000")


def test_csn_is_case_insensitive():
    assert csn("abc") == csn("ABC")
    assert csn("fff/Abc") == csn("FFF/aBC")
    assert csn("deadBEEF/0/1/2") == csn("DEADbeef/0/1/2")


def test_csn_leading_zeros_do_not_matter():
    assert csn("00007B") == csn("7B")
    assert csn("0000000000000001/0") == csn("1/0")


def test_csn_sixteen_digit_sections_are_unsigned_64_bit():
    # A signed comparison would put FFFF... (= -1) below 7FFF....
    assert csn("FFFFFFFFFFFFFFFF") > csn("7FFFFFFFFFFFFFFF")
    assert csn("8000000000000000") > csn("7FFFFFFFFFFFFFFF")
    assert csn("1/FFFFFFFFFFFFFFFF") > csn("1/7FFFFFFFFFFFFFFF")


def test_csn_fewer_sections_rank_lower_with_equal_prefix():
    assert csn("FFF") < csn("FFF/0")
    assert csn("FFF/0") < csn("FFF/0/0")
    assert csn("FFF/0/0") < csn("FFF/0/0/0")
    # ... but only with an equal prefix: a greater first section wins.
    assert csn("1000") > csn("FFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF")


def test_csn_full_range_is_accepted():
    low = csn("0/0/0/0")
    high = csn("FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF")
    assert low < high


def test_csn_integer_is_one_section_of_its_value():
    # Datastream's change_sequence_number may be an integer (bigquery-append).
    assert csn(255) == csn("FF")
    assert csn(0) == csn("0")
    assert csn(10) > csn(9)
    assert csn(U64_MAX) == csn("FFFFFFFFFFFFFFFF")


@pytest.mark.parametrize(
    "bad",
    [
        "1FFFFFFFFFFFFFFFF",  # 17 digits
        "0/00000000000000000",  # overlong second section
        "1/2/3/4/5",  # five sections
        "7G",  # not hexadecimal
        "xyz",
        "",  # empty
        "1//2",  # empty section
        "/1",
        "1/",
        "0x7B",  # no prefix in the fixed format
        " 7B",  # no padding either
        "-1",
        "1.5",
    ],
)
def test_csn_malformed_is_an_error(bad):
    with pytest.raises(OrderingError):
        csn(bad)


@pytest.mark.parametrize("bad", [-1, U64_MAX + 1, True, False, 1.5, None, b"7B", ["7B"]])
def test_csn_bad_types_and_ranges_are_errors(bad):
    with pytest.raises(OrderingError):
        csn(bad)


def test_csn_error_is_a_value_error_naming_the_section_never_the_value():
    with pytest.raises(ValueError, match="section 2 is not 1 to 16 hexadecimal digits") as e:
        csn("1/7G")
    assert "7G" not in str(e.value)


@FAST
@given(csn_sections, csn_sections, st.randoms(use_true_random=False))
def test_csn_string_order_is_section_by_section_numeric_order(a, b, rnd):
    def spell(sections):
        out = []
        for n in sections:
            digits = f"{n:x}"
            digits = "0" * rnd.randint(0, 16 - len(digits)) + digits  # any padding
            out.append("".join(c.upper() if rnd.random() < 0.5 else c for c in digits))  # any case
        return "/".join(out)

    ea, eb = csn(spell(a)), csn(spell(b))
    # Python tuple order is exactly the contract: section by section, a proper
    # prefix ranks lower.
    assert (ea < eb) == (tuple(a) < tuple(b))
    assert (ea == eb) == (tuple(a) == tuple(b))


@FAST
@given(csn_sections, csn_sections, st.text(max_size=3), st.text(max_size=3))
def test_csn_encoding_is_prefix_free(a, b, tail_a, tail_b):
    """Whatever follows an encoded CSN (rank, arrival) never changes the order of different CSNs."""
    if a == b:
        return
    sa = "/".join(f"{n:X}" for n in a)
    sb = "/".join(f"{n:X}" for n in b)
    assert (csn(sa) + tail_a < csn(sb) + tail_b) == (tuple(a) < tuple(b))


@FAST
@given(u64s, u64s)
def test_u64_string_order_is_numeric_order(a, b):
    assert (ordering.u64(a) < ordering.u64(b)) == (a < b)
    assert len(ordering.u64(a)) == 16


@FAST
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_i64_string_order_is_signed_numeric_order(a, b):
    assert (ordering.i64(a) < ordering.i64(b)) == (a < b)


@pytest.mark.parametrize("bad", [-1, U64_MAX + 1, True, 1.0, "1"])
def test_u64_rejects_non_u64(bad):
    with pytest.raises(OrderingError):
        ordering.u64(bad)


def test_i64_rejects_out_of_range():
    with pytest.raises(OrderingError):
        ordering.i64(1 << 63)
    with pytest.raises(OrderingError):
        ordering.i64(-(1 << 63) - 1)


def test_hex_number():
    assert ordering.hex_number("0x0073c9") == 0x73C9
    assert ordering.hex_number("0X0073C9") == 0x73C9
    assert ordering.hex_number("B374D848") == 0xB374D848
    assert ordering.hex_number("ffffffffffffffff") == U64_MAX
    for bad in ["", "0x", "g", "1" * 17, "-1"]:
        with pytest.raises(OrderingError):
            ordering.hex_number(bad)


# ---- timestamps --------------------------------------------------------------

def test_parse_timestamp_forms_agree():
    micros = 1573092939000000  # 2019-11-07T02:15:39Z
    assert ordering.parse_timestamp("2019-11-07T02:15:39") == micros  # naive text is UTC
    assert ordering.parse_timestamp("2019-11-07T02:15:39Z") == micros
    assert ordering.parse_timestamp("2019-11-07T02:15:39.000Z") == micros
    assert ordering.parse_timestamp("2019-11-07 02:15:39 UTC") == micros
    assert ordering.parse_timestamp("2019-11-07T04:15:39+02:00") == micros
    assert ordering.parse_timestamp(" 2019-11-07T02:15:39 ") == micros
    assert ordering.parse_timestamp(1573092939000) == micros  # epoch milliseconds
    assert ordering.parse_timestamp(1573092939000.0) == micros
    assert ordering.parse_timestamp(dt.datetime(2019, 11, 7, 2, 15, 39, tzinfo=dt.UTC)) == micros
    assert ordering.parse_timestamp(dt.datetime(2019, 11, 7, 2, 15, 39)) == micros


def test_parse_timestamp_epoch_milliseconds_as_text():
    # rules.md#datastream: in JSON, source_timestamp is a string holding epoch milliseconds.
    assert ordering.parse_timestamp("1573092939000") == 1573092939000000
    assert ordering.parse_timestamp("1573092939001") > ordering.parse_timestamp("1573092939000")


def test_parse_timestamp_keeps_sub_second_precision():
    assert ordering.parse_timestamp("2019-11-07T02:15:39.123456Z") == 1573092939123456
    assert ordering.parse_timestamp(1573092939000.5) == 1573092939000500


def test_parse_timestamp_before_epoch():
    assert ordering.parse_timestamp("1969-12-31T23:59:59Z") == -1_000_000
    assert ordering.timestamp("1969-12-31T23:59:59Z") < ordering.timestamp("1970-01-01T00:00:00Z")


@pytest.mark.parametrize("bad", ["", "   ", "yesterday", "2019-13-01T00:00:00", "2019-11-07T25:00:00", None, True, [], {}])
def test_parse_timestamp_rejects_non_times(bad):
    with pytest.raises(OrderingError):
        ordering.parse_timestamp(bad)


@FAST
@given(
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)),
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)),
)
def test_timestamp_string_order_is_time_order(a, b):
    ea, eb = ordering.timestamp(a.isoformat()), ordering.timestamp(b.isoformat())
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)


# ---- typed values (changeset sequence_by) -----------------------------------

def tv(v) -> str:
    return ordering.typed_value(v)


def test_typed_integers_compare_as_numbers():
    assert tv("10") > tv("9")
    assert tv(10) > tv(9)
    assert tv("100") > tv("99")
    assert tv("-10") < tv("-9")
    assert tv("0") > tv("-1")
    assert tv("1") > tv("0")


def test_typed_numbers_equal_by_meaning():
    assert tv("10") == tv(10) == tv(10.0) == tv("10.0") == tv(" 10 ") == tv(Decimal("10.00"))
    assert tv("1.50") == tv(1.5)
    assert tv("0") == tv("-0") == tv(0.0)
    assert tv("1e3") == tv(1000)
    assert tv("007") == tv(7)  # CSV keeps '007' as text; as a sequence it is the number 7


def test_typed_decimals():
    assert tv("1.5") > tv("1.25")
    assert tv("1") < tv("1.5") < tv("2")
    assert tv("-1.5") < tv("-1")
    assert tv("0.001") < tv("0.01")
    assert tv(Decimal("2.5")) > tv(2)


def test_typed_timestamps_compare_as_time():
    assert tv("2024-01-02T00:00:00") > tv("2024-01-01T23:59:59")
    # As text '2024-01-01T10:00:00+02:00' > '2024-01-01T09:00:00Z'; as time it is earlier.
    assert tv("2024-01-01T10:00:00+02:00") < tv("2024-01-01T09:00:00Z")
    assert tv("2024-01-01 10:00:00") == tv("2024-01-01T10:00:00Z")
    assert tv("2024-01-01T10:00:00.5") > tv("2024-01-01T10:00:00.25")


def test_typed_datetime_objects_compare_as_time():
    # Parquet/Avro timestamp columns arrive as datetime objects.
    a = dt.datetime(2024, 1, 1, 9, 0)
    b = dt.datetime(2024, 1, 1, 10, 0)
    assert tv(b) > tv(a)
    assert tv(a) == tv("2024-01-01T09:00:00")
    assert tv(dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2)))) == tv(a.replace(hour=8))
    assert tv(dt.date(2024, 1, 2)) > tv(dt.date(2024, 1, 1))


def test_typed_kinds_rank_null_numbers_times():
    assert tv(None) < tv(-(10**30)) < tv(10**30) < tv("1900-01-01") < tv("2999-01-01")


@pytest.mark.parametrize("text", ["", " ", "xyzzy", "01/01/2018 09:00", "2018-1-1 9:00:00", "1 Jan 2018", "NaN",
                                  "2018-13-01", "10:00", "12a", "٣"])
def test_inferred_text_that_is_no_number_and_no_time_orders_nothing(text):
    """Text that is neither a number nor an ISO 8601 time never outranks the times around it."""
    with pytest.raises(OrderingError, match="neither a number nor an ISO 8601 time") as e:
        tv(text)
    assert not text.strip() or text not in str(e.value)


@pytest.mark.parametrize("bad", [True, False])
def test_inferred_booleans_order_nothing(bad):
    with pytest.raises(OrderingError):
        tv(bad)


def test_declared_string_orders_by_text():
    def text(v):
        return ordering.typed_value(v, "string")
    assert text("a") < text("b") < text("ba")
    assert text("a") < text("ab")
    assert text("Z") < text("a")
    assert text("é") > text("z")
    assert text("10") < text("9") < text("a")  # text, not numbers
    assert text(None) < text("")


def test_declared_types_convert_before_they_order():
    assert ordering.typed_value("9", "long") < ordering.typed_value("10", "long")
    assert ordering.typed_value("2018-01-02", "date") > ordering.typed_value("2018-01-01T23:00:00", "timestamp")
    with pytest.raises(OrderingError, match="declared type timestamp"):
        ordering.typed_value("01/01/2018 09:00", "timestamp")


_instants = st.datetimes(min_value=dt.datetime(1900, 1, 2), max_value=dt.datetime(2200, 1, 1))
_zones = st.sampled_from([None, dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                          dt.timezone(dt.timedelta(hours=-8))])


def _spellings(t: dt.datetime, zone) -> list[str]:
    """ISO 8601 spellings of one instant (a time without a zone is UTC)."""
    local = t.replace(tzinfo=dt.UTC).astimezone(zone).replace(tzinfo=None) if zone else t
    offset = "" if zone is None else local.replace(tzinfo=zone).isoformat()[-6:]
    out = [local.isoformat() + offset, local.isoformat(sep=" ") + offset]
    if zone is dt.UTC:
        out += [local.isoformat() + "Z", local.isoformat(sep=" ") + " UTC"]
    if t.microsecond == 0:
        out.append(local.strftime("%Y-%m-%dT%H:%M") + offset if t.second == 0 else local.isoformat(timespec="seconds") + offset)
    return out


@FAST
@given(_instants, _zones, _instants, _zones)
def test_inferred_times_in_mixed_iso_spellings_compare_as_time(a, za, b, zb):
    for sa in _spellings(a, za):
        for sb in _spellings(b, zb):
            assert (tv(sa) < tv(sb)) == (a < b), (sa, sb)
            assert (tv(sa) == tv(sb)) == (a == b), (sa, sb)
            assert tv(sa) > tv(10 ** 30)  # every time ranks above every number


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), Decimal("NaN"), Decimal("Infinity"), object(), b"x"])
def test_typed_value_rejects_unorderable(bad):
    with pytest.raises(OrderingError):
        tv(bad)


numbers = st.one_of(
    st.integers(min_value=-(10**18), max_value=10**18),
    st.decimals(min_value=-(10**12), max_value=10**12, allow_nan=False, allow_infinity=False, places=6),
)


@FAST
@given(numbers, numbers)
def test_typed_value_order_is_numeric_order(a, b):
    assert (tv(a) < tv(b)) == (Decimal(a) < Decimal(b))
    assert (tv(a) == tv(b)) == (Decimal(a) == Decimal(b))
    # ... also when the numbers are spelled as text (CSV, JSON strings)
    assert (tv(str(a)) < tv(str(b))) == (Decimal(a) < Decimal(b))


@FAST
@given(st.lists(numbers, min_size=2, max_size=2), st.lists(numbers, min_size=2, max_size=2))
def test_typed_values_concatenate_into_lexicographic_order(a, b):
    """sequence_by with several columns: the concatenation orders column by column."""
    ea = "".join(tv(v) for v in a)
    eb = "".join(tv(v) for v in b)
    da, db = tuple(map(Decimal, a)), tuple(map(Decimal, b))
    assert (ea < eb) == (da < db)
    assert (ea == eb) == (da == db)


@FAST
@given(st.lists(st.one_of(st.none(), st.text(max_size=4)), min_size=2, max_size=2),
       st.lists(st.one_of(st.none(), st.text(max_size=4)), min_size=2, max_size=2))
def test_typed_text_concatenation_never_bleeds_into_next_column(a, b):
    # Columns declared `string`: the expected order is the UTF-8 byte order, column by column.
    def key(vals):
        return tuple((0, b"") if v is None else (1, v.encode()) for v in vals)

    ea = "".join(ordering.typed_value(v, "string") for v in a)
    eb = "".join(ordering.typed_value(v, "string") for v in b)
    assert (ea < eb) == (key(a) < key(b))


# ---- arrival and tiers -------------------------------------------------------

def test_arrival_orders_batch_then_file_then_line():
    assert ordering.arrival(1, 0, 999) < ordering.arrival(2, 0, 1)
    assert ordering.arrival(1, 0, 999) < ordering.arrival(1, 1, 1)
    assert ordering.arrival(1, 1, 9) < ordering.arrival(1, 1, 10)


def _record(order: str, *, tier=ordering.CHANGE_TIER, batch=1, file_index=0, line=1) -> str:
    change = Change(line=line, key=(1,), op="U", row={"id": 1}, order=order, event_id=None, change_type="UPSERT")
    return to_record(change, batch_seq=batch, batch_id=f"b{batch}", file_name="f", file_index=file_index,
                     partition_by=[], tier=tier)["_cdc_order"]


def test_base_snapshot_rows_rank_below_every_change():
    lowest_change = _record("", batch=1)
    highest_base = _record("~" * 40, tier=ordering.BASE_TIER, batch=10**6)
    assert highest_base < lowest_change
    assert ordering.BASE_TIER < ordering.CHANGE_TIER


def test_source_order_beats_arrival_and_arrival_breaks_ties():
    older = csn("7A") + "1"
    newer = csn("7B") + "1"
    assert _record(newer, batch=1) > _record(older, batch=2)  # late arrival of an older change loses
    assert _record(newer, batch=2) > _record(newer, batch=1)  # equal source order: later arrival wins
    assert _record(newer, batch=1, line=10) > _record(newer, batch=1, line=9)


# ---- base rows' ordering keys, built for a whole slice at once -------------------------------

def _base_record_order(line: int) -> str:
    """What the row-by-row reader stores for an export's line (formats.snapshot_changes, then
    to_record in the base's tier, batch 0, file 0)."""
    change = Change(line=line, key=(1,), op="U", row={"id": 1}, order=ordering.u64(line), event_id=None,
                    change_type="SNAPSHOT")
    return to_record(change, batch_seq=0, batch_id="base", file_name="f", file_index=0, partition_by=[],
                     tier=ordering.BASE_TIER)["_cdc_order"]


LINE_EDGES = [1, 2, 9, 10, 15, 16, 17, 255, 256, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1,
              0x0123456789ABCDEF, 0xFEDCBA9876543210, 2**63 - 1, 2**63, U64_MAX]


@FAST
@given(st.lists(st.one_of(st.sampled_from(LINE_EDGES), st.integers(min_value=1, max_value=U64_MAX)),
                min_size=0, max_size=40))
def test_base_orders_of_a_slice_are_the_row_by_row_readers_byte_for_byte(lines):
    import numpy as np

    from cdc_assets.core.typed_export import base_orders

    got = base_orders(np.array(lines, dtype=np.uint64))
    assert got.type == pa.string()
    assert got.to_pylist() == [_base_record_order(n) for n in lines]


def test_base_orders_cover_every_edge_line_byte_for_byte():
    import numpy as np

    from cdc_assets.core.typed_export import base_orders

    assert base_orders(np.array(LINE_EDGES, dtype=np.uint64)).to_pylist() == [_base_record_order(n) for n in LINE_EDGES]


def _batch_record_order(seq: int, file_index: int, line: int) -> str:
    """What the row-by-row reader stores for line `line` of file `file_index` of a `format:
    snapshot` batch (ranked by its batch: ingest._parse_partition, then to_record)."""
    change = Change(line=line, key=(1,), op="U", row={"id": 1}, order=ordering.u64(seq), event_id=None,
                    change_type="SNAPSHOT")
    return to_record(change, batch_seq=seq, batch_id="b", file_name="f", file_index=file_index,
                     partition_by=[])["_cdc_order"]


@FAST
@given(st.one_of(st.sampled_from(LINE_EDGES), st.integers(min_value=1, max_value=U64_MAX)),
       st.one_of(st.sampled_from([0, 1, 15, 16, 2**32 - 1]), st.integers(min_value=0, max_value=2**32 - 1)),
       st.lists(st.one_of(st.sampled_from(LINE_EDGES), st.integers(min_value=1, max_value=U64_MAX)), max_size=40))
def test_batch_orders_of_a_snapshot_file_are_the_row_by_row_readers_byte_for_byte(seq, file_index, lines):
    import numpy as np

    from cdc_assets.core.typed_export import batch_orders

    got = batch_orders(seq, file_index, np.array(lines, dtype=np.uint64))
    assert got.type == pa.string()
    assert got.to_pylist() == [_batch_record_order(seq, file_index, n) for n in lines]
