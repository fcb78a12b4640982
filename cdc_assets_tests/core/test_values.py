"""Source values: CSV inference, canonical key text, the column type lattice."""
from __future__ import annotations

import datetime as dt
import json
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets.core import values
from cdc_assets.core.values import BOOLEAN, DOUBLE, LONG, NULL, STRING

FAST = settings(max_examples=150, deadline=None)


# ---- infer_text --------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ("", None),
        ("12", 12),
        ("-12", -12),
        ("+12", 12),
        ("0", 0),
        ("1.5", values.NumberText("1.5")),  # exact: a decimal column takes it digit for digit
        ("-0.25", values.NumberText("-0.25")),
        ("0.5", values.NumberText("0.5")),
        ("9223372036854775807", 9223372036854775807),
        ("-9223372036854775808", -9223372036854775808),
    ],
)
def test_infer_text_numbers_and_null(text, expected):
    got = values.infer_text(text)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize(
    "text",
    [
        "007",  # leading zeros: a code, keep its spelling
        "00",
        "01.5",
        "abc",
        " 12",  # padding is part of the value
        "12 ",
        "1e5",
        ".5",
        "5.",
        "1,000",
        "NaN",
        "inf",
        "true",
        "null",
        "2024-01-01",
        "9223372036854775808",  # past the signed 64-bit range: stays text, not a wrong number
        "-9223372036854775809",
        "0x1F",
    ],
)
def test_infer_text_keeps_everything_else_as_text(text):
    assert values.infer_text(text) == text


# ---- canonical key text --------------------------------------------------------

def test_canonical_text_makes_equal_numbers_equal():
    assert values.canonical_text(5) == values.canonical_text(5.0) == values.canonical_text(Decimal("5.00")) == "5"
    assert values.canonical_text(values.NumberText("5.0")) == values.canonical_text(5)
    assert values.canonical_text(-3) == values.canonical_text(-3.0)
    assert values.canonical_text(1.5) == values.canonical_text(values.NumberText("1.50"))
    assert values.canonical_text(0) == values.canonical_text(-0.0)
    # Equal by meaning, as reconciliation compares an export's text with a typed target value:
    assert values.canonical_text("5.0") == values.canonical_text(5) == "5"


# Version strings, zip codes, phone numbers and SKUs: each text is its own key, whatever
# number it looks like.
NUMBER_LIKE_TEXTS = ["1.1", "1.10", "1.0", "1", "+5", "5", "-0", "0", "0.0", "1e3", "1000", ".5", "0.5",
                     "00", "5 ", " 5", "Ⅴ", "٥", "", "1_000"]


def test_a_text_key_is_the_text_itself():
    for text in NUMBER_LIKE_TEXTS:
        assert values.key_part(text) == text
    assert len({values.key_text([t]) for t in NUMBER_LIKE_TEXTS}) == len(NUMBER_LIKE_TEXTS)


def test_canonical_text_keeps_distinct_values_distinct():
    assert values.canonical_text("007") != values.canonical_text(7)
    assert values.canonical_text(" 5") != values.canonical_text(5)
    assert values.canonical_text("abc") == "abc"
    assert values.canonical_text(None) is None
    assert values.canonical_text("") == ""
    assert values.canonical_text(None) != values.canonical_text("")
    assert values.canonical_text(True) == "true"
    assert values.canonical_text(1.5) != values.canonical_text(1)


def test_key_text_is_the_same_for_a_number_and_its_plain_text():
    # A text column holding the JSON number 5 beside the text "5" holds "5" twice: one key.
    assert values.key_text([5, "EU"]) == values.key_text(["5", "EU"]) == values.key_text([5.0, "EU"])
    assert values.key_text(["5.0", "EU"]) != values.key_text(["5", "EU"])
    assert values.key_text([5, "EU"]) != values.key_text([5, "US"])
    assert values.key_text([1, 23]) != values.key_text([12, 3])  # no ambiguity when concatenating
    assert values.key_text(["a,b"]) != values.key_text(["a", "b"])
    assert values.key_text(['a","b']) != values.key_text(["a", "b"])
    assert json.loads(values.key_text([5, None])) == ["5", None]


