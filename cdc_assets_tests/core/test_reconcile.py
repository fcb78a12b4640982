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
    assert (report["missing_rows"], report["extra_rows"], report["differing_rows"]) == (1, 1, 1)
    assert discrepancies(report) == 3
    assert report["sample_missing_rows"] == ["export line 3"]
    assert report["sample_extra_rows"] == ["batch 3 file 1 line 9"]
    assert report["sample_differing_rows"] == ["export line 4: v"]
    assert SECRET not in repr(report)


def test_a_text_key_of_the_export_matches_the_target_by_its_spelling():
    target = [target_row("1.10", "a", 1, 1), target_row("1.1", "b", 1, 2)]
    export = [{"id": "1.10", "v": "a"}, {"id": "1.1", "v": "b"}]
    assert discrepancies(compare(target, export, ["id"])) == 0


def test_origin_of_a_base_snapshot_row():
    order = ordering.BASE_TIER + ordering.u64(12) + "|" + ordering.arrival(0, 0, 12)
    assert ordering.origin(order) == "base snapshot line 12"
