"""Rows in strictly ascending key order hold each key once; anything that does not prove it (an
equal neighbour, a row out of order, a null, a NaN, -0.0 beside 0.0, spans that overlap) is
"not proven", never "unique"."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_assets.core.key_order import ascending, pairs_ascending, spans_disjoint


def rows(**columns) -> pa.Table:
    return pa.table(columns)


@pytest.mark.parametrize("values, proven", [
    ([1, 2, 3], True),
    ([1, 2, 2], False),  # a key twice
    ([2, 1, 3], False),  # out of order: a repeat could hide anywhere
    ([1, None, 3], False),
    ([], True),
    ([7], True),
])
def test_one_key_column(values, proven):
    assert ascending(rows(id=pa.array(values, pa.int64())), ["id"]) is proven


@pytest.mark.parametrize("values, proven", [
    ([-1.5, 0.0, 2.0], True),
    ([-0.0, 0.0], False),  # equal as numbers, two texts: not proven
    ([1.0, float("nan"), 3.0], False),
    ([float("nan"), float("nan")], False),
])
def test_floating_point_keys_at_their_edges(values, proven):
    assert ascending(rows(x=pa.array(values, pa.float64())), ["x"]) is proven


def test_keys_of_several_columns_compare_column_by_column():
    k = rows(a=["x", "x", "y", "y"], b=[2, 3, 1, 2])
    assert ascending(k, ["a", "b"])
    assert not ascending(rows(a=["x", "x", "y"], b=[2, 2, 1]), ["a", "b"])  # (x, 2) twice
    assert not ascending(rows(a=["x", "y", "y"], b=[2, 3, 1]), ["a", "b"])  # (y, 3) before (y, 1)
    assert not ascending(k, ["b", "a"])


@pytest.mark.parametrize("column", [
    pa.array(["", "a", "a\x00", "b", "é"]),  # by bytes: a prefix ranks below what extends it
    pa.array([b"", b"\x00", b"\x00\x00", b"\x01"], pa.binary()),
    pa.array([Decimal("-1.00"), Decimal("0.00"), Decimal("0.01")], pa.decimal128(5, 2)),
    pa.array([dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)]),
    pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)],
             pa.timestamp("us", tz="UTC")),
    pa.array([False, True]),
])
def test_each_key_type_in_order_is_proven_and_a_repeat_of_its_last_value_is_not(column):
    assert ascending(rows(k=column), ["k"])
    repeated = pa.concat_arrays([column, column.slice(len(column) - 1, 1)])
    assert not ascending(rows(k=repeated), ["k"])


def test_a_key_type_without_an_order_is_not_proven():
    nested = pa.array([[1], [2]], pa.list_(pa.int64()))
    assert ascending(rows(k=nested), ["k"]) is False


def test_spans_of_files_must_not_overlap_in_whatever_order_the_files_come():
    firsts, lasts = rows(id=[10, 1, 20]), rows(id=[19, 9, 30])
    assert spans_disjoint(firsts, lasts, ["id"])
    assert not spans_disjoint(rows(id=[1, 9]), rows(id=[9, 12]), ["id"])  # 9 in both
    assert not spans_disjoint(rows(id=[1, 5]), rows(id=[8, 6]), ["id"])  # the second inside the first
    assert spans_disjoint(rows(id=[4]), rows(id=[4]), ["id"])


def test_pairs_compare_row_by_row():
    assert pairs_ascending(rows(id=[1, 5]), rows(id=[2, 6]), ["id"])
    assert not pairs_ascending(rows(id=[1, 6]), rows(id=[2, 6]), ["id"])