@FAST
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_key_text_int_equals_its_text(n):
    assert values.key_text([n]) == values.key_text([str(n)])
    if abs(n) < 2**53:
        assert values.key_text([n]) == values.key_text([float(n)])


@FAST
@given(st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5)), min_size=1, max_size=3),
       st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5)), min_size=1, max_size=3))
def test_key_text_distinguishes_different_tuples(a, b):
    if [values.key_part(v) for v in a] != [values.key_part(v) for v in b]:
        assert values.key_text(a) != values.key_text(b)


@FAST
@given(st.text(), st.text())
def test_key_text_of_distinct_texts_is_distinct(a, b):
    if a != b:
        assert values.key_text([a]) != values.key_text([b])


# ---- source_value (row images must be JSON) -----------------------------------

def test_source_value_nested_structures_become_json_text():
    assert values.source_value({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert values.source_value([1, "x"]) == '[1, "x"]'
    assert values.source_value("plain") == "plain"
    assert values.source_value(3) == 3
    assert values.source_value(None) is None


# ---- IEEE doubles at their edges: NaN, the infinities, negative zero, subnormals -------

def bits(x: float) -> bytes:
    return struct.pack(">d", x)


EDGE_FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 5e-324, -2.2250738585072014e-308,
               1.7976931348623157e308, 0.1 + 0.2]


@pytest.mark.parametrize("x", EDGE_FLOATS, ids=repr)
def test_a_double_keeps_its_ieee_value_in_a_row_image_and_its_column(x):
    # Parquet and Avro readers hand these out as floats; the row image, its JSON and the double
    # column give back the same bits (NaN is not text, -0.0 is not 0.0)
    v = values.source_value(x)
    assert isinstance(v, float) and bits(v) == bits(x)
    assert values.value_type(v) == DOUBLE
    back = values.decode_row(values.encode_row({"c": v}))["c"]
    assert isinstance(back, float) and bits(back) == bits(x)
    assert bits(values.convert(back, DOUBLE)) == bits(x)


@pytest.mark.parametrize("text, expected", [
    ("NaN", "nan"), ("nan", "nan"), ("-NaN", "nan"), ("Infinity", "inf"), ("+Infinity", "inf"), ("inf", "inf"),
    ("-Infinity", "-inf"), ("-inf", "-inf"), (" Infinity", "inf"), ("-0", "-0.0"), ("-0.0", "-0.0"),
    ("4.9e-324", "5e-324"), ("0.30000000000000004", "0.30000000000000004"),
])
def test_a_double_column_takes_the_text_spellings_of_its_values(text, expected):
    # Jackson (Kafka Connect, Debezium), BigQuery's JSON and Spark spell NaN and the infinities
    # as text; Python and Arrow write nan and inf: a double column takes them all
    got = values.convert(text, DOUBLE)
    assert isinstance(got, float) and bits(got) == bits(float(expected))
    assert values.fits(values.NumberText("-0.0"), DOUBLE) and bits(values.convert(values.NumberText("-0.0"), DOUBLE)) \
        == bits(-0.0)


@pytest.mark.parametrize("value", ["1e400", "-1e400", values.NumberText("1e400"), values.NumberText("-2e308"),
                                   "1e-400", values.NumberText("-1e-400"), "NaNa", "Infinityy", "in f"])
def test_a_number_outside_a_doubles_range_does_not_fit_a_double_column(value):
    # too large (or too small) for a double: the record goes to quarantine, never silently infinity or zero
    with pytest.raises(values.Misfit, match="does not fit double"):
        values.convert(value, DOUBLE)


@pytest.mark.parametrize("x", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_a_non_finite_double_fits_no_other_number_column(x):
    for type_ in ("long", "int", "decimal(10,2)", "decimal(38,0)", "boolean", "date"):
        with pytest.raises(values.Misfit, match="a double value does not fit"):
            values.convert(x, type_)


def test_non_finite_doubles_as_text_are_spelled_as_spark_and_json_writers_spell_them():
    nan, inf = float("nan"), float("inf")
    assert [values.convert(x, STRING) for x in (nan, inf, -inf)] == ["NaN", "Infinity", "-Infinity"]
    assert [values.canonical_text(x) for x in (nan, inf, -inf)] == ["NaN", "Infinity", "-Infinity"]
    # nested values stay valid JSON: a non-finite number inside one is its text
    nested = values.source_value({"a": [1.5, nan, inf, -inf, -0.0]})
    assert json.loads(nested, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) == \
        {"a": [1.5, "NaN", "Infinity", "-Infinity", -0.0]}


def test_a_nan_key_is_one_key_whatever_its_bits_and_zero_is_one_key_whatever_its_sign():
    # As PostgreSQL's float8 keys and Spark's grouping: every NaN equals every NaN, -0.0 equals 0.0
    quiet, negative = float("nan"), struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]
    payload = struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0]
    assert values.key_text([quiet]) == values.key_text([negative]) == values.key_text([payload])
    assert values.key_text([-0.0]) == values.key_text([0.0]) == values.key_text([0])
    keys = [values.key_text([x]) for x in (quiet, float("inf"), float("-inf"), 0.0, 5e-324, 1.7976931348623157e308)]
    assert len(set(keys)) == len(keys)
    assert values.key_text([values.convert("NaN", DOUBLE)]) == values.key_text([quiet])
    assert values.key_text([values.convert("-Infinity", DOUBLE)]) == values.key_text([float("-inf")])


