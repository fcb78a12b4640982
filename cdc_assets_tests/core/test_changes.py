"""How a batch's changes are stored (`stored_form`): typed columns where every value has a strict
column type and fits the column's stored type, the row image otherwise; a stored value, cast to
whatever type its column later widens to, equals the original value converted to that type."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets.core.changes import stored_form
from cdc_assets.core.target import arrow_type
from cdc_assets.core.values import convert, widen

UTC = dt.UTC
LEDGER = {"id": "!long", "amount": "!decimal(12,2)", "n": "!int", "at": "!timestamp", "note": "string"}


def test_typed_values_and_row_images_side_by_side():
    images = [
        {"id": 1, "amount": Decimal("1.5"), "n": 5, "at": dt.datetime(2024, 1, 1, 9, tzinfo=dt.timezone(dt.timedelta(hours=2)))},
        {"id": 2, "amount": Decimal("1.555")},  # more digits than the column's scale
        {"id": 3, "n": 2**40},  # too wide for the stored int
        {"id": 4, "note": "x"},  # an inferred column: its value might later be read as text
        {"id": 5, "amount": None},
        {"id": 6, "amount": Decimal("2")},
    ]
    columns, imaged = stored_form(images, [False, False, False, False, False, True], LEDGER, {})
    assert imaged == [False, True, True, True, False, True]  # the last change came from a CSV file
    assert columns["id"].to_pylist() == [1, None, None, None, 5, None]
    assert columns["amount"].to_pylist() == [Decimal("1.50"), None, None, None, None, None]
    assert columns["at"].to_pylist()[0] == dt.datetime(2024, 1, 1, 7, tzinfo=UTC)  # the same instant, in UTC
    assert "note" not in columns


def test_a_stored_column_keeps_its_type_and_a_value_too_wide_for_it_keeps_its_image():
    ledger = {"id": "!long", "n": "!long", "amount": "!decimal(14,3)"}
    columns, imaged = stored_form([{"id": 1, "n": 7, "amount": Decimal("0.125")}, {"id": 2, "n": 2**40}],
                                  [False, False], ledger, {"n": "int", "amount": "decimal(12,2)", "old": "date"})
    assert imaged == [True, True]  # 0.125 needs a third decimal place, 2**40 a long
    assert columns["n"].type == arrow_type("int") and columns["amount"].type == arrow_type("decimal(12,2)")
    assert columns["old"].null_count == 2  # a column the table has keeps its place, null here


def test_only_columns_a_typed_change_has_a_value_in_are_added():
    columns, imaged = stored_form([{"id": 1, "gone": None}], [False], {"id": "!long", "gone": "!string"}, {})
    assert imaged == [False] and set(columns) == {"id"}


DECIMALS = st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), DECIMALS | st.none()), min_size=1, max_size=30),
       st.sampled_from(["decimal(12,2)", "decimal(14,3)", "decimal(18,2)"]))
def test_a_stored_value_widens_to_what_converting_the_original_gives(rows, wider):
    images = [{"n": n, "amount": a} for n, a in rows]
    columns, imaged = stored_form(images, [False] * len(images), {"n": "!int", "amount": "!decimal(12,2)"}, {})
    assert not any(imaged)
    assert widen("decimal(12,2)", wider) == wider
    amounts = columns.get("amount")  # none when no change has an amount
    cast = pc.cast(amounts, arrow_type(wider)).to_pylist() if amounts is not None else [None] * len(rows)
    assert cast == [convert(a, wider) for _, a in rows]
    assert pc.cast(columns["n"], arrow_type("long")).to_pylist() == [convert(n, "long") for n, _ in rows]


def test_a_partition_key_reads_back_whatever_its_column_names_hold():
    from cdc_assets.core import target

    columns = ["a/b", "1p.ré-gion'`#$\"x", "plain"]
    text = target.partition_key(columns, ["e/u", "x=y", None])
    assert target.partition_values(text) == ["e/u", "x=y", None]
