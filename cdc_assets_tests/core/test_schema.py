"""Column types: what widens, and what a typed source cannot send into a column."""
import pytest

from cdc_assets.core.schema import admit, is_text_source, joined


@pytest.mark.parametrize("first, then, widened", [
    (5, 7.5, "double"),          # integer -> decimal widens
    (7.5, 5, "double"),
    ("a", 5, "string"),          # anything fits a text column, as its text
    ("a", True, "string"),
    (5, "13", "string"),         # a number spelled as text
    (2.5, " -1.5", "string"),
    (None, 5, "long"),           # a null sets nothing
    (5, None, "long"),
])
def test_widening(first, then, widened):
    types = {}
    assert admit(types, {"c": first}, text_source=False) is None
    assert admit(types, {"c": then}, text_source=False) is None
    assert types["c"] == widened


@pytest.mark.parametrize("first, then, have, got", [
    (5, "n/a", "integer", "text"),
    (2.5, "n/a", "decimal", "text"),
    (True, 1, "boolean", "integer"),
    (1, False, "integer", "boolean"),
    (False, "yes", "boolean", "text"),
])
def test_a_typed_source_cannot_narrow_a_column_to_text_or_swap_kinds(first, then, have, got):
    types = {}
    admit(types, {"id": 1, "c": first}, text_source=False)
    before = dict(types)
    reason = admit(types, {"id": 2, "c": then, "new": "x"}, text_source=False)
    assert reason == f"column 'c' holds {have} values; this change has {got} there, which cannot widen to it"
    assert types == before  # a misfit row widens nothing, not even its other columns


def test_csv_text_widens_a_number_column_because_csv_types_are_guessed():
    types = {}
    admit(types, {"zip": 12345}, text_source=True)
    assert admit(types, {"zip": "1234A"}, text_source=True) is None
    assert types["zip"] == "~string"  # still a guess


def test_a_column_guessed_from_csv_is_set_by_the_first_typed_value():
    types = {}
    admit(types, {"seq": 13}, text_source=True)  # CSV "13"
    assert admit(types, {"seq": "13"}, text_source=False) is None  # a JSON string: text wins, firmly
    assert types["seq"] == "string"
    types = {}
    admit(types, {"n": 5}, text_source=True)
    assert admit(types, {"n": 7}, text_source=False) is None and types["n"] == "long"
    assert admit(types, {"n": "n/a"}, text_source=False) is not None  # now firm


def test_reason_names_no_value():
    types = {"secret": "long"}
    reason = admit(types, {"secret": "hunter2"}, text_source=False)
    assert "hunter2" not in reason and "'secret'" in reason


def test_text_sources_and_joined_ledgers():
    assert is_text_source("b1/x.csv") and is_text_source("B.CSV.GZ") and not is_text_source("a.jsonl")
    assert joined({"a": "long", "b": "~string"}, {"a": "~double", "b": "~long", "c": "boolean"}) == \
        {"a": "double", "b": "~string", "c": "boolean"}


def test_a_column_equal_but_for_case_to_one_the_table_has_cannot_join_it():
    types = {"id": "long", "v": "string"}
    reason = admit(types, {"id": 1, "V": "x"}, False)
    assert reason.startswith("column 'V' and the table's column 'v' are one column to Spark and Delta"), reason
    assert admit(types, {"id": 1, "V": None}, False) is not None  # a null there would still make a column
    assert types == {"id": "long", "v": "string"}
    assert admit(types, {"id": 2, "v": "y", "w": 1}, False) is None and "w" in types


@pytest.mark.parametrize("first, then, widened", [
    ("long", "decimal(12,2)", "!decimal(21,2)"),
    ("decimal(12,2)", "int", "!decimal(12,2)"),
    ("date", "timestamp", "!timestamp"),
    ("int", "double", "!double"),
])
def test_a_file_type_change_widens_the_column(first, then, widened):
    import datetime as dt
    from decimal import Decimal
    sample = {"long": 5, "int": 5, "decimal(12,2)": Decimal("1.25"), "date": dt.date(2024, 1, 1),
              "timestamp": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "double": 0.5}
    types = {}
    assert admit(types, {"c": sample[first]}, False, {"c": first}) is None
    assert admit(types, {"c": sample[then]}, False, {"c": then}) is None
    assert types["c"] == widened


def test_a_double_column_takes_a_long_only_when_a_double_holds_it():
    types = {}
    admit(types, {"c": 0.5}, False, {"c": "double"})
    assert admit(types, {"c": 4}, False, {"c": "long"}) is None and types["c"] == "!double"
    reason = admit(types, {"c": 2 ** 53 + 1}, False, {"c": "long"})
    assert reason is not None and "'c'" in reason and str(2 ** 53 + 1) not in reason