def test_a_value_is_the_same_as_itself_nan_included_and_signed_zeros_differ():
    nan = float("nan")
    assert values.same(nan, float("nan")) and values.same(float("inf"), float("inf")) and values.same(5, 5.0)
    assert not values.same(0.0, -0.0) and not values.same(nan, 1.0) and not values.same(nan, None)
    assert values.same(None, None) and values.same("NaN", "NaN") and not values.same("NaN", nan)


def test_source_value_keeps_reader_objects_typed():
    # Parquet and Avro readers hand out these; their columns keep the type (rules.md#types).
    when = dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC)
    assert values.source_value(when) is when
    assert values.source_value(Decimal("12.50")) == Decimal("12.50")
    assert values.source_value(b"\x00\x01") == b"\x00\x01"
    assert values.source_value(dt.time(10, 30)) == "10:30:00"  # no time-of-day type: text
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert values.source_value(u) == str(u)
    nested = values.source_value({"when": dt.date(2024, 1, 1), "amount": Decimal("1.50")})
    assert json.loads(nested) == {"when": "2024-01-01", "amount": 1.5}


@pytest.mark.parametrize("value", [
    Decimal("12.50"), values.NumberText("0.1"), dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=dt.UTC),
    dt.datetime(2024, 1, 1, 10, 0), dt.date(2024, 2, 29), b"\x00\xff", "text", 5, 1.5, True, None])
def test_row_images_keep_value_and_type(value):
    back = values.decode_row(values.encode_row({"c": value}))["c"]
    assert back == value and type(back) is type(value)


def test_decimal_columns_take_number_text_exactly():
    assert values.convert(values.NumberText("0.10"), "decimal(12,2)") == Decimal("0.10")
    assert values.convert("123.45", "decimal(5,2)") == Decimal("123.45")
    assert values.convert(7, "decimal(5,2)") == Decimal("7.00")
    for value, type_ in [(values.NumberText("0.105"), "decimal(12,2)"), (1234, "decimal(5,2)"),
                         (0.1, "decimal(12,2)"), ("n/a", "decimal(12,2)"), (True, "decimal(12,2)")]:
        assert not values.fits(value, type_), (value, type_)


def test_times_from_text():
    assert values.convert("2024-01-01T10:00:00+02:00", "timestamp") == \
        dt.datetime(2024, 1, 1, 8, 0, tzinfo=dt.UTC)
    assert values.convert("2024-01-01 10:00:00", "timestamp") == dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)
    assert values.convert("2024-01-01 10:00:00.1234567Z", "timestamp").microsecond == 123456
    assert values.convert("2024-01-01T10:00:00", "timestamp_ntz") == dt.datetime(2024, 1, 1, 10)
    assert not values.fits("2024-01-01T10:00:00Z", "timestamp_ntz")  # a zone is not a wall clock
    assert values.convert("2024-01-01", "date") == dt.date(2024, 1, 1)
    assert not values.fits("yesterday", "date") and not values.fits(5, "timestamp")


