"""Reconciliation against an export: it finds every kind of difference, and its samples say where
a row is, never what it holds (keys are row data: e-mail addresses, customer ids)."""
from __future__ import annotations

from cdc_assets.core import ordering
from cdc_assets.core.reconcile import compare, discrepancies

SECRET = "alice@example.com"


def target_row(key, v, batch, line):
    return {"id": key, "v": v, "_cdc_order": ordering.CHANGE_TIER + "x|" + ordering.arrival(batch, 0, line)}


def test_samples_name_lines_and_origins_not_values():
    target = [target_row(SECRET, "same", 2, 7), target_row("extra-" + SECRET, "x", 3, 9),
              target_row("d-" + SECRET, "new", 1, 4)]
    export = [{"id": SECRET, "v": "same"}, {"id": "missing-" + SECRET, "v": "y"}, {"id": "d-" + SECRET, "v": "old"}]
    report = compare(target, export, ["id"], source_lines=[2, 3, 4])
    assert (report.missing_rows, report.extra_rows, report.differing_rows) == (1, 1, 1)
    assert discrepancies(report) == 3
    assert report.sample_missing_rows == ("export line 3",)
    assert report.sample_extra_rows == ("batch 3 file 1 line 9",)
    assert report.sample_differing_rows == ("export line 4: v",)
    assert SECRET not in repr(report)


def test_a_text_key_of_the_export_matches_the_target_by_its_spelling():
    target = [target_row("1.10", "a", 1, 1), target_row("1.1", "b", 1, 2)]
    export = [{"id": "1.10", "v": "a"}, {"id": "1.1", "v": "b"}]
    assert discrepancies(compare(target, export, ["id"])) == 0


def test_origin_of_a_base_snapshot_row():
    order = ordering.BASE_TIER + ordering.u64(12) + "|" + ordering.arrival(0, 0, 12)
    assert ordering.origin(order) == "base snapshot line 12"


def test_an_export_matches_target_doubles_however_it_spells_them():
    # NaN equals NaN; Java and Spark write NaN and Infinity, Arrow and pandas nan and inf; a
    # writer may print more digits than the shortest that give back the double
    doubles = [float("nan"), float("inf"), float("-inf"), -0.0, 0.1 + 0.2, 5e-324, 1.0]
    target = [target_row(i, d, 1, i + 1) for i, d in enumerate(doubles)]
    for spelled in (["NaN", "Infinity", "-Infinity", "-0.0", "0.30000000000000004", "4.9E-324", "1.0"],
                    ["nan", "inf", "-inf", "-0", "0.3000000000000000444089209850062616169452667236328125",
                     "5e-324", "1"],
                    doubles):
        export = [{"id": i, "v": v} for i, v in enumerate(spelled)]
        assert discrepancies(compare(target, export, ["id"])) == 0, spelled
    export = [{"id": i, "v": v} for i, v in enumerate(["NaN", "NaN", "Infinity", "0.1", "0.3", "0", "1.5"])]
    assert compare(target, export, ["id"]).differing_rows == 6  # only -0.0 and 0 are equal by meaning


def test_live_digests_compare_values_by_their_columns_type_and_find_only_the_differing_keys():
    import datetime as dt
    from decimal import Decimal

    from cdc_assets.core.reconcile import BucketSums, key_differences, key_digest, row_digest, typed

    types = ["long", "decimal(12,2)", "timestamp", "string"]

    def digest(row):
        values = [typed(v, t) for v, t in zip(row, types)]
        key = key_digest(values[:1])
        return key, row_digest(key, values)

    at = dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    # the source's text forms and the target's typed values of the same rows
    source = [digest((i, "12.5", "2024-01-01 08:00:00+00", f"n{i}")) for i in range(500)]
    target = [digest((i, Decimal("12.50"), at, f"n{i}")) for i in range(500)]
    assert source == target
    target[7] = digest((7, Decimal("12.50"), at, "5"))  # a value changed
    target[9] = digest((9, Decimal("12.51"), at, "n9"))
    del target[20]  # a row gone
    target.append(digest((999, Decimal("1"), at, "x")))  # a row that should not be there
    ours, theirs = BucketSums(), BucketSums()
    for k, d in source:
        ours.add(k, d)
    for k, d in target:
        theirs.add(k, d)
    differing = ours.differing(theirs)
    assert 1 <= len(differing) <= 4
    found = key_differences(source, target)
    assert (found.missing, found.extra, found.differing, found.total) == (1, 1, 2, 4)
