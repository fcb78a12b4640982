"""Load: consecutive batches into one table and many tables in one run end equal to the source.

The normal run is short; `--long` runs the soak at 200 batches of 1,000 changes and 20 tables.
Times are printed (and plotted by soak.py), never asserted.
"""
from cdc_assets.core.reconcile import discrepancies

from .soak import soak, wide


def test_consecutive_batches_end_equal_to_the_source(spark, tmp_path, long_run):
    batches, per_batch = (200, 1000) if long_run else (8, 300)
    result = soak(str(tmp_path / "soak"), batches, per_batch, echo=lambda line: print(line, flush=True))
    secs = [t[1] for t in result["times"]]
    print(f"soak: {batches} batches, {sum(secs) / len(secs):.2f}s per batch on average")
    assert result["failures"] == 0
    assert len(result["times"]) == batches
    assert discrepancies(result["reconciliation"]) == 0, result["reconciliation"]


def test_many_tables_in_one_run_each_equal_to_its_source(spark, tmp_path, long_run):
    tables = 20 if long_run else 5
    result = wide(str(tmp_path / "wide"), tables, 1000 if long_run else 300)
    print(f"wide: {tables} tables in {result['seconds']}s")
    assert result["failed"] == []
    assert {t: discrepancies(r) for t, r in result["reports"].items()} == {t: 0 for t in result["reports"]}