def test_parse_type_names():
    assert values.parse_type("Decimal(12, 2)") == "decimal(12,2)"
    assert values.parse_type("timestamp_ntz") == "timestamp_ntz"
    for bad in ("decimal(39,2)", "decimal(2,3)", "money", "varchar"):
        with pytest.raises(ValueError):
            values.parse_type(bad)


def test_widening_is_safe_only():
    assert values.widen("int", "long") == "long"
    assert values.widen("decimal(12,2)", "decimal(10,4)") == "decimal(14,4)"
    assert values.widen("decimal(12,2)", "long") == "decimal(21,2)"
    assert values.widen("decimal(12,2)", "double") is None  # a decimal never silently becomes a double
    assert values.widen("long", "int") == "long"
    assert values.widen("timestamp", "timestamp_ntz") is None


def test_a_source_type_change_widens_where_every_value_keeps_its_value():
    assert values.widen("long", "decimal(12,2)") == "decimal(21,2)"  # every long and every decimal(12,2)
    assert values.widen("int", "decimal(4,1)") == "decimal(11,1)"
    assert values.widen("long", "decimal(38,20)") is None  # 19 + 20 digits: no decimal holds both
    assert values.widen("int", "double") == values.widen("double", "int") == "double"
    assert values.widen("long", "double") is None and values.widen("double", "long") is None  # 53 bits
    assert values.widen("date", "timestamp") == values.widen("timestamp", "date") == "timestamp"
    assert values.widen("date", "timestamp_ntz") == "timestamp_ntz"
    assert values.widen("string", "long") is None and values.widen("date", "string") is None
    assert values.convert(dt.date(2024, 2, 29), "timestamp") == dt.datetime(2024, 2, 29, tzinfo=dt.UTC)


def test_key_from_decimal_equals_key_from_number():
    assert values.key_text([values.source_value(Decimal("5"))]) == values.key_text([5])
    assert values.key_text([values.source_value(Decimal("5.00"))]) == values.key_text(["5"])


# ---- types ---------------------------------------------------------------------

def test_value_type():
    assert values.value_type(None) == NULL
    assert values.value_type(True) == BOOLEAN  # not long, although bool is an int in Python
    assert values.value_type(3) == LONG
    assert values.value_type(3.5) == DOUBLE
    assert values.value_type("3") == STRING


def test_join_types_examples():
    assert values.join_types(LONG, DOUBLE) == DOUBLE  # an integer column receiving decimals widens
    assert values.join_types(DOUBLE, LONG) == DOUBLE
    assert values.join_types(NULL, LONG) == LONG
    assert values.join_types(LONG, NULL) == LONG
    assert values.join_types(LONG, STRING) == STRING  # anything mixed with text is text
    assert values.join_types(BOOLEAN, LONG) == STRING
    assert values.join_types(BOOLEAN, DOUBLE) == STRING
    assert values.join_types(BOOLEAN, BOOLEAN) == BOOLEAN
    assert values.join_types(NULL, NULL) == NULL


TYPES = st.sampled_from([NULL, BOOLEAN, LONG, DOUBLE, STRING])


@FAST
@given(TYPES, TYPES, TYPES)
def test_join_types_is_a_join_semilattice(a, b, c):
    j = values.join_types
    assert j(a, a) == a  # idempotent
    assert j(a, b) == j(b, a)  # commutative
    assert j(j(a, b), c) == j(a, j(b, c))  # associative
    assert j(a, NULL) == a  # null is the bottom
    assert j(a, STRING) == STRING  # string is the top
    assert j(a, j(a, b)) == j(a, b)  # the join is an upper bound of both


@FAST
@given(st.lists(st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**53), max_value=2**53),
                          st.floats(), st.text(max_size=3)), max_size=6))
def test_a_column_can_hold_every_value_it_has_seen(column):
    type_ = NULL
    for v in column:
        type_ = values.join_types(type_, values.value_type(v))
    for v in column:
        c = values.convert(v, type_)
        assert values.value_type(c) in (type_, NULL)
        if v is None:
            assert c is None


