"""A declared text column of an export (formats.DECLARED_TYPE) becomes the values `convert` gives,
whether Arrow casts the text or it goes value by value."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets.core.target import arrow_type
from cdc_assets.core.typed_export import declared_column
from cdc_assets.core.values import Misfit, convert

TYPES = ["int", "long", "double", "decimal(12,2)", "decimal(38,10)", "decimal(3,0)", "date", "string", "boolean",
         "timestamp_ntz"]

EDGES = ["0", "-0", "007", "+5", " 7", "7 ", "1e3", "1E3", "1.", ".5", "-.5", "1.10", "1.1", "1.234", "-0.50",
         "2147483647", "2147483648", "-2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
         "99999999999999999999", "0.1", "0.30000000000000004", "1e-7", "nan", "inf", "-inf", "", " ",
         "2024-01-05", "2024-02-30", "2024-1-5", "20240105", "0001-01-01", "9999-12-31", "true", "FALSE", "yes",
         "2024-01-05T10:00:00", "2024-01-05 10:00:00.123456", "346231.09", "999999999.99", "9999999999.99",
         "123.", "١٢٣", "12_3", "0x1A", None]


def by_value(texts: list[str | None], type_: str) -> tuple[list, set[int]]:
    out, bad = [], set()
    for i, v in enumerate(texts):
        try:
            out.append(None if v is None else convert(v, type_))
        except Misfit:
            out.append(None)
            bad.add(i)
    return out, bad


def check(texts: list[str | None], type_: str) -> None:
    reasons: dict[int, str] = {}
    got = declared_column(pa.chunked_array([pa.array(texts, pa.string())]), "c", type_, arrow_type, reasons)
    values, bad = by_value(texts, type_)
    want = pa.array(values, arrow_type(type_)).to_pylist()  # as the column stores them (a decimal has no -0)
    assert got.type == arrow_type(type_)
    assert [repr(v) for v in got.to_pylist()] == [repr(v) for v in want]  # -0.0 and 0.0 told apart, nan equal
    assert set(reasons) == bad
    assert all(r == f"column 'c' is {type_} at the source; this row's value does not fit it" for r in reasons.values())


@pytest.mark.parametrize("type_", TYPES)
def test_edge_texts_become_what_convert_gives(type_):
    check(EDGES, type_)
    for e in EDGES:  # one odd value among canonical ones must not change the others
        check(["1", e, "2024-01-05", "12.50"], type_)


NUMBERS = st.one_of(st.integers(-(1 << 70), 1 << 70).map(str),
                    st.floats(allow_nan=False, allow_infinity=False).map(repr),
                    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
                    st.dates().map(str), st.text(alphabet="0123456789-.+eE ", max_size=12))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), NUMBERS), max_size=30), st.sampled_from(TYPES))
def test_any_texts_become_what_convert_gives(texts, type_):
    check(texts, type_)