def test_convert_widens_only():
    assert values.convert(3, DOUBLE) == 3.0 and isinstance(values.convert(3, DOUBLE), float)
    assert values.convert(3, STRING) == "3"
    assert values.convert(1.5, STRING) == "1.5"
    assert values.convert(True, STRING) == "true"
    assert values.convert(None, LONG) is None


@pytest.mark.parametrize("text", ["NaN", "-Infinity", "sNaN"])
def test_a_non_finite_decimal_is_text_and_fits_no_number_column(text):
    # a non-finite decimal becomes text in a row image, so its type on its own is text, and a
    # number column refuses it with a Misfit naming types (never a crash of the type check)
    d = Decimal(text)
    assert values.value_type(d) == STRING == values.value_type(values.source_value(d))
    for type_ in ("long", "int", "decimal(10,2)", "boolean", "date"):
        with pytest.raises(values.Misfit, match="does not fit"):
            values.convert(d, type_)


@pytest.mark.parametrize("text", ["1_000", "١٢", "٣.5", "1.5٣", "0x10", "1e", "", " ", "+", "."])
@pytest.mark.parametrize("type_", [DOUBLE, "decimal(10,2)", LONG])
def test_number_columns_read_only_ascii_number_text(text, type_):
    # Python's Decimal reads '1_000' and any Unicode digit; JSON, CSV writers, Spark and Java do
    # not, and neither does a number column here (a long column never did)
    with pytest.raises(values.Misfit, match="a text value does not fit"):
        values.convert(text, type_)


@pytest.mark.parametrize("text, type_, expected", [
    ("1.5E3", DOUBLE, 1500.0), ("-.5", DOUBLE, -0.5), ("5.", DOUBLE, 5.0), ("+1e-2", DOUBLE, 0.01),
    (" 2.50 ", "decimal(10,2)", Decimal("2.50")), ("1E+2", "decimal(10,0)", Decimal("100")),
    ("9223372036854775807", LONG, 2**63 - 1), ("-9223372036854775808", LONG, -2**63),
    ("0." + "9" * 38, "decimal(38,38)", Decimal("0." + "9" * 38)), ("-" + "9" * 38, "decimal(38,0)", Decimal("-" + "9" * 38)),
])
def test_number_columns_read_number_text_at_their_edges(text, type_, expected):
    got = values.convert(text, type_)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("text, type_", [("9223372036854775808", LONG), ("-9223372036854775809", LONG),
                                         ("2147483648", "int"), ("1", "decimal(38,38)"), ("1" * 39, "decimal(38,0)"),
                                         ("0.001", "decimal(10,2)"), ("1e400", "decimal(38,0)"),
                                         ("1e999999", "decimal(10,2)"), (values.NumberText("1E+99999"), "decimal(38,2)"),
                                         (values.NumberText("-1e39"), "decimal(38,0)")])
def test_a_number_past_its_columns_range_or_scale_does_not_fit(text, type_):
    with pytest.raises(values.Misfit, match="does not fit"):
        values.convert(text, type_)


def test_decimal_keys_past_28_digits_stay_distinct():
    # a decimal(38,s) key is exact: Python's default 28-digit context must not round its key text
    wide = [Decimal("1234567890123456789012345678.1"), Decimal("1234567890123456789012345678.2"),
            Decimal("0." + "1" * 37 + "1"), Decimal("0." + "1" * 37 + "2"), Decimal("-" + "9" * 38),
            Decimal("-" + "9" * 37 + "8")]
    assert len({values.key_text([d]) for d in wide}) == len(wide)
    assert len({values.canonical_text(d) for d in wide}) == len(wide)
    for d in wide:  # and a key is the same whichever trailing zeros a reader keeps
        assert values.key_text([d]) == values.key_text([Decimal(str(d) + ("0" if "." in str(d) else ".0"))])
        assert values.key_text([d]) == values.key_text([values.NumberText(str(d))])
    # numbers past any context's exponent range are keys too, never zero or an error
    huge, tiny = values.NumberText("1e9999999"), values.NumberText("1e-9999999")
    assert len({values.key_text([huge]), values.key_text([tiny]), values.key_text([0])}) == 3
